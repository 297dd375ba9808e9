"""Official `.npz` checkpoints: read their arrays, or only their headers.

Keys come back as stored; `keras_vit.checkpoints.layout.normalize_keys` maps
the accepted alternative layouts onto the official one.
"""

import dataclasses
import zipfile

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.layout import (
    HEAD_KERNEL_KEY,
    POS_EMBED_KEY,
    PRE_LOGITS_KERNEL_KEY,
    normalize_keys,
    square_grid,
)

__all__ = ["read_npz", "inspect_npz", "NpzInfo"]


def read_npz(path):
    """Reads every array of an `.npz` file (no pickle), with readable errors."""
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a readable .npz checkpoint: not a zip archive "
                              "(an .npz is one). Truncated download, or another kind of file?")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise CheckpointError(f"{path} holds object arrays, which need pickle to load; "
                                  "official checkpoints hold plain numeric arrays, and keras_vit "
                                  "never unpickles (it can run code).") from error
        raise CheckpointError(f"{path} is not a readable .npz checkpoint: {error}") from error
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as error:
        raise CheckpointError(f"{path} is not a readable .npz checkpoint (truncated or corrupt "
                              f"file? {type(error).__name__}: {error}). Delete it and download "
                              "it again.") from error


@dataclasses.dataclass
class NpzInfo:
    """What an npz file's headers say, read without loading its arrays."""

    shapes: dict

    @property
    def classes(self):
        head = self.shapes.get(HEAD_KERNEL_KEY)
        return head[-1] if head else None

    @property
    def representation_size(self):
        pre = self.shapes.get(PRE_LOGITS_KERNEL_KEY)
        return pre[-1] if pre else None

    def resolution(self, variant):
        pos = self.shapes.get(POS_EMBED_KEY)
        if not pos:
            return None
        grid = square_grid(pos[1] - (1 if variant.classifier == "token" else 0))
        return grid[0] * variant.total_stride if grid else None


def inspect_npz(path):
    """Reads array shapes from an `.npz` file's headers (cheap for large files)."""
    shapes = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                with archive.open(name) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, _ = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, _ = np.lib.format.read_array_header_2_0(f)
                shapes[name.removesuffix(".npy")] = tuple(shape)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
        raise CheckpointError(f"{path} is not a readable .npz checkpoint ({type(error).__name__}: "
                              f"{error}).") from error
    return NpzInfo(normalize_keys(shapes))
