"""The safetensors container: read and write it with NumPy alone.

The format is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw little-endian bytes. It holds
no code, which is why keras_vit reads it and never pickled `.bin`/`.pth` files.

A large model is saved in shards: `model.safetensors.index.json` maps each
tensor's name to the shard file beside it that holds it (`weight_map`), as
transformers' `save_pretrained` and huggingface_hub's `save_torch_state_dict`
write it. `read_safetensors` and `safetensors_shapes` take that index's path
too, and read the shards as one file.
"""

import json
import math
import os
import struct

import numpy as np

from keras_vit._support.json_files import parse_json, read_json
from keras_vit.atomic import atomic_open
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import open_file

__all__ = ["open_safetensors", "SafetensorsFile", "ShardedSafetensors", "read_safetensors",
           "safetensors_shapes", "write_safetensors", "INDEX_SUFFIX"]

INDEX_SUFFIX = ".safetensors.index.json"

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}
_ITEMSIZE = {**{name: np.dtype(code).itemsize for name, code in _DTYPES.items()}, "BF16": 2}
_HEADER_LIMIT = 100 << 20


def _header(path, f):
    """(data start, {name: (dtype, shape, (begin, end))}) of the open file `f`, every entry
    checked."""
    try:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError("shorter than its 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > _HEADER_LIMIT:
            raise ValueError(f"a header length of {length} bytes is not plausible")
        text = f.read(length)
        size = os.fstat(f.fileno()).st_size
        if len(text) != length:
            raise ValueError("its header is cut short")
        header = parse_json(text, "its header", ValueError, object_pairs_hook=_no_duplicates)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not a readable .safetensors file ({error}); "
                              "truncated download, or another kind of file?") from error
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: its header is a JSON {type(header).__name__}, not the "
                              "object of tensors a .safetensors header is.")
    entries = {name: _entry(path, name, entry) for name, entry in header.items()
               if name != "__metadata__"}
    _check_ranges(path, entries, size - 8 - length)
    _check_sizes(path, entries)
    return 8 + length, entries


def _no_duplicates(pairs):
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        seen = set()
        twice = next(n for n in names if n in seen or seen.add(n))
        raise ValueError(f"the name {twice[:80]!r} appears twice")
    return dict(pairs)


def _entry(path, name, entry):
    """(dtype, shape, (begin, end)) of one header entry, or a one-line refusal."""
    def refuse(problem):
        return CheckpointError(f"{path}: the header entry {name[:80]!r} {problem}.")

    if not isinstance(entry, dict):
        raise refuse(f"is a JSON {type(entry).__name__}, not an object")
    missing = [field for field in ("dtype", "shape", "data_offsets") if field not in entry]
    if missing:
        raise refuse(f"lacks {', '.join(missing)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str):
        raise refuse(f"has a dtype that is a JSON {type(dtype).__name__}, not a name")
    if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
        raise refuse("has a shape that is not a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(n) for n in offsets)
            or offsets[0] > offsets[1]):
        raise refuse("has data_offsets that are not two ascending non-negative integers")
    return dtype, tuple(shape), tuple(offsets)


def _check_sizes(path, entries):
    """Every tensor of a dtype keras_vit reads, holding exactly its shape's bytes."""
    for name, (dtype, shape, (begin, end)) in entries.items():
        if dtype not in _ITEMSIZE:
            raise CheckpointError(f"{path}: tensor {name[:80]!r} has dtype {dtype[:20]}, which "
                                  "keras_vit does not read.")
        needed = math.prod(shape) * _ITEMSIZE[dtype]
        if end - begin != needed:
            raise CheckpointError(f"{path}: tensor {name[:80]!r} holds {end - begin} bytes, which "
                                  f"is not shape {shape} of {dtype} ({needed} bytes).")


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_ranges(path, entries, data_size):
    """No two tensors share bytes, and every tensor lies inside the file."""
    previous_end, previous = 0, None
    for name, (_, _, (begin, end)) in sorted(entries.items(), key=lambda item: item[1][2]):
        if begin < previous_end:
            raise CheckpointError(f"{path}: the tensors {previous[:80]!r} and {name[:80]!r} "
                                  "overlap in the file.")
        if end > data_size:
            raise CheckpointError(f"{path}: tensor {name[:80]!r} lies outside the file "
                                  "(truncated?).")
        previous_end, previous = end, name


def _shards(index_path):
    """{shard path: [tensor names]} from a sharded checkpoint's index, checked."""
    try:
        index = read_json(index_path, "a safetensors index", CheckpointError)
    except OSError as error:
        raise CheckpointError(f"{index_path} is not a readable safetensors index ({error}).") from error
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path} is not a safetensors index: no \"weight_map\" object "
                              "naming each tensor's shard.")
    folder = os.path.dirname(index_path)
    shards = {}
    for name, shard in weight_map.items():
        # A shard is a file beside the index: a name that leads elsewhere is refused.
        if not isinstance(shard, str) or os.path.basename(shard) != shard or shard in ("", ".", ".."):
            raise CheckpointError(f"{index_path}: tensor {name!r} names the shard {shard!r}, which "
                                  "is not a file name beside the index.")
        shards.setdefault(os.path.join(folder, shard), []).append(name)
    for shard in shards:
        if not os.path.isfile(shard):
            raise CheckpointError(f"{index_path} names the shard {os.path.basename(shard)}, which is "
                                  "not beside it (an incomplete download?).")
    return shards


def _check_shard(index_path, shard, names, found):
    if set(found) != set(names):
        extra, missing = sorted(set(found) - set(names)), sorted(set(names) - set(found))
        raise CheckpointError(
            f"{index_path}: the shard {os.path.basename(shard)} does not hold what the index says "
            f"(missing {missing[:3]}, not listed {extra[:3]}).")


def _read_dtype(name):
    """The NumPy dtype a stored dtype `name` is read as (half precision widened)."""
    if name in ("BF16", "F16"):
        return np.dtype(np.float32)
    return np.dtype(_DTYPES.get(name, "V"))  # "V": a dtype keras_vit does not read


class SafetensorsFile:
    """One .safetensors file, opened once: its header parsed and checked on opening, every
    tensor read later from that same open file."""

    def __init__(self, path):
        self.path = path
        self._file = open_file(path)
        try:
            self._start, self._entries = _header(path, self._file)
        except BaseException:
            self._file.close()
            raise

    @property
    def shapes(self):
        return {name: shape for name, (_, shape, _) in self._entries.items()}

    @property
    def dtypes(self):
        """{name: the NumPy dtype `read` returns}: a header reports an integer tensor as one."""
        return {name: _read_dtype(dtype) for name, (dtype, _, _) in self._entries.items()}

    def read(self, names=None):
        """{name: array} of `names` (all by default), bfloat16/float16 widened to float32."""
        names = list(self._entries) if names is None else names
        return {name: self._tensor(name) for name in names}

    def _tensor(self, name):
        dtype, shape, (begin, end) = self._entries[name]
        data = os.pread(self._file.fileno(), end - begin, self._start + begin)
        if dtype == "BF16":  # bfloat16 is the top half of a float32
            array = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _DTYPES:
            array = np.frombuffer(data, _DTYPES[dtype])
        else:
            raise CheckpointError(f"{self.path}: tensor {name!r} has dtype {dtype[:20]}, which "
                                  "keras_vit does not read.")
        if array.size != int(np.prod(shape)) or array.nbytes != end - begin:
            raise CheckpointError(f"{self.path}: tensor {name!r} holds {len(data)} of {end - begin} "
                                  f"bytes, which is not shape {shape} of {dtype}.")
        array = array.reshape(shape)
        return array.astype(np.float32) if array.dtype == np.float16 else array

    def close(self):
        self._file.close()


class ShardedSafetensors:
    """The shards an index names, each opened once, read as one file."""

    def __init__(self, index_path):
        self.path = index_path
        self._shards = {}
        try:
            for shard, names in _shards(index_path).items():
                opened = SafetensorsFile(shard)
                self._shards[shard] = opened
                _check_shard(index_path, shard, names, opened.shapes)
        except BaseException:
            self.close()
            raise
        self._owner = {name: f for f in self._shards.values() for name in f.shapes}

    @property
    def shapes(self):
        return {name: shape for f in self._shards.values() for name, shape in f.shapes.items()}

    @property
    def dtypes(self):
        return {name: dtype for f in self._shards.values() for name, dtype in f.dtypes.items()}

    def read(self, names=None):
        names = list(self._owner) if names is None else names
        return {name: self._owner[name].read([name])[name] for name in names}

    def close(self):
        for opened in self._shards.values():
            opened.close()


def open_safetensors(path):
    """A `SafetensorsFile`, or a `ShardedSafetensors` for an index; close it when done."""
    return ShardedSafetensors(path) if path.endswith(INDEX_SUFFIX) else SafetensorsFile(path)


def safetensors_shapes(path):
    """{name: shape} from the header alone (of every shard, for an index)."""
    opened = open_safetensors(path)
    try:
        return opened.shapes
    finally:
        opened.close()


def read_safetensors(path):
    """Every tensor of a .safetensors file (or of the shards an index names) as float32
    (bfloat16/float16 widened) NumPy arrays."""
    opened = open_safetensors(path)
    try:
        return opened.read()
    finally:
        opened.close()


def write_safetensors(arrays, path, metadata=None):
    """Writes {name: array} to `path` atomically (keras_vit.atomic)."""
    names = sorted(arrays)
    header, offset, blobs = {}, 0, []
    codes = {np.dtype(v): k for k, v in _DTYPES.items()}
    for name in names:
        array = np.ascontiguousarray(arrays[name])
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        blob = array.tobytes()
        header[name] = {"dtype": codes[np.dtype(array.dtype.str.replace("=", "<"))],
                        "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format aligns the data to 8 bytes
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)
