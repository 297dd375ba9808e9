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

from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import CheckpointFormat, CheckpointInfo, RowTableReader
from keras_vit.checkpoints.formats.open_clip_config import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    read_open_clip_config,
)
from keras_vit.checkpoints.formats.rows import (
    ADD_BATCH_AXIS,
    CONV,
    COPY,
    HEADS_OUT,
    TOKEN_VECTOR,
    KeyRow,
    bias_free,
    to_official,
)
from keras_vit.checkpoints.formats.safetensors import open_safetensors
from keras_vit.checkpoints.formats.timm import open_weights

__all__ = ["FORMAT", "OPEN_CLIP_ROWS", "open_clip_to_official"]

VISUAL = "visual."  # the image tower's prefix

_BLOCK = VISUAL + "transformer.resblocks.{i}."
OPEN_CLIP_ROWS = (
    KeyRow(VISUAL + "conv1.weight", g.PATCH.kernel, CONV),
    KeyRow(VISUAL + "class_embedding", g.CLS, TOKEN_VECTOR),
    KeyRow(VISUAL + "positional_embedding", g.POSITIONS, ADD_BATCH_AXIS),
    *g.norm(VISUAL + "ln_pre", g.PRE_NORM),
    *g.norm(_BLOCK + "ln_1", g.NORM1),
    *g.fused_qkv(_BLOCK + "attn.in_proj_weight", _BLOCK + "attn.in_proj_bias"),
    *g.dense(_BLOCK + "attn.out_proj", g.OUT, HEADS_OUT),
    *g.norm(_BLOCK + "ln_2", g.NORM2),
    *g.dense(_BLOCK + "mlp.c_fc", g.MLP_IN),
    *g.dense(_BLOCK + "mlp.c_proj", g.MLP_OUT),
    *g.norm(VISUAL + "ln_post", g.ENCODER_NORM),
    # The projection (D, E), applied as x @ proj, is a Dense kernel as it is; its bias is zero.
    KeyRow(VISUAL + "proj", g.HEAD, bias_free(COPY)),
)


def open_clip_to_official(sd, heads=None):
    """The image tower's arrays of an open_clip state dict -> official-key arrays (the text
    tower left). Image-tower keys no row takes pass through as "open_clip:" + key, for the
    strict loader to name."""
    visual = {k: v for k, v in sd.items() if k.startswith(VISUAL)}
    return to_official(OPEN_CLIP_ROWS, visual, heads, unknown_prefix="open_clip:")


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


class OpenClipReader(RowTableReader):
    def __init__(self, source):
        weights = _weights(source)  # the image tower's arrays only, not the text tower's
        super().__init__(source, FORMAT, weights, open_clip_to_official,
                         names=[k for k in weights.shapes if k.startswith(VISUAL)])
        # A Hub folder's config: read (and checked) before anything is built.
        self._config = read_open_clip_config(source) if _is_hub_folder(source) else None

    def info(self):
        if self._config is None:
            return CheckpointInfo(self.shapes(), format="open_clip", layer_norm_epsilon=1e-5)
        variant, layer_norm_epsilon, normalization, preprocessing = self._config
        return CheckpointInfo(self.shapes(variant.heads), format="open_clip",
                              layer_norm_epsilon=layer_norm_epsilon, approximate_gelu=False,
                              heads=variant.heads, normalization=normalization, variant=variant,
                              preprocessing=preprocessing)


FORMAT = CheckpointFormat(
    name="open_clip",
    description="OpenCLIP / OpenAI CLIP state dict (.safetensors: the image tower under visual.), "
                "or an OpenCLIP Hub folder (open_clip_config.json, open_clip_model.safetensors)",
    recognises=_recognises, open=OpenClipReader, numerics=(False, 1e-5),
    unrecorded=("activation",),  # OpenAI's QuickGELU or open_clip's GELU: its config says
    position_resize="bicubic")  # open_clip's resize_pos_embed: bicubic, antialiased
