"""The official `.npz` format: members' headers first, then only the arrays wanted.

Keys come back as stored; `keras_vit.checkpoints.layout.normalize_keys` maps
the accepted alternative layouts onto the official one. Every member's `.npy`
header is read, and checked against the member's size, before any array is:
a header that lies, a member that is not an array, or a huge array nobody
uses costs nothing to refuse (an `.npz` is a zip: sizes are in its directory).
The file is opened once (`NpzFile`); headers and arrays come from that one open.
"""

import math
import os
import zipfile

import numpy as np

from keras_vit.atomic import atomic_open
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import (
    OFFICIAL_NORMALIZATION,
    ArrayHeader,
    CheckpointFormat,
    CheckpointInfo,
    CheckpointReader,
    open_file,
)
from keras_vit.checkpoints.formats.npz_metadata import (
    MAX_METADATA_BYTES,
    METADATA_KEY,
    metadata_array,
    model_metadata,
    parse_metadata,
)
from keras_vit.checkpoints.formats.safetensors import INDEX_SUFFIX
from keras_vit.checkpoints.layout import normalize_keys, official_arrays
from keras_vit.errors import ArgumentError

__all__ = ["FORMAT", "NpzFile", "read_npz", "inspect_npz", "save_npz",
           "PICKLE_PROBLEM"]

PICKLE_PROBLEM = ("object arrays, which need pickle to load (official checkpoints hold plain "
                  "numeric arrays, and keras_vit never unpickles: it can run code)")


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


class NpzFile:
    """One `.npz` file, opened once: every member's header read on opening, arrays later from
    the same open file."""

    def __init__(self, path):
        self.path = path
        self._file = open_file(path)
        try:
            self._archive = zipfile.ZipFile(self._file)
            self.headers = self._read_headers()
        except zipfile.BadZipFile as error:
            self._file.close()
            raise CheckpointError(f"{path} is not a readable .npz checkpoint: not a zip archive "
                                  "(an .npz is one). Truncated download, or another kind of "
                                  "file?") from error
        except (EOFError, OSError, RuntimeError, NotImplementedError) as error:
            self._file.close()
            raise _unreadable(path, error) from error

    def _read_headers(self):
        """{stored key: `ArrayHeader`} of every member, reading no array."""
        headers, self._members = {}, {}
        for info in self._archive.infolist():
            if info.is_dir():
                continue
            key = info.filename.removesuffix(".npy")
            if key in headers:  # a hand-made zip can hold one name twice
                headers[key] = ArrayHeader((), np.dtype("V"), "stored twice in the archive")
                continue
            headers[key], self._members[key] = _member_header(self._archive, info), info
        return headers

    def read(self, keys=None):
        """The arrays of `keys` (as stored; all by default), never unpickling. Raises
        `CheckpointError` naming the member when one cannot be read."""
        headers = self.headers
        keys = list(headers) if keys is None else list(keys)
        bad = [f"{k}: {headers[k].problem}" for k in keys if k in headers and headers[k].problem]
        bad += [f"{k}: {PICKLE_PROBLEM}" for k in keys if k in headers and headers[k].dtype.hasobject]
        bad += [f"{k}: no such member" for k in keys if k not in headers]
        if bad:
            raise CheckpointError(f"{self.path} is not a readable .npz checkpoint:\n    "
                                  + "\n    ".join(bad))
        arrays = {}
        for key in keys:
            try:
                with self._archive.open(self._members[key]) as f:
                    arrays[key] = np.lib.format.read_array(f, allow_pickle=False)
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
                raise CheckpointError(f"{self.path}: array {key} cannot be read (truncated or "
                                      f"corrupt file? {type(error).__name__}: {error}). Delete it "
                                      "and download it again.") from error
        return arrays

    def metadata(self):
        """keras_vit's record (npz_metadata.py) where the file holds one, else {}."""
        if METADATA_KEY not in self.headers:
            return {}
        shape = self.headers[METADATA_KEY].shape
        if math.prod(shape) > MAX_METADATA_BYTES:  # refused before it is read
            raise CheckpointError(f"{self.path}: its {METADATA_KEY} member holds {math.prod(shape)} "
                                  f"values, where keras_vit's record is a few hundred bytes.")
        return parse_metadata(self.path, self.read([METADATA_KEY])[METADATA_KEY])

    def close(self):
        self._archive.close()
        self._file.close()


class NpzReader(CheckpointReader):
    def __init__(self, source):
        super().__init__(source, FORMAT)
        if source.is_dir:
            raise CheckpointError(f"{source.path} is a folder; a checkpoint is one .npz file.")
        self._npz = source.once("npz", lambda: NpzFile(source.path))
        self.metadata = self._npz.metadata()
        weights = {k: h for k, h in self._npz.headers.items() if k != METADATA_KEY}
        try:
            self._stored = normalize_keys({k: k for k in weights})  # official key -> as stored
        except CheckpointError as error:
            raise CheckpointError(f"{source.path}: {error}") from None

    def headers(self, heads=None):
        return {key: self._npz.headers[stored] for key, stored in self._stored.items()}

    def read(self, keys, heads=None):
        arrays = self._npz.read([self._stored[k] for k in keys])
        return {k: arrays[self._stored[k]] for k in keys}

    def info(self):
        metadata = self.metadata
        return CheckpointInfo({k: h.shape for k, h in self.headers().items()}, format="npz",
                              metadata=metadata,
                              layer_norm_epsilon=metadata.get("layer_norm_epsilon"),
                              approximate_gelu=metadata.get("approximate_gelu"),
                              normalization=metadata.get("normalization", OFFICIAL_NORMALIZATION),
                              variant=metadata.get("variant"))


def _recognises(source):
    # The official format is what a single file is when it is no other format's (so it is the
    # registry's last entry); a safetensors file no other format took is not an npz either.
    return not source.is_dir and not source.path.endswith((".safetensors", INDEX_SUFFIX))


FORMAT = CheckpointFormat(
    name="npz", description="official .npz (vit_jax, big_vision, keras_vit's save_npz)",
    recognises=_recognises, open=NpzReader, numerics=(True, 1e-6), write="save_npz")


def read_npz(path, keys=None):
    """Reads the arrays of an `.npz` file (all, or only `keys`, as stored), never unpickling."""
    npz = NpzFile(path)
    try:
        return npz.read(keys)
    finally:
        npz.close()


def inspect_npz(path):
    """A `CheckpointInfo` of an `.npz` file from its headers (cheap for large files)."""
    from keras_vit.checkpoints.formats.base import Source

    with NpzReader(Source(path)) as reader:
        return reader.info()


def save_npz(model, path):
    """Writes `model` as an official-layout `.npz` (vit_jax's `checkpoint.load`, timm's npz
    loader and keras_vit all read it; a BiT in big_transfer's layout, which timm's ResNetV2
    loader reads), atomically (a kill at any moment leaves the old file or the new one), with
    keras_vit's record of its numerics and grid (npz_metadata.py), which only keras_vit reads."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ArgumentError(f"save_npz writes an .npz file; got the path {path!r}.")
    arrays = official_arrays(model)
    arrays[METADATA_KEY] = metadata_array(model_metadata(model))  # numerics and grid
    with atomic_open(path, "wb") as file:
        np.savez(file, **arrays)
    return path
