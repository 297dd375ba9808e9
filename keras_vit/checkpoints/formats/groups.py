"""The official keys by feature, and the rows a library's table builds from them.

A format's table names an official key through these small tables (`QUERY.kernel`,
`NORM1.scale`, `MAP_PROBE`), never through the layout's constants one by one, and builds
its rows in its own spelling with `dense`, `norm`, `attention` and `fused_qkv`: a torch
Linear's "weight" (out, in) and "bias", or a Keras Dense's "kernel" and "bias" (`KERAS`),
a LayerNorm's "weight"/"bias" or "gamma"/"beta" (`KERAS_NORM`).
"""

from typing import NamedTuple

from keras_vit.checkpoints.formats.rows import (
    COPY,
    FUSED_QKV,
    FUSED_QKV_BIAS,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    KERAS_HEADS_IN,
    LINEAR,
    KeyRow,
    bias_free,
)
from keras_vit.checkpoints.layout import (
    CLS_KEY,
    DIST_TOKEN_KEY,
    EMBEDDING_BIAS,
    EMBEDDING_KERNEL,
    ENCODER_NORM_BIAS,
    ENCODER_NORM_SCALE,
    HEAD_BIAS_KEY,
    HEAD_DIST_BIAS_KEY,
    HEAD_DIST_KERNEL_KEY,
    HEAD_KERNEL_KEY,
    KEY_BIAS,
    KEY_KERNEL,
    LN0_BIAS,
    LN0_SCALE,
    LN2_BIAS,
    LN2_SCALE,
    LS1_SCALE,
    LS3_SCALE,
    MAP_KEY_BIAS,
    MAP_KEY_KERNEL,
    MAP_LN_BIAS,
    MAP_LN_SCALE,
    MAP_MLP0_BIAS,
    MAP_MLP0_KERNEL,
    MAP_MLP1_BIAS,
    MAP_MLP1_KERNEL,
    MAP_OUT_BIAS,
    MAP_OUT_KERNEL,
    MAP_PROBE,
    MAP_QUERY_BIAS,
    MAP_QUERY_KERNEL,
    MAP_VALUE_BIAS,
    MAP_VALUE_KERNEL,
    MLP0_BIAS,
    MLP0_KERNEL,
    MLP1_BIAS,
    MLP1_KERNEL,
    MLP_NORM_BIAS,
    MLP_NORM_SCALE,
    MLP_VALUE_BIAS,
    MLP_VALUE_KERNEL,
    OUT_BIAS,
    OUT_KERNEL,
    POS_EMBED_KEY,
    PRE_LOGITS_BIAS_KEY,
    PRE_LOGITS_KERNEL_KEY,
    PRE_NORM_BIAS,
    PRE_NORM_SCALE,
    QUERY_BIAS,
    QUERY_KERNEL,
    REG_TOKEN_KEY,
    VALUE_BIAS,
    VALUE_KERNEL,
    part_keys,
)

__all__ = ["Dense", "Norm", "TORCH", "KERAS", "KERAS_NORM", "dense", "norm", "attention",
           "fused_qkv", "part_dense", "part_norm", "PATCH", "CLS", "POSITIONS", "DIST_TOKEN", "REGISTERS",
           "NORM1", "NORM2", "QUERY", "KEY", "VALUE", "OUT", "ATTENTION", "MLP_IN", "MLP_OUT", "MLP_VALUE",
           "MLP_NORM", "LAYER_SCALE1",
           "LAYER_SCALE2", "ENCODER_NORM", "PRE_NORM", "PRE_LOGITS", "HEAD", "HEAD_DIST",
           "MAP_PROBE", "MAP_ATTENTION", "MAP_NORM", "MAP_MLP_IN", "MAP_MLP_OUT"]


class Dense(NamedTuple):
    """The official keys of one dense layer."""

    kernel: str
    bias: str


class Norm(NamedTuple):
    """The official keys of one LayerNorm (an RMSNorm has the scale alone)."""

    scale: str
    bias: str


def part_dense(name):
    """The keys of a dense part outside the blocks that layout lays out by its layer `name`
    (layout.part_keys): a new part's table row names its layer, with no line here."""
    keys = part_keys(name)
    return Dense(keys["kernel"], keys["bias"])


def part_norm(name):
    """The keys of a norm outside the blocks laid out by its layer `name` (as part_dense)."""
    keys = part_keys(name)
    return Norm(keys["scale"], keys["bias"])


# The tokens and the embedding.
PATCH = Dense(EMBEDDING_KERNEL, EMBEDDING_BIAS)
CLS, POSITIONS, DIST_TOKEN, REGISTERS = CLS_KEY, POS_EMBED_KEY, DIST_TOKEN_KEY, REG_TOKEN_KEY
# An encoder block ("{i}"): its norms, attention, MLP and LayerScale (after attention, MLP).
NORM1, NORM2 = Norm(LN0_SCALE, LN0_BIAS), Norm(LN2_SCALE, LN2_BIAS)
QUERY, KEY = Dense(QUERY_KERNEL, QUERY_BIAS), Dense(KEY_KERNEL, KEY_BIAS)
VALUE, OUT = Dense(VALUE_KERNEL, VALUE_BIAS), Dense(OUT_KERNEL, OUT_BIAS)
ATTENTION = (QUERY, KEY, VALUE, OUT)
MLP_IN, MLP_OUT = Dense(MLP0_KERNEL, MLP0_BIAS), Dense(MLP1_KERNEL, MLP1_BIAS)
# A split SwiGLU's value projection (MLP_IN is its gate), and the norm inside the MLP.
MLP_VALUE, MLP_NORM = Dense(MLP_VALUE_KERNEL, MLP_VALUE_BIAS), Norm(MLP_NORM_SCALE, MLP_NORM_BIAS)
LAYER_SCALE1, LAYER_SCALE2 = LS1_SCALE, LS3_SCALE
# Around the encoder, and the heads.
ENCODER_NORM, PRE_NORM = Norm(ENCODER_NORM_SCALE, ENCODER_NORM_BIAS), Norm(PRE_NORM_SCALE,
                                                                           PRE_NORM_BIAS)
PRE_LOGITS = Dense(PRE_LOGITS_KERNEL_KEY, PRE_LOGITS_BIAS_KEY)
HEAD, HEAD_DIST = Dense(HEAD_KERNEL_KEY, HEAD_BIAS_KEY), Dense(HEAD_DIST_KERNEL_KEY,
                                                               HEAD_DIST_BIAS_KEY)
# SigLIP's attention-pooling head (big_vision's MAPHead).
MAP_ATTENTION = (Dense(MAP_QUERY_KERNEL, MAP_QUERY_BIAS), Dense(MAP_KEY_KERNEL, MAP_KEY_BIAS),
                 Dense(MAP_VALUE_KERNEL, MAP_VALUE_BIAS), Dense(MAP_OUT_KERNEL, MAP_OUT_BIAS))
MAP_NORM = Norm(MAP_LN_SCALE, MAP_LN_BIAS)
MAP_MLP_IN, MAP_MLP_OUT = Dense(MAP_MLP0_KERNEL, MAP_MLP0_BIAS), Dense(MAP_MLP1_KERNEL,
                                                                       MAP_MLP1_BIAS)

# How a library spells a layer's two arrays after its name.
TORCH = (".weight", ".bias")
KERAS = ("/kernel", "/bias")
KERAS_NORM = ("/gamma", "/beta")


def dense(source, keys, transform=LINEAR, suffixes=TORCH, read_only=False):
    """The two rows of one dense layer stored under `source`: the kernel through `transform`,
    the bias as stored (split into heads where the kernel is)."""
    bias = HEADS_BIAS if transform in (HEADS_IN, KERAS_HEADS_IN) else COPY
    return (KeyRow(source + suffixes[0], keys[0], transform, read_only),
            KeyRow(source + suffixes[1], keys[1], bias, read_only))


def bias_free_dense(weight, keys, transform=LINEAR):
    """The one row of a dense layer stored without a bias (CLIP's projections): its kernel
    through `transform`, its bias read as zero."""
    return (KeyRow(weight, keys, bias_free(transform)),)


def norm(source, keys, suffixes=TORCH, read_only=False):
    """The two rows of one LayerNorm stored under `source`, copied."""
    return dense(source, keys, COPY, suffixes, read_only)


def attention(prefix, names, keys=ATTENTION, transforms=(HEADS_IN, HEADS_OUT), suffixes=TORCH,
              read_only=False):
    """The rows of separate query, key, value and output projections, `names` theirs under
    `prefix`: torch's (D, D) split into heads (`transforms`), Keras' as stored (COPY, COPY)."""
    inward, outward = transforms
    return tuple(row for name, part, transform in zip(names, keys, (inward,) * 3 + (outward,))
                 for row in dense(prefix + name, part, transform, suffixes, read_only))


def fused_qkv(weight, bias, keys=ATTENTION):
    """The rows of a fused query-key-value projection (3D, D) and its bias (3D,)."""
    return (KeyRow(weight, tuple(part.kernel for part in keys[:3]), FUSED_QKV),
            KeyRow(bias, tuple(part.bias for part in keys[:3]), FUSED_QKV_BIAS))
