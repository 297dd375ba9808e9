"""The official checkpoint's key table: which arrays fill which variable of a model.

This is the one place that spells the official key layout (pre-Linen names,
as released): the transformer's `Transformer/encoderblock_{i}/...`, the
embedding, class token, position embedding and head, and the hybrids' ResNet
trunk (`conv_root`, `gn_root`, `block{s}/unit{u}/...`); and BiT's release
layout (`resnet/root_block/...`, `bit_rows`). The rows are generated from the
model's own layer names, which follow the checkpoint's.
"""

import dataclasses
import math
import re

import numpy as np

from keras_vit import layer_names
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.variants import VARIANTS

__all__ = ["Row", "layout", "trunk_rows", "normalize_keys", "fits", "is_trunk_key", "is_head_key",
           "square_grid", "describe_architecture", "POS_EMBED_KEY", "HEAD_KERNEL_KEY",
           "PRE_LOGITS_KERNEL_KEY", "DROPPABLE_PREFIXES", "POOLING_PREFIXES", "TRUNK_PREFIXES",
           "released_shape",
           "BIT_ROOT_KEY", "BIT_HEAD_KERNEL_KEY", "bit_rows", "is_bit_model", "describe_bit",
           "official_arrays", "EMBEDDING_KERNEL", "EMBEDDING_BIAS", "CLS_KEY", "ENCODER_NORM_SCALE",
           "ENCODER_NORM_BIAS", "PRE_LOGITS_BIAS_KEY", "HEAD_BIAS_KEY", "BLOCK", "ATTENTION",
           "LN0_SCALE", "LN0_BIAS", "LN2_SCALE", "LN2_BIAS", "QUERY_KERNEL", "QUERY_BIAS",
           "KEY_KERNEL", "KEY_BIAS", "VALUE_KERNEL", "VALUE_BIAS", "OUT_KERNEL", "OUT_BIAS",
           "MLP0_KERNEL", "MLP0_BIAS", "MLP1_KERNEL", "MLP1_BIAS", "TRUNK_ROOT_KERNEL",
           "TRUNK_ROOT_SCALE", "TRUNK_ROOT_BIAS", "UNIT", "UNIT_PARTS", "UNIT_CONV_KERNEL",
           "UNIT_NORM", "DIST_TOKEN_KEY", "REG_TOKEN_KEY", "PRE_NORM_SCALE", "PRE_NORM_BIAS",
           "LS1_SCALE", "LS3_SCALE", "HEAD_DIST_KERNEL_KEY", "HEAD_DIST_BIAS_KEY", "MAP_PROBE",
           "MAP_QUERY_KERNEL", "MAP_QUERY_BIAS", "MAP_KEY_KERNEL", "MAP_KEY_BIAS",
           "MAP_VALUE_KERNEL", "MAP_VALUE_BIAS", "MAP_OUT_KERNEL", "MAP_OUT_BIAS", "MAP_LN_SCALE",
           "MAP_LN_BIAS", "MAP_MLP0_KERNEL", "MAP_MLP0_BIAS", "MAP_MLP1_KERNEL", "MAP_MLP1_BIAS", "MAP",
           "linen_key", "SCANNED_BLOCK", "LINEN_POS_EMBED_KEY", "MLP_VALUE_KERNEL",
           "MLP_VALUE_BIAS", "MLP_NORM_SCALE", "MLP_NORM_BIAS", "part_keys"]

# The official keys, as released (pre-Linen names); "{i}" is an encoder block's index, "{s}"
# and "{u}" a hybrid trunk's stage and unit (both from 1). Every other module names a key
# through these: the format tables (formats/*.py) are rows of these templates.
EMBEDDING_KERNEL, EMBEDDING_BIAS = "embedding/kernel", "embedding/bias"
CLS_KEY = "cls"
POS_EMBED_KEY = "Transformer/posembed_input/pos_embedding"
ENCODER_NORM_SCALE = "Transformer/encoder_norm/scale"
ENCODER_NORM_BIAS = "Transformer/encoder_norm/bias"
PRE_LOGITS_KERNEL_KEY = "pre_logits/kernel"  # (D, representation size)
PRE_LOGITS_BIAS_KEY = "pre_logits/bias"
HEAD_KERNEL_KEY = "head/kernel"  # (features, classes): the head's class count
HEAD_BIAS_KEY = "head/bias"
BLOCK = "Transformer/encoderblock_{i}"
ATTENTION = BLOCK + "/MultiHeadDotProductAttention_1"
LN0_SCALE, LN0_BIAS = BLOCK + "/LayerNorm_0/scale", BLOCK + "/LayerNorm_0/bias"
LN2_SCALE, LN2_BIAS = BLOCK + "/LayerNorm_2/scale", BLOCK + "/LayerNorm_2/bias"
QUERY_KERNEL, QUERY_BIAS = ATTENTION + "/query/kernel", ATTENTION + "/query/bias"
KEY_KERNEL, KEY_BIAS = ATTENTION + "/key/kernel", ATTENTION + "/key/bias"
VALUE_KERNEL, VALUE_BIAS = ATTENTION + "/value/kernel", ATTENTION + "/value/bias"
OUT_KERNEL, OUT_BIAS = ATTENTION + "/out/kernel", ATTENTION + "/out/bias"
MLP0_KERNEL, MLP0_BIAS = BLOCK + "/MlpBlock_3/Dense_0/kernel", BLOCK + "/MlpBlock_3/Dense_0/bias"
MLP1_KERNEL, MLP1_BIAS = BLOCK + "/MlpBlock_3/Dense_1/kernel", BLOCK + "/MlpBlock_3/Dense_1/bias"
# The families' additions (keras_vit/variants/table.py FAMILIES), spelled in the same style: DeiT's
# distillation token and head, DINOv2's register tokens, LayerScale after each block's
# attention and MLP, CLIP's LayerNorm before the encoder, and SigLIP's attention-pooling head
# as big_vision names it (MAPHead_0/...).
DIST_TOKEN_KEY, REG_TOKEN_KEY = "dist_token", "reg_token"  # (1, 1, D), (1, registers, D)
PRE_NORM_SCALE, PRE_NORM_BIAS = "Transformer/pre_norm/scale", "Transformer/pre_norm/bias"
LS1_SCALE, LS3_SCALE = BLOCK + "/LayerScale_1/scale", BLOCK + "/LayerScale_3/scale"
# A split SwiGLU's value projection (its gate is Dense_0), and the LayerNorm inside the MLP
# before Dense_1 (EVA-02): named by their layers in keras_vit/layers/mlp.py.
MLP_VALUE_KERNEL = BLOCK + "/MlpBlock_3/Dense_value/kernel"
MLP_VALUE_BIAS = BLOCK + "/MlpBlock_3/Dense_value/bias"
MLP_NORM_SCALE = BLOCK + "/MlpBlock_3/LayerNorm_0/scale"
MLP_NORM_BIAS = BLOCK + "/MlpBlock_3/LayerNorm_0/bias"
HEAD_DIST_KERNEL_KEY, HEAD_DIST_BIAS_KEY = "head_dist/kernel", "head_dist/bias"


def part_keys(name):
    """The official keys of a part outside the blocks that no row of `layout` names: its
    arrays under its layer's `name` ("embedding_norm/scale"), as a block's parts are under
    theirs, so a new part brings its keys with its name (keras_vit/layer_names.py):
    {"kernel", "bias"} of a dense layer, {"scale", "bias"} of a norm."""
    return {array: f"{name}/{array}" for array in ("kernel", "scale", "bias")}


MAP = "MAPHead_0"
MAP_PROBE = MAP + "/probe"  # (1, 1, D)
MAP_ATTENTION = MAP + "/MultiHeadDotProductAttention_0"
MAP_QUERY_KERNEL, MAP_QUERY_BIAS = MAP_ATTENTION + "/query/kernel", MAP_ATTENTION + "/query/bias"
MAP_KEY_KERNEL, MAP_KEY_BIAS = MAP_ATTENTION + "/key/kernel", MAP_ATTENTION + "/key/bias"
MAP_VALUE_KERNEL, MAP_VALUE_BIAS = MAP_ATTENTION + "/value/kernel", MAP_ATTENTION + "/value/bias"
MAP_OUT_KERNEL, MAP_OUT_BIAS = MAP_ATTENTION + "/out/kernel", MAP_ATTENTION + "/out/bias"
MAP_LN_SCALE, MAP_LN_BIAS = MAP + "/LayerNorm_0/scale", MAP + "/LayerNorm_0/bias"
MAP_MLP0_KERNEL, MAP_MLP0_BIAS = MAP + "/MlpBlock_0/Dense_0/kernel", MAP + "/MlpBlock_0/Dense_0/bias"
MAP_MLP1_KERNEL, MAP_MLP1_BIAS = MAP + "/MlpBlock_0/Dense_1/kernel", MAP + "/MlpBlock_0/Dense_1/bias"
# big_vision's Linen spelling of the same keys (normalize_keys reads it back): a block's parts
# numbered from 0, a top-level position embedding, and, in scanned files, every block's array
# stacked on a leading axis under one name.
_LINEN_PARTS = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
                "LayerNorm_2": "LayerNorm_1", "MlpBlock_3": "MlpBlock_0"}
LINEN_POS_EMBED_KEY = "pos_embedding"
SCANNED_BLOCK = "Transformer/encoderblock/"


def linen_key(official):
    """An official key (or template) in big_vision's Linen spelling."""
    if official == POS_EMBED_KEY:
        return LINEN_POS_EMBED_KEY
    if not official.startswith(BLOCK):
        return official
    for released, linen in _LINEN_PARTS.items():
        official = official.replace(f"/{released}/", f"/{linen}/")
    return official


# The hybrids' ResNet trunk.
TRUNK_ROOT_KERNEL = "conv_root/kernel"
TRUNK_ROOT_SCALE, TRUNK_ROOT_BIAS = "gn_root/scale", "gn_root/bias"
UNIT = "block{s}/unit{u}"
# A unit's convolutions and their GroupNorms, by name: conv1 + gn1 ... conv_proj + gn_proj.
UNIT_PARTS = (("conv1", "gn1"), ("conv2", "gn2"), ("conv3", "gn3"), ("conv_proj", "gn_proj"))
UNIT_CONV_KERNEL = {conv: f"{UNIT}/{conv}/kernel" for conv, _ in UNIT_PARTS}
UNIT_NORM = {norm: (f"{UNIT}/{norm}/scale", f"{UNIT}/{norm}/bias") for _, norm in UNIT_PARTS}
# BiT's release files (big_transfer): every key under "resnet/".
BIT_ROOT_KEY = "resnet/root_block/standardized_conv2d/kernel"  # (7, 7, 3, 64 * width)
BIT_HEAD_KERNEL_KEY = "resnet/head/conv2d/kernel"  # (1, 1, features, classes)
HEAD_PREFIXES = ("head/", "head_dist/", "resnet/head/")
# Keys a model may leave unused: a fine-tuned model drops the pre-training head.
DROPPABLE_PREFIXES = ("pre_logits/", *HEAD_PREFIXES)
# Keys a model that pools otherwise leaves unread (SigLIP's MAP head under pooling=None or
# "token"): a loaded model's choice, never a backbone's export (training/transfer.py keeps them).
POOLING_PREFIXES = (MAP + "/",)
# Every key of the hybrids' ResNet trunk starts with one of these.
TRUNK_PREFIXES = ("conv_root/", "gn_root/", "block")


@dataclasses.dataclass
class Row:
    """Checkpoint keys whose arrays, combined, become one Keras variable."""

    keys: tuple
    variable: object
    combine: object = None  # arrays -> array; None means a single key copied as is
    shapes: tuple = None  # the checkpoint shape each key must have

    def value(self, arrays):
        parts = [arrays[k] for k in self.keys]
        return self.combine(parts) if self.combine else parts[0]


def is_trunk_key(key):
    return key.startswith(TRUNK_PREFIXES)


def is_head_key(key):
    return key.startswith(HEAD_PREFIXES)


def fits(found, expected):
    """Whether an array of shape `found` fills a variable of shape `expected`."""
    # GroupNorm parameters are stored as (1, 1, 1, C) in released hybrid files.
    return found == expected or (len(expected) == 1 and found == (1, 1, 1, expected[0]))


def square_grid(count):
    """(side, side) when `count` position-embedding tokens form a square grid, else None."""
    side = math.isqrt(max(count, 0))
    return (side, side) if side * side == count and side > 0 else None


def normalize_keys(arrays):
    """Maps the accepted layouts onto the released pre-Linen one.

    Accepted: `opt/target/` (old optimizer dumps) and `params/` (big_vision)
    prefixes; Linen block names (MultiHeadDotProductAttention_0, LayerNorm_1,
    MlpBlock_0); big_vision's top-level `pos_embedding`. Two keys that name the
    same parameter (`params/cls` and `cls`) raise `CheckpointError`: which one
    is meant cannot be known, and silently keeping either would be a guess.
    """
    out, origin = {}, {}
    for key, value in arrays.items():
        stored = key
        for prefix in ("opt/target/", "params/"):
            if key.startswith(prefix):
                key = key[len(prefix):]
        if key == "pos_embedding":
            key = POS_EMBED_KEY
        key = re.sub(r"(encoderblock_\d+)/MultiHeadDotProductAttention_0/",
                     r"\1/MultiHeadDotProductAttention_1/", key)
        key = re.sub(r"(encoderblock_\d+)/LayerNorm_1/", r"\1/LayerNorm_2/", key)
        key = re.sub(r"(encoderblock_\d+)/MlpBlock_0/", r"\1/MlpBlock_3/", key)
        if key in out:
            raise CheckpointError(f"{origin[key]!r} and {stored!r} are the same parameter "
                                  f"{key!r} in two layouts; a checkpoint holds each parameter "
                                  "once. No weights were changed.")
        out[key], origin[key] = value, stored
    return out


def layout(model):
    """The rows that fill `model` (a ViT, or a ResNetV2 trunk) from a checkpoint."""
    if is_bit_model(model):
        return bit_rows(model)
    rows = []
    names = {layer.name for layer in model.layers}

    def dense(prefix, layer):
        rows.append(Row((f"{prefix}/kernel",), layer.kernel))
        if layer.bias is not None:  # CLIP's patch embedding has none
            rows.append(Row((f"{prefix}/bias",), layer.bias))

    def norm(prefix, layer):
        # a LayerNorm's gamma and beta, or an RMSNorm's scale alone (keras_vit/layers/norms.py)
        gamma = getattr(layer, "gamma", None)
        rows.append(Row((f"{prefix}/scale",), layer.scale if gamma is None else gamma))
        if getattr(layer, "beta", None) is not None:
            rows.append(Row((f"{prefix}/bias",), layer.beta))

    if layer_names.RESNET in names:
        rows += trunk_rows(model.get_layer(layer_names.RESNET))
    if layer_names.EMBEDDING in names:
        dense(_scope(EMBEDDING_KERNEL), model.get_layer(layer_names.EMBEDDING))
    if layer_names.CLS in names:
        rows.append(Row((CLS_KEY,), model.get_layer(layer_names.CLS).cls))
    for layer, key in ((layer_names.DIST_TOKEN, DIST_TOKEN_KEY),
                       (layer_names.REG_TOKEN, REG_TOKEN_KEY)):
        if layer in names:
            rows.append(Row((key,), model.get_layer(layer).tokens))
    if layer_names.POSEMBED_INPUT in names:
        rows.append(Row((POS_EMBED_KEY,),
                        model.get_layer(layer_names.POSEMBED_INPUT).pos_embedding))
    if layer_names.PRE_NORM in names:
        norm(_scope(PRE_NORM_SCALE), model.get_layer(layer_names.PRE_NORM))
    block = 0
    while layer_names.block_name(block) in names:
        rows += _block_rows(BLOCK.format(i=block), model.get_layer(layer_names.block_name(block)))
        block += 1
    if layer_names.ENCODER_NORM in names:
        norm(_scope(ENCODER_NORM_SCALE), model.get_layer(layer_names.ENCODER_NORM))
    if layer_names.POOLED_NORM in names:  # the same weights, after the pooling (EVA-02)
        norm(_scope(ENCODER_NORM_SCALE), model.get_layer(layer_names.POOLED_NORM))
    if layer_names.MAP_POOL in names:
        rows += _map_head_rows(model.get_layer(layer_names.MAP_POOL))
    for name, key in ((layer_names.PRE_LOGITS, PRE_LOGITS_KERNEL_KEY),
                      (layer_names.HEAD, HEAD_KERNEL_KEY), (layer_names.HEAD_DIST, HEAD_DIST_KERNEL_KEY)):
        if name in names:
            dense(_scope(key), model.get_layer(name))
    for layer in model.layers:  # every other part with weights, under its own name
        if layer.name in _LAID_OUT or layer_names.is_block(layer.name) or not layer.weights:
            continue
        if getattr(layer, "kernel", None) is not None:
            dense(layer.name, layer)
        elif getattr(layer, "gamma", None) is not None or getattr(layer, "scale", None) is not None:
            norm(layer.name, layer)
        else:
            raise TypeError(f"{layer.name!r} ({type(layer).__name__}) has weights that are "
                            "neither a dense layer's nor a norm's; layout() needs its rows.")
    for row in rows:
        if row.shapes is None:
            row.shapes = (tuple(row.variable.shape),)
    return rows


# The parts `layout` names row by row (their keys are the official release's, not their names).
_LAID_OUT = {layer_names.RESNET, layer_names.EMBEDDING, layer_names.CLS, layer_names.DIST_TOKEN,
             layer_names.REG_TOKEN, layer_names.POSEMBED_INPUT, layer_names.PRE_NORM,
             layer_names.ENCODER_NORM, layer_names.POOLED_NORM, layer_names.MAP_POOL,
             layer_names.PRE_LOGITS, layer_names.HEAD, layer_names.HEAD_DIST}


def _scope(key):
    """The scope a key's array sits in: "Transformer/encoder_norm/scale" -> "Transformer/encoder_norm"."""
    return key.rsplit("/", 1)[0]


def trunk_rows(trunk):
    """The rows of a `ResNetTrunk`: conv_root, gn_root, then every bottleneck unit's
    block{s}/unit{u}/{conv1,conv2,conv3,conv_proj}/kernel and gn{1,2,3,_proj}/{scale,bias}."""
    pairs = [("conv_root/kernel", trunk.conv_root.kernel),
             ("gn_root/scale", trunk.gn_root.gamma), ("gn_root/bias", trunk.gn_root.beta)]
    for s, u, unit in trunk.units:
        for conv, norm in (("conv1", "gn1"), ("conv2", "gn2"), ("conv3", "gn3"),
                           ("conv_proj", "gn_proj")):
            if getattr(unit, conv) is None:  # the projection exists in a stage's first unit
                continue
            pairs.append((f"block{s}/unit{u}/{conv}/kernel", getattr(unit, conv).kernel))
            pairs.append((f"block{s}/unit{u}/{norm}/scale", getattr(unit, norm).gamma))
            pairs.append((f"block{s}/unit{u}/{norm}/bias", getattr(unit, norm).beta))
    return [Row((key,), variable, shapes=(tuple(variable.shape),)) for key, variable in pairs]


def is_bit_model(model):
    """Whether `model` is a BiT ResNetV2 (`keras_vit.BiT`): it has BiT's root block."""
    return layer_names.ROOT_BLOCK in {layer.name for layer in model.layers}


def bit_rows(model):
    """The rows of a `keras_vit.BiT` model, in big_transfer's release layout:
    resnet/root_block, resnet/block{s}/unit{uu}/{a,b,c}/{standardized_conv2d,group_norm},
    a/proj in a stage's first unit, resnet/group_norm and the 1x1 conv head."""
    pairs = [(BIT_ROOT_KEY, model.get_layer(layer_names.ROOT_BLOCK).kernel)]
    for layer in model.layers:
        if not layer_names.is_bit_unit(layer.name):
            continue
        prefix = "resnet/" + layer.name.replace("_", "/")  # block1_unit01 -> resnet/block1/unit01
        for part in "abc":
            norm = getattr(layer, f"{part}_norm")
            pairs += [(f"{prefix}/{part}/standardized_conv2d/kernel",
                       getattr(layer, f"{part}_conv").kernel),
                      (f"{prefix}/{part}/group_norm/gamma", norm.gamma),
                      (f"{prefix}/{part}/group_norm/beta", norm.beta)]
        if layer.a_proj is not None:
            pairs.append((f"{prefix}/a/proj/standardized_conv2d/kernel", layer.a_proj.kernel))
    norm = model.get_layer(layer_names.GROUP_NORM)
    pairs += [("resnet/group_norm/gamma", norm.gamma), ("resnet/group_norm/beta", norm.beta)]
    rows = [Row((key,), variable, shapes=(tuple(variable.shape),)) for key, variable in pairs]
    if layer_names.HEAD in {layer.name for layer in model.layers}:
        head = model.get_layer(layer_names.HEAD)  # the 1x1 conv on the pooled features is this Dense
        rows += [Row((BIT_HEAD_KERNEL_KEY,), head.kernel, shapes=((1, 1, *head.kernel.shape),)),
                 Row(("resnet/head/conv2d/bias",), head.bias, shapes=(tuple(head.bias.shape),))]
    return rows


def describe_bit(shapes):
    """"BiT-R50x1 (depth 50, width 1)" for BiT release arrays' shapes, None for others."""
    root = shapes.get(BIT_ROOT_KEY)
    if root is None or len(root) != 4:
        return None
    units = {}
    for key in shapes:
        if (m := re.match(r"resnet/block(\d+)/unit(\d+)/", key)):
            units.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    counts = tuple(len(units[s]) for s in sorted(units))
    depth = 3 * sum(counts) + 2
    width = root[3] / 64
    width = int(width) if width == int(width) else width
    return f"BiT-R{depth}x{width} (depth {depth}, width {width}, units {counts})"


# A block's weights by their names in Keras -> in the official layout; weights of other
# names (Keras' LoRA factors on a Dense) are not the checkpoint's.
_OFFICIAL_WEIGHT_NAMES = {"kernel": "kernel", "bias": "bias", "gamma": "scale", "beta": "bias",
                          "scale": "scale"}


def _block_rows(prefix, block):
    """An encoder block's rows, in the order its weights were made. The block's layers are named
    as the official scopes ("LayerNorm_0", "MlpBlock_3/Dense_0", "LayerScale_1"), so each weight's
    key is its path under the block ("Transformer/encoderblock_0/LayerNorm_0/scale" for
    encoderblock_0/LayerNorm_0/gamma): a new part of a block brings its keys by its name. Only
    the attention, whose official query, key and value are the columns of keras_vit's fused
    kernel, has rows of its own."""
    attention = {id(v) for v in block.attention.weights}
    rows, attention_rows = [], _attention_rows(f"{prefix}/MultiHeadDotProductAttention_1",
                                               block.attention)
    for variable in block.weights:
        if id(variable) in attention:  # the attention's rows where its first weight is
            rows, attention_rows = rows + attention_rows, []
            continue
        parts = variable.path.split("/")
        scope, weight = parts[parts.index(block.name) + 1:-1], parts[-1]
        if weight in _OFFICIAL_WEIGHT_NAMES:
            key = "/".join([prefix, *scope, _OFFICIAL_WEIGHT_NAMES[weight]])
            rows.append(Row((key,), variable))
    return rows


def _attention_rows(prefix, attention):
    # The official query/key/value kernels (D, heads, head_dim) are the column blocks of
    # keras_vit's fused (D, 3 * D) kernel; the output kernel is (heads, head_dim, D).
    width, heads = attention.qkv_kernel.shape[0], attention.num_heads
    head_dim = width // heads
    qkv = ("query", "key", "value")
    # The biases the attention has (EVA's and DINOv3's have no key bias, or none at all).
    biased = attention.biased_projections
    bias_rows = [Row(tuple(f"{prefix}/{n}/bias" for n in biased), attention.qkv_bias,
                     lambda a: np.concatenate([x.reshape(width) for x in a]),
                     ((heads, head_dim),) * len(biased))] if biased else []
    return [
        Row(tuple(f"{prefix}/{n}/kernel" for n in qkv), attention.qkv_kernel,
            lambda a: np.concatenate([x.reshape(width, width) for x in a], axis=1),
            ((width, heads, head_dim),) * 3),
        *bias_rows,
        Row((f"{prefix}/out/kernel",), attention.out_kernel,
            lambda a: a[0].reshape(width, width), ((heads, head_dim, width),)),
        *([Row((f"{prefix}/out/bias",), attention.out_bias)] if attention.out_bias is not None
          else []),
    ]


def _map_head_rows(head):
    """The rows of a `MAPHead`, in big_vision's MAPHead_0 layout: the probe, the attention's
    query (D, heads, head_dim) and key and value (fused in keras_vit's (D, 2 D) kernel), the
    output (heads, head_dim, D), the LayerNorm and the MLP."""
    width, heads = head.query_kernel.shape[0], head.num_heads
    head_dim = width // heads
    rows = [
        Row((MAP_PROBE,), head.probe),
        Row((MAP_QUERY_KERNEL,), head.query_kernel, lambda a: a[0].reshape(width, width),
            ((width, heads, head_dim),)),
        Row((MAP_QUERY_BIAS,), head.query_bias, lambda a: a[0].reshape(width), ((heads, head_dim),)),
        Row((MAP_KEY_KERNEL, MAP_VALUE_KERNEL), head.kv_kernel,
            lambda a: np.concatenate([x.reshape(width, width) for x in a], axis=1),
            ((width, heads, head_dim),) * 2),
        Row((MAP_KEY_BIAS, MAP_VALUE_BIAS), head.kv_bias,
            lambda a: np.concatenate([x.reshape(width) for x in a]), ((heads, head_dim),) * 2),
        Row((MAP_OUT_KERNEL,), head.out_kernel, lambda a: a[0].reshape(width, width),
            ((heads, head_dim, width),)),
        Row((MAP_OUT_BIAS,), head.out_bias),
        Row((MAP_LN_SCALE,), head.norm.gamma), Row((MAP_LN_BIAS,), head.norm.beta),
    ]
    for key, variable in ((MAP_MLP0_KERNEL, head.mlp.dense_0.kernel),
                          (MAP_MLP0_BIAS, head.mlp.dense_0.bias),
                          (MAP_MLP1_KERNEL, head.mlp.dense_1.kernel),
                          (MAP_MLP1_BIAS, head.mlp.dense_1.bias)):
        rows.append(Row((key,), variable))
    return rows


def describe_architecture(arrays):
    """A human description of the architecture a checkpoint's arrays belong to; `arrays` maps
    official keys to arrays, headers or bare shapes (a header-only check has no arrays)."""
    if BIT_ROOT_KEY in arrays:
        return describe_bit({k: tuple(getattr(a, "shape", a)) for k, a in arrays.items()})
    kernel = arrays.get(EMBEDDING_KERNEL)
    kernel = None if kernel is None else tuple(getattr(kernel, "shape", kernel))
    if kernel is None or len(kernel) != 4:
        return None
    depth = len({m.group(1) for k in arrays if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))})
    hybrid = TRUNK_ROOT_KERNEL in arrays
    for v in VARIANTS.values():
        found = (kernel[3], depth, kernel[0], hybrid, CLS_KEY in arrays)
        if (v.width, v.depth, v.patch_size, v.is_hybrid, v.classifier == "token") == found \
                and (not hybrid or kernel[2] == v.trunk_channels):
            return f"{v.name} (width {v.width}, depth {depth}, patch {kernel[0]})"
    return f"a ViT of width {kernel[3]}, depth {depth}, patch {kernel[0]}"


def released_shape(key, shape):
    """The shape `key` has in released files: hybrids store GroupNorm parameters (1, 1, 1, C)."""
    is_group_norm = is_trunk_key(key) and key.split("/")[-2].startswith("gn")
    return (1, 1, 1, *shape) if is_group_norm else tuple(shape)


def official_arrays(model):
    """{official key: NumPy array} of every weight of `model`, in the released shapes: the
    rows of `layout` run backwards, so a written model reloads bit-identically.

    Refuses a model holding a NaN or an infinity (a diverged run): every loader, keras_vit's
    included, refuses such a file, so it is never written. A model trained with LoRA is
    written merged (keras_vit/lora.py), so the file is an ordinary checkpoint.
    """
    from keras_vit.lora import merge_lora  # here: importing checkpoints loads no Keras layers

    model = merge_lora(model)
    arrays = {}
    for row in layout(model):
        value = np.asarray(row.variable.numpy(), dtype=np.float32)
        if not np.all(np.isfinite(value)):
            bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
            raise CheckpointError(f"{model.name}: the weight {row.variable.path} holds {bad} NaN or "
                                  "infinite values (a diverged run?); nothing was written.")
        parts = np.split(value, len(row.keys), axis=-1) if len(row.keys) > 1 else [value]
        for key, part, shape in zip(row.keys, parts, row.shapes):
            arrays[key] = part.reshape(released_shape(key, shape))
    return arrays
