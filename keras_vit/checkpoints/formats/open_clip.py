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
`keras_vit.from_pretrained` builds the tower without being told which. Where the config names
a timm trunk (open_clip's SigLIP), the weights are timm's under `visual.trunk.` (timm's rows)
and its linear projection, if any, `visual.head.proj` (the head).
"""

import os

from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import CheckpointFormat, CheckpointInfo, RowTableReader
from keras_vit.checkpoints.formats.open_clip_config import (
    CONFIG_NAME,
    PICKLED_WEIGHTS_NAME,
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
    to_official,
)
from keras_vit.checkpoints.formats.timm import open_state_dict, open_weights, timm_to_official

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
    *g.bias_free_dense(VISUAL + "proj", g.HEAD, COPY),
)


TRUNK = VISUAL + "trunk."  # a timm trunk's prefix (open_clip's TimmModel)
# TimmModel's projection (timm_proj "linear"): a Linear, with a bias where timm_proj_bias says.
TIMM_HEAD_ROWS = g.bias_free_dense(VISUAL + "head.proj.weight", g.HEAD)
TIMM_HEAD_BIAS_ROWS = g.dense(VISUAL + "head.proj", g.HEAD)


def timm_trunk_to_official(sd, heads=None):
    """A timm trunk's arrays (visual.trunk.*: timm's own names) and its projection
    (visual.head.proj) -> official-key arrays; the text tower left."""
    trunk = {k[len(TRUNK):]: v for k, v in sd.items() if k.startswith(TRUNK)}
    out = timm_to_official(trunk, heads)
    head = {k: v for k, v in sd.items() if k.startswith(VISUAL + "head.")}
    rows = TIMM_HEAD_BIAS_ROWS if VISUAL + "head.proj.bias" in head else TIMM_HEAD_ROWS
    out.update(to_official(rows, head, heads, unknown_prefix="open_clip:"))
    return out


def open_clip_to_official(sd, heads=None):
    """The image tower's arrays of an open_clip state dict -> official-key arrays (the text
    tower left). Image-tower keys no row takes pass through as "open_clip:" + key, for the
    strict loader to name."""
    visual = {k: v for k, v in sd.items() if k.startswith(VISUAL)}
    return to_official(OPEN_CLIP_ROWS, visual, heads, unknown_prefix="open_clip:")


def _hub_weights(source):
    """A Hub folder's weights file (open_clip_model.safetensors, else its pickled copy), or
    None where the source is no folder with open_clip_config.json."""
    if not source.is_dir or not os.path.exists(os.path.join(source.path, CONFIG_NAME)):
        return None
    paths = (os.path.join(source.path, name) for name in (WEIGHTS_NAME, PICKLED_WEIGHTS_NAME))
    return next((path for path in paths if os.path.exists(path)), None)


def _is_hub_folder(source):
    return _hub_weights(source) is not None


def _weights(source):
    """The state dict: a file, or a Hub folder's open_clip_model.safetensors (beside which the
    Hub's repositories may hold transformers' model.safetensors, which is not it)."""
    path = _hub_weights(source)
    if path is not None:
        return source.once("open_clip", lambda: open_state_dict(path))
    return open_weights(source)


def _recognises(source):
    # A Hub folder by its config (a timm trunk has no class_embedding), a file by its names.
    if _is_hub_folder(source):
        return True
    weights = _weights(source)
    return weights is not None and VISUAL + "class_embedding" in weights.shapes


class OpenClipReader(RowTableReader):
    def __init__(self, source):
        # A Hub folder's config: read (and checked) before anything is built.
        self._config = read_open_clip_config(source) if _is_hub_folder(source) else None
        timm_trunk = self._config is not None and self._config[3] is not None
        weights = _weights(source)  # the image tower's arrays only, not the text tower's
        super().__init__(source, FORMAT, weights,
                         timm_trunk_to_official if timm_trunk else open_clip_to_official,
                         names=[k for k in weights.shapes if k.startswith(VISUAL)])

    def info(self):
        if self._config is None:
            return CheckpointInfo(self.shapes(), format="open_clip", layer_norm_epsilon=1e-5)
        variant, layer_norm_epsilon, normalization, _, preprocessing = self._config
        return CheckpointInfo(self.shapes(variant.heads), format="open_clip",
                              layer_norm_epsilon=layer_norm_epsilon, approximate_gelu=False,
                              heads=variant.heads, normalization=normalization, variant=variant,
                              preprocessing=preprocessing)


FORMAT = CheckpointFormat(
    name="open_clip",
    description="OpenCLIP / OpenAI CLIP state dict (.safetensors, or .pt/.bin through torch's "
                "weights-only loader: the image tower under visual.), "
                "or an OpenCLIP Hub folder (open_clip_config.json, open_clip_model.safetensors or "
                "its .bin; OpenAI's tower, or a timm trunk keras_vit has a row for)",
    recognises=_recognises, open=OpenClipReader, numerics=(False, 1e-5),
    unrecorded=("activation",),  # OpenAI's QuickGELU or open_clip's GELU: its config says
    position_resize="bicubic",  # open_clip's resize_pos_embed: bicubic, antialiased
    pickled=True)
