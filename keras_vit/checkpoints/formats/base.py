"""What every checkpoint format declares, and the one open checkpoint a load goes through.

A format (one module of this package each) is a `CheckpointFormat`: how it
recognises a path, how it opens it, and the numerics of the library that
writes it. Opening gives a `CheckpointReader`; every check and every array a
load needs comes through it, from files each opened once (`Source`): a file
replaced on disk during a load cannot give one file's trunk and another's head.
"""

import abc
import contextlib
import dataclasses
import math
import os
from collections.abc import Callable

import numpy as np

from keras_vit._support.files import refuse_special_file
from keras_vit._support.json_files import read_json
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.layout import (
    BIT_HEAD_KERNEL_KEY,
    HEAD_KERNEL_KEY,
    POS_EMBED_KEY,
    PRE_LOGITS_KERNEL_KEY,
    normalize_keys,
    square_grid,
)
from keras_vit.normalization import OFFICIAL_NORMALIZATION

__all__ = ["ArrayHeader", "CheckpointInfo", "CheckpointFormat", "Resizes", "CheckpointReader", "ArraysReader",
           "RowTableReader", "Source", "shape_stand_ins", "OFFICIAL_NORMALIZATION", "normalization_from",
           "channel_values", "open_file"]

@dataclasses.dataclass(frozen=True)
class ArrayHeader:
    """What a header says about one array, or `problem` when it cannot be trusted."""

    shape: tuple
    dtype: np.dtype
    problem: str | None = None

    @property
    def ndim(self):
        return len(self.shape)


@dataclasses.dataclass
class CheckpointInfo:
    """What a checkpoint tells without reading its arrays, in official keys.

    `heads`, the numerics and the normalisation are None where the source does not record
    them (a bare timm state dict records no head count and no mean/std).
    """

    shapes: dict
    format: str = "npz"
    metadata: dict = dataclasses.field(default_factory=dict)  # keras_vit's own record (grid)
    layer_norm_epsilon: float | None = None
    approximate_gelu: bool | None = None
    heads: int | None = None
    normalization: tuple | None = None  # ((mean,) * 3, (std,) * 3) on pixels in [0, 1]
    # How the source's library resizes an image (keras_vit.preprocessing_record), where its
    # files record it (timm's pretrained_cfg, a saved image processor, open_clip's preprocess_cfg).
    preprocessing: object = None
    # A hybrid's ResNet numerics where its library's differ from the official ones:
    # ResNetTrunk's group_norm_epsilon, std_conv_epsilon, std_conv_epsilon_on.
    trunk_numerics: dict | None = None
    # The architecture the source's config describes (a `Variant`), where it describes one.
    variant: object = None
    # The image size the source's own model is built at, where its config sets one apart from
    # its position embedding's grid (a keras-hub DINOv2's image_shape): the default resolution.
    image_size: int | None = None
    # Why the file's head cannot be loaded into keras_vit's (a classifier on features its
    # heads do not compute), where it cannot: a load with a head is refused saying so.
    head_refusal: str | None = None

    @property
    def classes(self):
        head = self.shapes.get(HEAD_KERNEL_KEY) or self.shapes.get(BIT_HEAD_KERNEL_KEY)
        return head[-1] if head else None

    @property
    def representation_size(self):
        pre = self.shapes.get(PRE_LOGITS_KERNEL_KEY)
        return pre[-1] if pre else None

    def resolution(self, variant):
        pos = self.shapes.get(POS_EMBED_KEY)
        if not pos or len(pos) != 3 or not hasattr(variant, "total_stride"):  # BiT: any size
            return None
        if self.image_size is not None:
            return self.image_size
        # The grid the file records (save_npz), else a square token count's; a non-square count
        # with no record could be several grids, so the caller's image_size decides.
        grid = self.metadata.get("grid") or square_grid(pos[1] - variant.position_prefix_tokens)
        if not grid:
            return None
        rows, cols = (side * variant.total_stride for side in grid)
        return rows if rows == cols else (rows, cols)


@dataclasses.dataclass(frozen=True)
class Resizes:
    """How a library moves a file's weights to another size (names of
    `keras_vit.layers.tokens.POSITION_RESIZES`), which keras_vit repeats."""

    load: str  # the position embedding, loaded at another image size
    dynamic: str  # the position embedding inside the call (dynamic_image_size)
    patch: str  # the patch-embedding kernel, loaded at another patch size (FlexiViT's resize)


@dataclasses.dataclass(frozen=True)
class CheckpointFormat:
    """One checkpoint format: the registry (`formats/__init__.py`) lists these."""

    name: str
    description: str  # what a user has: "timm state dict (.safetensors, or a Hub folder)"
    recognises: Callable  # Source -> bool, from names and configs only, never arrays
    open: Callable  # Source -> CheckpointReader
    numerics: tuple  # (approximate_gelu, layer_norm_epsilon) of the library writing it
    write: str | None = None  # the keras_vit function that writes it, where one does
    # How the library writing it moves a position embedding to another grid, which a load at
    # another image size repeats (layers/tokens.py POSITION_RESIZES): the official linear
    # zoom, timm's antialiased bicubic, transformers' bicubic, ...
    position_resize: str = "linear"
    # The same inside the call, where the library resizes otherwise at run time (timm's
    # FlexiViT: bilinear at load, its antialiased bicubic under dynamic_img_size); None: the same.
    dynamic_resize: str | None = None
    # How it moves a patch-embedding kernel to another patch size (resample_patch_embedding).
    patch_resize: str = "bilinear"
    # ((family, Resizes), ...): a family its library resizes otherwise (timm's FlexiViT).
    family_resizes: tuple = ()
    # What its files, without a config beside them, do not record and that changes their
    # outputs (a head count its shapes fuse aside: that the shapes tell): `Variant` fields, and
    # "approximate_gelu", ViT's argument. A load that must guess them is refused, naming them
    # (keras_vit/models/pretrained.py).
    unrecorded: tuple = ()
    # Whether it reads pickled torch files (.pth, .bin, ...), through torch's weights-only
    # unpickler: only such formats are tried on a pickled file, and only on one.
    pickled: bool = False

    def resizes(self, family=None):
        """The `Resizes` of this format's files of `family` (a FAMILIES row's family)."""
        return dict(self.family_resizes).get(family) or Resizes(
            self.position_resize, self.dynamic_resize or self.position_resize, self.patch_resize)


class Source:
    """A checkpoint path during one load: each of its files opened at most once, shared by
    format detection and by the reader."""

    def __init__(self, path):
        self.path = os.fspath(path)
        refuse_special_files(self.path)
        if not os.path.exists(self.path):
            raise CheckpointError(f"No checkpoint file at {self.path}.")
        self.is_dir = os.path.isdir(self.path)
        self.folder = self.path if self.is_dir else (os.path.dirname(self.path) or ".")
        self._files = contextlib.ExitStack()
        self._cache = {}

    def once(self, key, opener):
        """`opener()`'s result, computed on the first call for `key` only; a result with
        `close` is closed with this source."""
        if key not in self._cache:
            value = opener()
            if hasattr(value, "close"):
                self._files.callback(value.close)
            self._cache[key] = value
        return self._cache[key]

    def json(self, name):
        """The folder's JSON file `name` (None where absent), read once."""
        def read():
            path = os.path.join(self.folder, name)
            if not os.path.exists(path):
                return None
            try:
                return read_json(path, "a JSON file", CheckpointError)
            except OSError as error:
                raise CheckpointError(f"{path} is not a readable JSON file ({error}).") from error
        return self.once(("json", name), read)

    def close(self):
        self._files.close()


class CheckpointReader(abc.ABC):
    """One open checkpoint: `info()` from headers and configs, `headers()` and `read()` in
    official keys. A reader owns its `Source` and closes it."""

    def __init__(self, source, format):
        self.source, self.format = source, format
        self.path = source.path

    @abc.abstractmethod
    def info(self):
        """A `CheckpointInfo`, from headers and configs only."""

    @abc.abstractmethod
    def headers(self, heads=None):
        """{official key: ArrayHeader}; `heads` splits fused attention kernels."""

    @abc.abstractmethod
    def read(self, keys, heads=None):
        """{official key: array} of `keys`."""

    def close(self):
        self.source.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ArraysReader(CheckpointReader):
    """A reader over arrays already in memory: a dict passed to `load_weights`, or a format
    that can only be read whole. Keys in an accepted alternative layout are normalised."""

    def __init__(self, arrays, path="the checkpoint", source=None, format=None, info=None):
        self.source, self.format, self.path = source, format, path
        try:
            self._stored = normalize_keys({k: k for k in arrays})  # official key -> as stored
        except CheckpointError as error:
            raise CheckpointError(f"{path}: {error}") from None
        self._arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self._info = info

    def info(self):
        """A `CheckpointInfo`, from headers and configs only."""
        if self._info is not None:
            return self._info
        return CheckpointInfo({k: self._arrays[s].shape for k, s in self._stored.items()},
                              format=self.format.name if self.format else "arrays")

    def headers(self, heads=None):
        return {k: ArrayHeader(tuple(self._arrays[s].shape), self._arrays[s].dtype)
                for k, s in self._stored.items()}

    def read(self, keys, heads=None):
        return {k: self._arrays[self._stored[k]] for k in keys}

    def close(self):
        if self.source is not None:
            self.source.close()


class RowTableReader(CheckpointReader):
    """A state dict read through a format's rows: every library format's reader.

    `weights` is the stored state dict, opened once (`shapes`: {name: shape}, `read(names)`:
    {name: array}); `convert` ({stored name: array}, heads -> {official key: array}) is the
    format's rows and fix-ups. Headers are `convert` run on zero-memory stand-ins, so they
    come from the very transforms the arrays go through. `names` keeps the stored arrays the
    format reads (not a two-tower file's text tower); `dtypes` {name: dtype} the stored dtypes
    a header reports (default: the state dict's own `dtypes`, else float32). With
    `reads_in_parts`, a read opens only the stored arrays that hold the keys asked (the loader
    reads a large file row by row); only a format whose every official array comes from one
    stored array may say so.
    """

    def __init__(self, source, format, weights, convert, names=None, dtypes=None,
                 reads_in_parts=False):
        super().__init__(source, format)
        self._weights, self._convert = weights, convert
        self._names = list(weights.shapes if names is None else names)
        # The stored dtypes, so that the loader refuses a tensor that is no float by its header.
        self._dtypes = dtypes or getattr(weights, "dtypes", None) or {}
        self.reads_in_parts = reads_in_parts
        self._owner_map = None

    def _stand_ins(self, names):
        return {n: np.broadcast_to(np.zeros((), self._dtypes.get(n, np.float32)),
                                   tuple(self._weights.shapes[n])) for n in names}

    def headers(self, heads=None):
        arrays = self._convert(self._stand_ins(self._names), heads)
        return {k: ArrayHeader(tuple(v.shape), v.dtype) for k, v in arrays.items()}

    def read(self, keys, heads=None):
        names = self._names
        if self.reads_in_parts:
            owners = self._owners()
            names = list(dict.fromkeys(owners[k] for k in keys))
        arrays = self._convert(self._weights.read(names), heads)
        return {k: arrays[k] for k in keys}

    def _owners(self):
        """{official key: the stored array it comes from}, from the names and shapes alone."""
        if self._owner_map is None:
            self._owner_map = {official: name for name in self._names
                               for official in self._convert(self._stand_ins([name]), None)}
        return self._owner_map

    def shapes(self, heads=None):
        """{official key: shape}, from the headers."""
        return {k: h.shape for k, h in self.headers(heads).items()}


def channel_values(path, name, values):
    """Three floats from a config's one or three finite numbers, or a one-line refusal."""
    values = values if isinstance(values, (list, tuple)) else [values]
    if (len(values) not in (1, 3) or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                         or not math.isfinite(v) for v in values)):
        raise CheckpointError(f"{path}: the normalisation {name} {str(values)[:80]} is not "
                              "one or three finite numbers.")
    return tuple(float(v) for v in values) * (3 // len(values))


def normalization_from(path, mean, std, per_unit=1.0):
    """((mean,) * 3, (std,) * 3) on pixels in [0, 1], from a config's values given on pixels
    in [0, 1 * per_unit] (255 * a rescale factor: transformers'), or a one-line refusal naming
    the file: the normalisation the model computes, checked (`normalization_problem`)."""
    from keras_vit.normalization import normalization_problem

    mean, std = channel_values(path, "mean", mean), channel_values(path, "std", std)
    if min(std) <= 0:
        raise CheckpointError(f"{path}: the normalisation std {std} is not positive.")
    mean, std = tuple(m / per_unit for m in mean), tuple(s / per_unit for s in std)
    problem = normalization_problem((mean, std))
    if problem is not None:
        raise CheckpointError(f"{path}: its normalisation cannot be computed: {problem}.")
    return mean, std


def shape_stand_ins(shapes):
    """{key: a float32 array of that shape} that holds no memory (every element is one zero,
    np.broadcast_to): a format's rows run on these translate headers with the very transforms
    that translate arrays, without reading or allocating any."""
    zero = np.zeros((), np.float32)
    return {k: np.broadcast_to(zero, tuple(s)) for k, s in shapes.items()}


def open_file(path):
    """A checkpoint file opened for reading, or a one-line refusal saying why it cannot be."""
    try:
        return open(path, "rb")
    except OSError as error:
        raise CheckpointError(f"{path} cannot be opened ({error.strerror or error}).") from error


def refuse_special_files(path):
    """Refuses, before anything opens it, a path (or a file of a folder) that is a FIFO, a
    socket or a device: opening a FIFO with no writer blocks for ever, a device never ends."""
    paths = [path]
    if os.path.isdir(path):
        paths = [os.path.join(path, name) for name in os.listdir(path)]
    for candidate in paths:
        refuse_special_file(candidate, "a checkpoint file", CheckpointError)
