"""DINOv2's own release files (facebookresearch/dinov2 `dinov2_vits14_pretrain.pth`,
`dinov2_vits14_reg4_pretrain.pth`, ...): a torch state dict, read with torch's weights-only
loader.

The file is a pickle. keras_vit opens it only through `torch.load(path, weights_only=True,
map_location="cpu")`, torch's restricted unpickler, which builds tensors and plain containers
and refuses any other object (no code of the file runs), and only when torch is installed;
without torch, or for a pickle that is not a plain {name: tensor} dict, the load is refused in
one line. Files in torch's zip format are memory-mapped, so detection costs no read of the
arrays.

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

import warnings
import zipfile

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import CheckpointFormat, CheckpointInfo, RowTableReader
from keras_vit.checkpoints.formats.rows import fold_class_position, renamed, to_official
from keras_vit.checkpoints.formats.timm import (
    TIMM_BLOCKS,
    TIMM_EMBEDDING,
    TIMM_LAYER_SCALE,
    TIMM_REGISTERS,
)
from keras_vit.checkpoints.layout import shape_features
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


def _torch():
    try:
        with warnings.catch_warnings():  # torch's import-time notes are not the file's
            warnings.simplefilter("ignore")
            import torch
    except ImportError:
        return None
    return torch


def _refuse(path, why):
    raise CheckpointError(f"{path} is a pickled PyTorch file {why}; or convert it where you "
                          "trust it: safetensors.torch.save_file(torch.load(path, "
                          "weights_only=True), 'model.safetensors').")


def _reason(error):
    """torch's one line on why, from its multi-line message."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0]
    return " ".join(text.split())[:160] or type(error).__name__


def _load(path):
    """{name: tensor} of a pickled state dict, through torch's weights-only unpickler."""
    torch = _torch()
    if torch is None:
        _refuse(path, "and torch is not installed: keras_vit reads DINOv2's .pth release "
                      "files only through torch.load(weights_only=True) (pip install torch)")
    try:
        with warnings.catch_warnings():
            # torch's own warnings on the way (a legacy pickle, a TorchScript archive): the
            # file is read, or refused below in one line that says why.
            warnings.simplefilter("ignore")
            sd = torch.load(path, map_location="cpu", weights_only=True,
                            mmap=zipfile.is_zipfile(path))  # torch's zip format maps; legacy not
    except Exception as error:  # noqa: BLE001 - torch raises many types for one bad file
        _refuse(path, f"that torch's weights-only loader refuses ({_reason(error)}): keras_vit "
                      "reads a plain dict of tensors only")
    if not isinstance(sd, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                           for k, v in sd.items()):
        _refuse(path, f"holding a {type(sd).__name__} that is not a plain dict of named "
                      "tensors, which is what keras_vit reads")
    return sd


def _numpy_dtype(torch_dtype):
    torch = _torch()
    if torch_dtype in (torch.bfloat16, torch.float16):  # read widened to float32
        return np.dtype(np.float32)
    try:
        return torch.empty((), dtype=torch_dtype).numpy().dtype
    except (TypeError, RuntimeError):  # no NumPy dtype (quantised, float8): not read as weights
        return np.dtype("V")


class TorchStateDict:
    """A pickled state dict opened once: shapes, and arrays on request (float32)."""

    def __init__(self, path):
        self._tensors = _load(path)
        self.shapes = {k: tuple(v.shape) for k, v in self._tensors.items()}
        # What `read` returns, so that a header reports an integer or bool tensor as one.
        self.dtypes = {k: _numpy_dtype(v.dtype) for k, v in self._tensors.items()}

    def read(self, names=None):
        torch, out = _torch(), {}
        for name in self.shapes if names is None else names:
            tensor = self._tensors[name].detach()
            if tensor.dtype in (torch.bfloat16, torch.float16):  # bfloat16 has no NumPy view
                tensor = tensor.float()
            out[name] = tensor.numpy()
        return out

    def close(self):
        self._tensors = {}


def _state_dict(source):
    return source.once("torch", lambda: TorchStateDict(source.path))


def _recognises(source):
    # Reached for pickled files only (formats/__init__.py detect): timm's test of a DINOv2
    # file, its mask_token beside the patch embedding.
    shapes = _state_dict(source).shapes
    return MASK_TOKEN in shapes and "patch_embed.proj.weight" in shapes


class Dinov2Reader(RowTableReader):
    def __init__(self, source):
        state = _state_dict(source)
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
    description="DINOv2's own release file (.pth, read with torch.load(weights_only=True))",
    recognises=_recognises, open=Dinov2Reader, numerics=(False, 1e-6),
    # timm's conversion of these files (see the docstring)
    position_resize="bicubic", patch_resize="bicubic",
    pickled=True)
