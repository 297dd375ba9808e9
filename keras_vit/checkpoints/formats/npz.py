"""Official `.npz` checkpoints: their members' headers, then only the arrays wanted.

Keys come back as stored; `keras_vit.checkpoints.layout.normalize_keys` maps
the accepted alternative layouts onto the official one. Every member's `.npy`
header is read, and checked against the member's size, before any array is:
a header that lies, a member that is not an array, or a huge array nobody
uses costs nothing to refuse (an `.npz` is a zip: sizes are in its directory).
"""

import dataclasses
import math
import os
import zipfile

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY, parse_metadata
from keras_vit.checkpoints.layout import (
    HEAD_KERNEL_KEY,
    POS_EMBED_KEY,
    PRE_LOGITS_KERNEL_KEY,
    normalize_keys,
    square_grid,
)

__all__ = ["read_npz", "read_npz_headers", "inspect_npz", "pop_metadata", "ArrayHeader", "NpzInfo"]

PICKLE_PROBLEM = ("object arrays, which need pickle to load (official checkpoints hold plain "
                  "numeric arrays, and keras_vit never unpickles: it can run code)")


@dataclasses.dataclass(frozen=True)
class ArrayHeader:
    """What a `.npy` header says about its array, or `problem` when it cannot be trusted."""

    shape: tuple
    dtype: np.dtype
    problem: str | None = None

    @property
    def ndim(self):
        return len(self.shape)


def _check_file(path):
    if not os.path.exists(path):
        raise CheckpointError(f"No checkpoint file at {path}.")
    if os.path.isdir(path):
        raise CheckpointError(f"{path} is a folder; a checkpoint is one .npz file.")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a readable .npz checkpoint: not a zip archive "
                              "(an .npz is one). Truncated download, or another kind of file?")


def _unreadable(path, error):
    return CheckpointError(f"{path} is not a readable .npz checkpoint (truncated or corrupt "
                           f"file? {type(error).__name__}: {error}). Delete it and download "
                           "it again.")


def _member_header(archive, info):
    """The `ArrayHeader` of one zip member, from its first bytes only."""
    with archive.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                return ArrayHeader((), np.dtype("V"), f".npy format version {version} is "
                                                      "not supported (1.0 and 2.0 are)")
        except ValueError as error:
            return ArrayHeader((), np.dtype("V"), f"not an .npy array ({error})")
        offset = f.tell()
    shape, dtype = tuple(shape), np.dtype(dtype)
    if dtype.hasobject:
        return ArrayHeader(shape, dtype)  # its size says nothing; refused for its dtype
    # Python ints: a header claiming 10**13 values is compared, never allocated.
    claimed = math.prod(shape) * dtype.itemsize
    held = info.file_size - offset
    if claimed != held:
        return ArrayHeader(shape, dtype, f"its header claims {shape} {dtype} ({claimed:,} bytes) "
                                         f"but the member holds {held:,} bytes")
    return ArrayHeader(shape, dtype)


def read_npz_headers(path):
    """{stored key: `ArrayHeader`} of every member of an `.npz` file, reading no array."""
    _check_file(path)
    headers = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                key = info.filename.removesuffix(".npy")
                if key in headers:  # a hand-made zip can hold one name twice
                    headers[key] = ArrayHeader((), np.dtype("V"), "stored twice in the archive")
                    continue
                headers[key] = _member_header(archive, info)
    except (zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError) as error:
        raise _unreadable(path, error) from error
    return headers


def read_npz(path, keys=None):
    """Reads the arrays of an `.npz` file (all, or only `keys`, as stored), never unpickling.

    Raises `CheckpointError` naming the member when one cannot be read.
    """
    headers = read_npz_headers(path)
    keys = list(headers) if keys is None else list(keys)
    bad = [f"{k}: {headers[k].problem}" for k in keys if k in headers and headers[k].problem]
    bad += [f"{k}: {PICKLE_PROBLEM}" for k in keys if k in headers and headers[k].dtype.hasobject]
    bad += [f"{k}: no such member" for k in keys if k not in headers]
    if bad:
        raise CheckpointError(f"{path} is not a readable .npz checkpoint:\n    "
                              + "\n    ".join(bad))
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        for key in keys:
            try:
                with archive.open(f"{key}.npy") as f:
                    arrays[key] = np.lib.format.read_array(f, allow_pickle=False)
            except KeyError:  # a member stored without the .npy suffix
                with archive.open(key) as f:
                    arrays[key] = np.lib.format.read_array(f, allow_pickle=False)
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
                raise CheckpointError(f"{path}: array {key} cannot be read (truncated or corrupt "
                                      f"file? {type(error).__name__}: {error}). Delete it and "
                                      "download it again.") from error
    return arrays


@dataclasses.dataclass
class NpzInfo:
    """What an npz file's headers say, read without loading its arrays, and keras_vit's
    record where the file holds one."""

    shapes: dict
    metadata: dict = dataclasses.field(default_factory=dict)

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
        if not pos or len(pos) != 3:
            return None
        grid = square_grid(pos[1] - (1 if variant.classifier == "token" else 0))
        return grid[0] * variant.total_stride if grid else None


def pop_metadata(path, headers):
    """keras_vit's record (npz_metadata.py) if the file holds one, removed from `headers`;
    else {}."""
    if METADATA_KEY not in headers:
        return {}
    headers.pop(METADATA_KEY)
    return parse_metadata(path, read_npz(path, [METADATA_KEY])[METADATA_KEY])


def inspect_npz(path):
    """Reads array shapes from an `.npz` file's headers (cheap for large files)."""
    headers = read_npz_headers(path)
    metadata = pop_metadata(path, headers)
    headers = normalize_keys(headers)
    return NpzInfo({key: header.shape for key, header in headers.items()}, metadata)
