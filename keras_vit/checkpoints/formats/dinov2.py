"""DINOv2's own release files (facebookresearch/dinov2 `dinov2_vits14_pretrain.pth`,
`dinov2_vits14_reg4_pretrain.pth`, ...): a torch state dict, read with torch's weights-only
loader (torch_state_dict.py: no code of the file runs; without torch, refused in one line).

The layout is timm's VisionTransformer with DINOv2's own names (timm's
`_convert_dinov2`, which `checkpoint_filter_fn` runs on a state dict holding `mask_token`):
`mask_token` (training only, left), `register_tokens` (timm's `reg_token`), the giant's SwiGLU
`mlp.w12` (packed) and `mlp.w3` (timm's `fc1`, `fc2`). With registers, the position embedding
covers the class token too (1 + 37 x 37 at 518 px); the class token's position is added to it
alone, so it is folded into the token, exactly, as timm folds it. A file at another image
size is resized as timm resizes it (antialiased bicubic): what timm computes from the same
file. DINOv2's torch.hub code instead interpolates at every call, with an offset of 0.1 to the
grid and (before the registers release) without antialiasing, which gives slightly different
embeddings away from 518 px.

The sizes of the release (S, B, L, g, each with and without registers) record their
architecture: width, depth, registers and feed-forward name one row of FAMILIES, whose heads
DINOv2 fixes (64 features a head).
"""

from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import CheckpointFormat, CheckpointInfo, RowTableReader
from keras_vit.checkpoints.formats.rows import fold_class_position, renamed, to_official
from keras_vit.checkpoints.formats.timm import (
    TIMM_BLOCKS,
    TIMM_EMBEDDING,
    TIMM_LAYER_SCALE,
    TIMM_REGISTERS,
    open_weights,
)
from keras_vit.checkpoints.shape_check import shape_features
from keras_vit.variants import FAMILIES

__all__ = ["FORMAT", "DINOV2_ROWS", "MASK_TOKEN", "dinov2_to_official", "release_variant"]

# Trained for masked-image modelling only; inference never reads it.
MASK_TOKEN = "mask_token"

# timm's groups under DINOv2's names (timm's _convert_dinov2 renames them back), with the
# giant's SwiGLU: w12 packs both halves (silu(first) * second), as timm's fc1; w3 is fc2.
DINOV2_ROWS = (
    *renamed((*TIMM_EMBEDDING, *TIMM_REGISTERS, *TIMM_BLOCKS, *TIMM_LAYER_SCALE),
             {"reg_token": "register_tokens"}),
    *g.dense("blocks.{i}.mlp.w12", g.MLP_IN, read_only=True),
    *g.dense("blocks.{i}.mlp.w3", g.MLP_OUT, read_only=True),
)


def dinov2_to_official(sd, heads=None):
    """A DINOv2 release state dict's arrays -> official-key arrays (mask_token left). Keys no
    row takes pass through as "dinov2:" + key, for the strict loader to name."""
    sd = {k: v for k, v in sd.items() if k != MASK_TOKEN}
    return fold_class_position(to_official(DINOV2_ROWS, sd, heads, unknown_prefix="dinov2:"))


def release_variant(shapes):
    """The row of FAMILIES a DINOv2 state dict's official-key shapes are (DINOv2-S/14-reg4
    for dinov2_vits14_reg4_pretrain.pth), or None for a size DINOv2 did not release (its heads
    are then unknown)."""
    found = shape_features(shapes)
    if found is None:
        return None
    for row in FAMILIES.values():
        if row.family == "DINOv2" and (row.width, row.depth, row.patch_size, row.mlp_dim,
                                       row.register_tokens) == (
                found["width"], found["depth"], found["patch_size"], found["mlp_dim"],
                found["register_tokens"]):
            return row
    return None


def _recognises(source):
    # timm's test of a DINOv2 file: its mask_token beside the patch embedding (a pickled
    # release file, or the same state dict as safetensors).
    weights = open_weights(source)
    return weights is not None and MASK_TOKEN in weights.shapes \
        and "patch_embed.proj.weight" in weights.shapes


class Dinov2Reader(RowTableReader):
    def __init__(self, source):
        state = open_weights(source)
        super().__init__(source, FORMAT, state, dinov2_to_official,
                         names=[k for k in state.shapes if k != MASK_TOKEN])

    def info(self):
        shapes = self.shapes()
        variant = release_variant(shapes)
        return CheckpointInfo(shapes, format=FORMAT.name, layer_norm_epsilon=1e-6,
                              approximate_gelu=False,
                              heads=variant.heads if variant is not None else None,
                              variant=variant)


FORMAT = CheckpointFormat(
    name="dinov2",
    description="DINOv2's own release file (.pth through torch's weights-only loader, or "
                "the same state dict as .safetensors)",
    recognises=_recognises, open=Dinov2Reader, numerics=(False, 1e-6),
    # timm's conversion of these files (see the docstring)
    position_resize="bicubic", patch_resize="bicubic",
    pickled=True)
