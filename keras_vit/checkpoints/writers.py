"""Back out: any keras_vit model written in the official `.npz` or timm's safetensors layout.

The arrays come from the same key table the loader reads (`layout.layout`), run
backwards, so a saved model reloads bit-identically. Both write through
keras_vit.atomic: a kill at any moment leaves the old file or the new one,
never a torn one.
"""

import os

import numpy as np

from keras_vit.atomic import atomic_open
from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY, metadata_array, model_metadata
from keras_vit.checkpoints.formats.safetensors import write_safetensors
from keras_vit.checkpoints.formats.timm import official_to_timm
from keras_vit.checkpoints.layout import layout, released_shape
from keras_vit.errors import ArgumentError, CheckpointError

__all__ = ["official_arrays", "save_npz", "save_safetensors"]


def official_arrays(model):
    """{official key: NumPy array} of every weight of `model`, in the released shapes.

    Refuses a model holding a NaN or an infinity (a diverged run): every loader, keras_vit's
    included, refuses such a file, so it is never written.
    """
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


def save_npz(model, path):
    """Writes `model` as an official-layout `.npz` (vit_jax's `checkpoint.load`, timm's npz
    loader and keras_vit all read it; a BiT in big_transfer's layout, which timm's ResNetV2
    loader reads), atomically, with keras_vit's record of its numerics and grid
    (formats/npz_metadata.py), which only keras_vit reads."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ArgumentError(f"save_npz writes an .npz file; got the path {path!r}.")
    arrays = official_arrays(model)
    arrays[METADATA_KEY] = metadata_array(model_metadata(model))  # numerics and grid
    with atomic_open(path, "wb") as file:
        np.savez(file, **arrays)
    return path


def save_safetensors(model, path):
    """Writes a plain keras_vit ViT as timm's VisionTransformer state dict (safetensors),
    atomically. Hybrids and models with pre_logits have no timm equivalent: use save_npz."""
    path = os.fspath(path)
    if not path.endswith(".safetensors"):
        raise ArgumentError(f"save_safetensors writes a .safetensors file; got the path {path!r}.")
    write_safetensors(official_to_timm(official_arrays(model)), path, metadata={"format": "pt"})
    return path
