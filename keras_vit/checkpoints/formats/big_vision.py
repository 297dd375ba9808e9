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

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import (
    OFFICIAL_NORMALIZATION,
    CheckpointFormat,
    CheckpointInfo,
    RowTableReader,
)
from keras_vit.checkpoints.formats.npz import PICKLE_PROBLEM, NpzFile
from keras_vit.checkpoints.formats.rows import KeyRow, to_official
from keras_vit.checkpoints.formats.safetensors import INDEX_SUFFIX
from keras_vit.checkpoints.layout import BLOCK, SCANNED_BLOCK, linen_key

__all__ = ["FORMAT", "BIG_VISION_ROWS", "IMAGE_TOWER", "big_vision_to_official"]

IMAGE_TOWER = "params/img/"  # the prefix of the image tower's arrays
_BLOCK = BLOCK + "/"

# The image tower, row by row, keys without the `params/img/` prefix: the official keys in
# big_vision's Linen spelling (layout.linen_key). Every array is already in the official
# shape: the rows rename.
_OFFICIAL = (g.PATCH, g.CLS, g.POSITIONS, g.NORM1, *g.ATTENTION, g.NORM2, g.MLP_IN, g.MLP_OUT,
             g.ENCODER_NORM, g.MAP_PROBE, *g.MAP_ATTENTION, g.MAP_NORM, g.MAP_MLP_IN,
             g.MAP_MLP_OUT, g.HEAD)
BIG_VISION_ROWS = tuple(KeyRow(linen_key(official), official)
                        for group in _OFFICIAL
                        for official in ((group,) if isinstance(group, str) else group))


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


def _npz(source):
    return source.once("npz", lambda: NpzFile(source.path))


def _recognises(source):
    if source.is_dir or source.path.endswith((".safetensors", INDEX_SUFFIX)):
        return False
    try:
        headers = _npz(source).headers
    except CheckpointError:  # not an npz at all: the npz format names what is wrong
        return False
    return IMAGE_TOWER + linen_key(g.PATCH.kernel) in headers


class _ImageTower:
    """The image tower's arrays of an open .npz, named without `params/img/`."""

    def __init__(self, npz):
        self._npz = npz
        headers = {k[len(IMAGE_TOWER):]: h for k, h in npz.headers.items()
                   if k.startswith(IMAGE_TOWER)}
        self.shapes = {k: h.shape for k, h in headers.items()}
        # The stored dtypes, which the headers keep, so the loader still names an integer array.
        self.dtypes = {k: h.dtype for k, h in headers.items()}
        self.problems = [f"{IMAGE_TOWER}{k}: {h.problem or PICKLE_PROBLEM}"
                         for k, h in headers.items() if h.problem or h.dtype.hasobject]

    def read(self, names):
        stored = self._npz.read([IMAGE_TOWER + n for n in names])
        return {k[len(IMAGE_TOWER):]: v for k, v in stored.items()}


class BigVisionReader(RowTableReader):
    def __init__(self, source):
        tower = _ImageTower(_npz(source))
        if tower.problems:
            raise CheckpointError(f"{source.path} is not a readable big_vision checkpoint: "
                                  f"{'; '.join(tower.problems[:3])}"
                                  + (" ..." if len(tower.problems) > 3 else ""))
        super().__init__(source, FORMAT, tower,
                         lambda arrays, heads: big_vision_to_official(arrays, source=source.path),
                         dtypes=tower.dtypes)

    def info(self):
        shapes = self.shapes()
        query = shapes.get(g.QUERY.kernel.format(i=0))  # (D, heads, head_dim): the head count
        return CheckpointInfo(shapes, format="big_vision", normalization=OFFICIAL_NORMALIZATION,
                              heads=query[1] if query and len(query) == 3 else None)


FORMAT = CheckpointFormat(
    name="big_vision",
    description="big_vision two-tower .npz (SigLIP: the image tower under params/img/)",
    recognises=_recognises, open=BigVisionReader, numerics=(True, 1e-6),
    position_resize="linear")  # big_vision's resample_posemb: scipy's zoom, order 1
