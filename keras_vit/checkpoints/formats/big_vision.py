"""big_vision's two-tower `.npz` files (SigLIP, SigLIP 2): the image tower under `params/img/`.

A SigLIP release holds the whole model: the image tower (`params/img/...`), the text tower
(`params/txt/...`) and the temperature and bias (`params/t`, `params/b`); keras_vit reads the
image tower and leaves the rest. The tower is big_vision's `vit.py` in Linen names
(`MultiHeadDotProductAttention_0`, `LayerNorm_1`, `MlpBlock_0`, a top-level `pos_embedding`,
the attention pooling as `MAPHead_0`), its blocks either one by one (`encoderblock_{i}`) or
scanned: `Transformer/encoderblock/...` with the blocks stacked on a leading axis (the
`scan=True` the SigLIP releases are saved with). Arrays are already in the official shapes;
big_vision computes tanh GELU, LayerNorm epsilon 1e-6, [-1, 1] pixels, and resizes position
embeddings with the linear zoom (`resample_posemb`).
"""

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import (
    OFFICIAL_NORMALIZATION,
    ArrayHeader,
    CheckpointFormat,
    CheckpointInfo,
    CheckpointReader,
)
from keras_vit.checkpoints.formats.npz import PICKLE_PROBLEM, NpzFile
from keras_vit.checkpoints.formats.rows import KeyRow, from_official, to_official
from keras_vit.checkpoints.formats.safetensors import INDEX_SUFFIX
from keras_vit.checkpoints.layout import (
    BLOCK,
    CLS_KEY,
    EMBEDDING_BIAS,
    EMBEDDING_KERNEL,
    ENCODER_NORM_BIAS,
    ENCODER_NORM_SCALE,
    HEAD_BIAS_KEY,
    HEAD_KERNEL_KEY,
    KEY_BIAS,
    KEY_KERNEL,
    LN0_BIAS,
    LN0_SCALE,
    LN2_BIAS,
    LN2_SCALE,
    MAP_KEY_BIAS,
    MAP_KEY_KERNEL,
    MAP_LN_BIAS,
    MAP_LN_SCALE,
    MAP_MLP0_BIAS,
    MAP_MLP0_KERNEL,
    MAP_MLP1_BIAS,
    MAP_MLP1_KERNEL,
    MAP_OUT_BIAS,
    MAP_OUT_KERNEL,
    MAP_PROBE,
    MAP_QUERY_BIAS,
    MAP_QUERY_KERNEL,
    MAP_VALUE_BIAS,
    MAP_VALUE_KERNEL,
    MLP0_BIAS,
    MLP0_KERNEL,
    MLP1_BIAS,
    MLP1_KERNEL,
    OUT_BIAS,
    OUT_KERNEL,
    POS_EMBED_KEY,
    QUERY_BIAS,
    QUERY_KERNEL,
    SCANNED_BLOCK,
    VALUE_BIAS,
    VALUE_KERNEL,
    linen_key,
)

__all__ = ["FORMAT", "BIG_VISION_ROWS", "IMAGE_TOWER", "big_vision_to_official",
           "official_to_big_vision"]

IMAGE_TOWER = "params/img/"  # the prefix of the image tower's arrays
_BLOCK = BLOCK + "/"

# The image tower, row by row, keys without the `params/img/` prefix: the official keys in
# big_vision's Linen spelling (layout.linen_key). Every array is already in the official
# shape: the rows rename.
BIG_VISION_ROWS = tuple(KeyRow(linen_key(official), official) for official in (
    EMBEDDING_KERNEL, EMBEDDING_BIAS, CLS_KEY, POS_EMBED_KEY,
    LN0_SCALE, LN0_BIAS, QUERY_KERNEL, QUERY_BIAS, KEY_KERNEL, KEY_BIAS, VALUE_KERNEL,
    VALUE_BIAS, OUT_KERNEL, OUT_BIAS, LN2_SCALE, LN2_BIAS, MLP0_KERNEL, MLP0_BIAS, MLP1_KERNEL,
    MLP1_BIAS, ENCODER_NORM_SCALE, ENCODER_NORM_BIAS,
    MAP_PROBE, MAP_QUERY_KERNEL, MAP_QUERY_BIAS, MAP_KEY_KERNEL, MAP_KEY_BIAS,
    MAP_VALUE_KERNEL, MAP_VALUE_BIAS, MAP_OUT_KERNEL, MAP_OUT_BIAS, MAP_LN_SCALE,
    MAP_LN_BIAS, MAP_MLP0_KERNEL, MAP_MLP0_BIAS, MAP_MLP1_KERNEL, MAP_MLP1_BIAS,
    HEAD_KERNEL_KEY, HEAD_BIAS_KEY))


def _unscanned(arrays, source):
    """Scanned blocks (`encoderblock/...`, stacked on axis 0) as one key per block; a file
    holding a block both ways is refused, as which one is meant cannot be known."""
    out = {k: v for k, v in arrays.items() if not k.startswith(SCANNED_BLOCK)}
    for key, stacked in arrays.items():
        if not key.startswith(SCANNED_BLOCK):
            continue
        if stacked.ndim == 0:
            raise CheckpointError(f"{source}: the scanned array {IMAGE_TOWER}{key} has no block "
                                  "axis (a scalar); big_vision stacks the blocks on axis 0.")
        for i in range(stacked.shape[0]):
            name = _BLOCK.format(i=i) + key[len(SCANNED_BLOCK):]
            if name in out:
                raise CheckpointError(f"{source} holds block {i} both scanned ({IMAGE_TOWER}"
                                      f"{key}) and alone ({IMAGE_TOWER}{name}); a checkpoint "
                                      "holds each parameter once.")
            out[name] = stacked[i]
    return out


def big_vision_to_official(arrays, heads=None, source="the checkpoint"):
    """The image tower's arrays (keys without `params/img/`, blocks scanned or not) ->
    official-key arrays. Keys no row takes pass through as "big_vision:" + key, for the strict
    loader to name. `heads` is unused: big_vision stores attention in the official shapes."""
    return to_official(BIG_VISION_ROWS, _unscanned(arrays, source), heads,
                       unknown_prefix="big_vision:")


def official_to_big_vision(arrays):
    """Official-key arrays -> the image tower's keys (without `params/img/`), block by block."""
    return from_official(BIG_VISION_ROWS, arrays, "big_vision")


def _npz(source):
    return source.once("npz", lambda: NpzFile(source.path))


def _recognises(source):
    if source.is_dir or source.path.endswith((".safetensors", INDEX_SUFFIX)):
        return False
    try:
        headers = _npz(source).headers
    except CheckpointError:  # not an npz at all: the npz format names what is wrong
        return False
    return IMAGE_TOWER + linen_key(EMBEDDING_KERNEL) in headers


def _stand_in(header):
    """A zero-memory array of the header's shape and dtype (base.shape_stand_ins, keeping the
    dtype so the loader still names an integer array)."""
    return np.broadcast_to(np.zeros((), header.dtype), header.shape)


class BigVisionReader(CheckpointReader):
    def __init__(self, source):
        super().__init__(source, FORMAT)
        self._npz = _npz(source)
        self._tower = {k[len(IMAGE_TOWER):]: h for k, h in self._npz.headers.items()
                       if k.startswith(IMAGE_TOWER)}
        bad = [f"{IMAGE_TOWER}{k}: {h.problem or PICKLE_PROBLEM}"
               for k, h in self._tower.items() if h.problem or h.dtype.hasobject]
        if bad:
            raise CheckpointError(f"{source.path} is not a readable big_vision checkpoint: "
                                  f"{'; '.join(bad[:3])}" + (" ..." if len(bad) > 3 else ""))

    def headers(self, heads=None):
        arrays = big_vision_to_official({k: _stand_in(h) for k, h in self._tower.items()},
                                        source=self.path)
        return {k: ArrayHeader(tuple(v.shape), v.dtype) for k, v in arrays.items()}

    def read(self, keys, heads=None):
        stored = self._npz.read([IMAGE_TOWER + k for k in self._tower])
        arrays = big_vision_to_official({k[len(IMAGE_TOWER):]: v for k, v in stored.items()},
                                        source=self.path)
        return {k: arrays[k] for k in keys}

    def info(self):
        shapes = {k: h.shape for k, h in self.headers().items()}
        query = shapes.get(QUERY_KERNEL.format(i=0))  # (D, heads, head_dim): the head count
        return CheckpointInfo(shapes, format="big_vision", normalization=OFFICIAL_NORMALIZATION,
                              heads=query[1] if query and len(query) == 3 else None)


FORMAT = CheckpointFormat(
    name="big_vision",
    description="big_vision two-tower .npz (SigLIP: the image tower under params/img/)",
    recognises=_recognises, open=BigVisionReader, numerics=(True, 1e-6),
    position_resize="linear")  # big_vision's resample_posemb: scipy's zoom, order 1
