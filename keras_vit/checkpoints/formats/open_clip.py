"""OpenCLIP (and OpenAI CLIP) state dicts as .safetensors: the image tower under `visual.`.

open_clip's `VisionTransformer` (OpenAI's CLIP layout): `visual.conv1` (no bias),
`visual.class_embedding` (D,), `visual.positional_embedding` (tokens, D), `visual.ln_pre`,
`visual.transformer.resblocks.{i}` (`ln_1`, `attn.in_proj_*` fused (3D, D), `attn.out_proj`,
`ln_2`, `mlp.c_fc`, `mlp.c_proj`), `visual.ln_post` and `visual.proj` (D, E), the projection
into the shared embedding, applied as `x @ proj` without a bias. The text tower and
`logit_scale` are left. timm converts the same file in `_convert_openai_clip`; like timm,
keras_vit makes `proj` the head, with a zero bias. open_clip computes LayerNorm epsilon 1e-5
and erf GELU or QuickGELU, which a state dict does not record: the variant says which (the
CLIP rows are OpenAI's QuickGELU). Position embeddings at another size: bicubic with
antialias, as open_clip's `resize_pos_embed` and timm do.

An OpenCLIP Hub folder (`open_clip_model.safetensors` beside `open_clip_config.json`, as
open_clip's `push_to_hf_hub` writes it) is the same state dict with its config, which records
the architecture, the activation and the normalisation (open_clip_config.py): from it,
`keras_vit.from_pretrained` builds the tower without being told which.
"""

import os

import numpy as np

from keras_vit.checkpoints.formats.base import (
    ArrayHeader,
    CheckpointFormat,
    CheckpointInfo,
    CheckpointReader,
)
from keras_vit.checkpoints.formats.open_clip_config import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    read_open_clip_config,
)
from keras_vit.checkpoints.formats.rows import (
    ADD_BATCH_AXIS,
    CONV,
    FUSED_QKV,
    FUSED_QKV_BIAS,
    HEADS_OUT,
    LINEAR,
    KeyRow,
    Transform,
    from_official,
    to_official,
)
from keras_vit.checkpoints.formats.safetensors import open_safetensors
from keras_vit.checkpoints.formats.timm import open_weights
from keras_vit.checkpoints.layout import (
    CLS_KEY,
    EMBEDDING_KERNEL,
    ENCODER_NORM_BIAS,
    ENCODER_NORM_SCALE,
    HEAD_BIAS_KEY,
    HEAD_KERNEL_KEY,
    KEY_BIAS,
    KEY_KERNEL,
    LN0_BIAS,
    LN0_SCALE,
    LN2_BIAS,
    LN2_SCALE,
    MLP0_BIAS,
    MLP0_KERNEL,
    MLP1_BIAS,
    MLP1_KERNEL,
    OUT_BIAS,
    OUT_KERNEL,
    POS_EMBED_KEY,
    PRE_NORM_BIAS,
    PRE_NORM_SCALE,
    QUERY_BIAS,
    QUERY_KERNEL,
    VALUE_BIAS,
    VALUE_KERNEL,
)
from keras_vit.errors import ArgumentError

__all__ = ["FORMAT", "OPEN_CLIP_ROWS", "open_clip_to_official", "official_to_open_clip"]

VISUAL = "visual."  # the image tower's prefix


def _projection_inverse(parts):
    kernel, bias = parts
    if np.any(bias):
        raise ArgumentError("open_clip's projection has no bias; this head's bias is not zero.")
    return kernel


# The class embedding (D,) <-> the official class token (1, 1, D).
TOKEN = Transform("token", lambda a, heads: a.reshape(1, 1, -1) if a.ndim == 1 else a,
                  lambda a: a.reshape(-1))
# The projection (D, E), applied as x @ proj, is a Dense kernel as it is; its bias is zero.
PROJECTION = Transform(
    "projection", lambda a, heads: [a, np.zeros(a.shape[-1:], a.dtype)], _projection_inverse)

_BLOCK = VISUAL + "transformer.resblocks.{i}."
OPEN_CLIP_ROWS = (
    KeyRow(VISUAL + "conv1.weight", EMBEDDING_KERNEL, CONV),
    KeyRow(VISUAL + "class_embedding", CLS_KEY, TOKEN),
    KeyRow(VISUAL + "positional_embedding", POS_EMBED_KEY, ADD_BATCH_AXIS),
    KeyRow(VISUAL + "ln_pre.weight", PRE_NORM_SCALE),
    KeyRow(VISUAL + "ln_pre.bias", PRE_NORM_BIAS),
    KeyRow(_BLOCK + "ln_1.weight", LN0_SCALE),
    KeyRow(_BLOCK + "ln_1.bias", LN0_BIAS),
    KeyRow(_BLOCK + "attn.in_proj_weight", (QUERY_KERNEL, KEY_KERNEL, VALUE_KERNEL), FUSED_QKV),
    KeyRow(_BLOCK + "attn.in_proj_bias", (QUERY_BIAS, KEY_BIAS, VALUE_BIAS), FUSED_QKV_BIAS),
    KeyRow(_BLOCK + "attn.out_proj.weight", OUT_KERNEL, HEADS_OUT),
    KeyRow(_BLOCK + "attn.out_proj.bias", OUT_BIAS),
    KeyRow(_BLOCK + "ln_2.weight", LN2_SCALE),
    KeyRow(_BLOCK + "ln_2.bias", LN2_BIAS),
    KeyRow(_BLOCK + "mlp.c_fc.weight", MLP0_KERNEL, LINEAR),
    KeyRow(_BLOCK + "mlp.c_fc.bias", MLP0_BIAS),
    KeyRow(_BLOCK + "mlp.c_proj.weight", MLP1_KERNEL, LINEAR),
    KeyRow(_BLOCK + "mlp.c_proj.bias", MLP1_BIAS),
    KeyRow(VISUAL + "ln_post.weight", ENCODER_NORM_SCALE),
    KeyRow(VISUAL + "ln_post.bias", ENCODER_NORM_BIAS),
    KeyRow(VISUAL + "proj", (HEAD_KERNEL_KEY, HEAD_BIAS_KEY), PROJECTION),
)


def open_clip_to_official(sd, heads=None):
    """The image tower's arrays of an open_clip state dict -> official-key arrays (the text
    tower left). Image-tower keys no row takes pass through as "open_clip:" + key, for the
    strict loader to name."""
    visual = {k: v for k, v in sd.items() if k.startswith(VISUAL)}
    return to_official(OPEN_CLIP_ROWS, visual, heads, unknown_prefix="open_clip:")


def official_to_open_clip(arrays):
    """Official-key arrays (a CLIP model's) -> open_clip's image-tower keys."""
    return from_official(OPEN_CLIP_ROWS, arrays, "open_clip")


def _is_hub_folder(source):
    return source.is_dir and all(os.path.exists(os.path.join(source.path, name))
                                 for name in (CONFIG_NAME, WEIGHTS_NAME))


def _weights(source):
    """The state dict: a file, or a Hub folder's open_clip_model.safetensors (beside which the
    Hub's repositories may hold transformers' model.safetensors, which is not it)."""
    if _is_hub_folder(source):
        path = os.path.join(source.path, WEIGHTS_NAME)
        return source.once("open_clip", lambda: open_safetensors(path))
    return open_weights(source)


def _recognises(source):
    weights = _weights(source)
    return weights is not None and VISUAL + "class_embedding" in weights.shapes


class OpenClipReader(CheckpointReader):
    def __init__(self, source):
        super().__init__(source, FORMAT)
        self._weights = _weights(source)
        # A Hub folder's config: read (and checked) before anything is built.
        self._config = read_open_clip_config(source) if _is_hub_folder(source) else None

    def headers(self, heads=None):
        stand_ins = {k: np.broadcast_to(np.zeros((), np.float32), tuple(s))
                     for k, s in self._weights.shapes.items() if k.startswith(VISUAL)}
        shapes = open_clip_to_official(stand_ins, heads)
        return {k: ArrayHeader(v.shape, np.dtype("float32")) for k, v in shapes.items()}

    def read(self, keys, heads=None):
        visual = [k for k in self._weights.shapes if k.startswith(VISUAL)]  # not the text tower
        arrays = open_clip_to_official(self._weights.read(visual), heads)
        return {k: arrays[k] for k in keys}

    def info(self):
        if self._config is None:
            return CheckpointInfo({k: h.shape for k, h in self.headers().items()},
                                  format="open_clip", layer_norm_epsilon=1e-5)
        variant, layer_norm_epsilon, normalization = self._config
        return CheckpointInfo({k: h.shape for k, h in self.headers(variant.heads).items()},
                              format="open_clip", layer_norm_epsilon=layer_norm_epsilon,
                              approximate_gelu=False, heads=variant.heads,
                              normalization=normalization, variant=variant)


FORMAT = CheckpointFormat(
    name="open_clip",
    description="OpenCLIP / OpenAI CLIP state dict (.safetensors: the image tower under visual.), "
                "or an OpenCLIP Hub folder (open_clip_config.json, open_clip_model.safetensors)",
    recognises=_recognises, open=OpenClipReader, numerics=(False, 1e-5),
    position_resize="bicubic")  # open_clip's resize_pos_embed: bicubic, antialiased
