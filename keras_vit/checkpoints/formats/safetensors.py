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
import os
import struct

import numpy as np

from keras_vit.atomic import atomic_open
from keras_vit.checkpoints.errors import CheckpointError

__all__ = ["read_safetensors", "safetensors_shapes", "write_safetensors", "INDEX_SUFFIX"]

INDEX_SUFFIX = ".safetensors.index.json"

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}
_HEADER_LIMIT = 100 << 20


def _header(path):
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError("shorter than its 8-byte header length")
            (length,) = struct.unpack("<Q", raw)
            if length > _HEADER_LIMIT:
                raise ValueError(f"a header length of {length} bytes is not plausible")
            header = json.loads(f.read(length))
        return 8 + length, header
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not a readable .safetensors file ({error}); "
                              "truncated download, or another kind of file?") from error


def _shards(index_path):
    """{shard path: [tensor names]} from a sharded checkpoint's index, checked."""
    try:
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, ValueError) as error:
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


def safetensors_shapes(path):
    """{name: shape} from the header alone (of every shard, for an index)."""
    if path.endswith(INDEX_SUFFIX):
        shapes = {}
        for shard, names in _shards(path).items():
            found = safetensors_shapes(shard)
            _check_shard(path, shard, names, found)
            shapes.update(found)
        return shapes
    _, header = _header(path)
    return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def read_safetensors(path):
    """Every tensor of a .safetensors file (or of the shards an index names) as float32
    (bfloat16/float16 widened) NumPy arrays."""
    if path.endswith(INDEX_SUFFIX):
        arrays = {}
        for shard, names in _shards(path).items():
            found = read_safetensors(shard)
            _check_shard(path, shard, names, found)
            arrays.update(found)
        return arrays
    start, header = _header(path)
    size = os.path.getsize(path)
    arrays = {}
    with open(path, "rb") as f:
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            if not 0 <= begin <= end <= size - start:
                raise CheckpointError(f"{path}: tensor {name!r} lies outside the file (truncated?).")
            f.seek(start + begin)
            data = f.read(end - begin)
            dtype = entry["dtype"]
            if dtype == "BF16":  # bfloat16 is the top half of a float32
                array = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
            elif dtype in _DTYPES:
                array = np.frombuffer(data, _DTYPES[dtype])
            else:
                raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype}, which keras_vit "
                                      "does not read.")
            shape = tuple(entry["shape"])
            if array.size != int(np.prod(shape)):
                raise CheckpointError(f"{path}: tensor {name!r} holds {array.size} values for "
                                      f"shape {shape}.")
            array = array.reshape(shape)
            arrays[name] = array.astype(np.float32) if array.dtype == np.float16 else array
    return arrays


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
