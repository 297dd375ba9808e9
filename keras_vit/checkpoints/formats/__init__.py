"""Readers of checkpoint files; each returns arrays keyed in the official layout.

    npz.py           official .npz files (the layout the others are translated into)
    safetensors.py   the safetensors container, read and written with NumPy
    timm.py          timm's VisionTransformer state dict <-> official keys
    transformers.py  Hugging Face transformers ViT (save_pretrained directories)
    keras_hub.py     keras-hub ViT presets (save_to_preset directories)

`read_checkpoint` and `inspect_checkpoint` pick the reader from the path; the
one strict loader (`keras_vit.checkpoints.loader`) then validates and assigns.
"""

import dataclasses
import os
import stat

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import keras_hub as _keras_hub
from keras_vit.checkpoints.formats import safetensors as _st
from keras_vit.checkpoints.formats import timm as _timm
from keras_vit.checkpoints.formats import transformers as _hf
from keras_vit.checkpoints.formats.npz import NpzInfo, inspect_npz, read_npz
from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY
from keras_vit.checkpoints.layout import (
    POS_EMBED_KEY,
    keras_hub_shapes,
    normalize_keys,
    timm_to_official,
    transformers_to_official,
)

__all__ = ["read_checkpoint", "inspect_checkpoint", "is_checkpoint_path", "detect_format",
           "CheckpointInfo", "PICKLED_SUFFIXES"]

# Pickled torch files: unpickling runs whatever code the file holds.
PICKLED_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")


@dataclasses.dataclass
class CheckpointInfo(NpzInfo):
    """What a checkpoint's headers (or config) say, in official keys, and its format."""

    format: str = "npz"
    layer_norm_epsilon: float | None = None
    approximate_gelu: bool | None = None
    heads: int | None = None  # where the file's config says; (D, D) kernels do not


def is_checkpoint_path(weights):
    """Whether a `weights=` string names a file or directory rather than a catalogue tag."""
    return (weights.endswith((".npz", ".safetensors", _st.INDEX_SUFFIX))
            or weights.lower().endswith(PICKLED_SUFFIXES)
            or os.path.sep in weights or os.path.isdir(weights))


def detect_format(path):
    """"npz", "timm", "transformers" or "keras_hub"; refuses pickled files unread."""
    path = os.fspath(path)
    _refuse_special_files(path)
    if path.lower().endswith(PICKLED_SUFFIXES) or (os.path.isdir(path) and not _weights_in(path)
                                            and _pickled_in(path)):
        raise CheckpointError(
            f"{path} is a pickled PyTorch file; keras_vit does not open it, because unpickling "
            "runs any code the file holds. Use the model's .safetensors file (timm and "
            "transformers publish one), or convert it where you trust it: "
            "safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors').")
    if os.path.isdir(path):
        if _keras_hub.is_keras_hub_preset(path):
            return "keras_hub"
        if _weights_in(path) and _timm.is_timm_layout(_st.safetensors_shapes(_hf_weights_path(path))):
            return "timm"  # a timm hub repository: model.safetensors (+ timm's own config.json)
        if os.path.exists(os.path.join(path, "config.json")) and _weights_in(path):
            return "transformers"
        raise CheckpointError(f"{path} is a folder; a checkpoint is one .npz file, a .safetensors "
                              "file, a transformers save_pretrained folder (config.json + "
                              "model.safetensors) or a keras-hub preset folder.")
    if path.endswith((".safetensors", _st.INDEX_SUFFIX)):
        names = _st.safetensors_shapes(path)
        if _hf.is_transformers_layout(names):
            directory = os.path.dirname(path) or "."
            if os.path.exists(os.path.join(directory, "config.json")):
                return "transformers"
            raise CheckpointError(f"{path} holds transformers ViT weights; pass the directory "
                                  "holding it and its config.json, which sets the numerics.")
        if _timm.is_timm_layout(names):
            return "timm"
        raise CheckpointError(f"{path} is a .safetensors file in neither timm's nor transformers' "
                              "ViT layout (no patch embedding found).")
    return "npz"


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _refuse_special_files(path):
    """Refuses, before anything opens it, a path (or a file of a folder) that is a FIFO, a
    socket or a device: opening a FIFO with no writer blocks for ever, a device never ends."""
    paths = [path]
    if os.path.isdir(path):
        paths = [os.path.join(path, name) for name in os.listdir(path)]
    for candidate in paths:
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            continue  # a missing file is named by whoever needs it
        for is_kind, kind in _KINDS:
            if is_kind(mode):
                raise CheckpointError(f"{candidate} is {kind}, not a checkpoint file; keras_vit "
                                      "reads regular files only.")


def _weights_in(directory):
    return _weights_file(directory) is not None


def _weights_file(directory):
    """The folder's model.safetensors, or the index of its shards."""
    for name in ("model.safetensors", "model" + _st.INDEX_SUFFIX):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return None


def _pickled_in(directory):
    return any(n.lower().endswith(PICKLED_SUFFIXES) for n in os.listdir(directory))


def _hf_weights_path(path):
    return _weights_file(path) if os.path.isdir(path) else path


def _hf_directory(path):
    return path if os.path.isdir(path) else (os.path.dirname(path) or ".")


def read_checkpoint(path, heads=None):
    """Every array of a checkpoint, keyed in the official layout (attention split into
    `heads` heads for the formats that fuse them)."""
    fmt = detect_format(path)
    if fmt == "npz":
        arrays = read_npz(path)
        arrays.pop(METADATA_KEY, None)  # keras_vit's record, not a weight
        return normalize_keys(arrays)
    if fmt == "timm":
        return timm_to_official(_st.read_safetensors(_hf_weights_path(path)), heads, source=path)
    if fmt == "transformers":
        _hf.read_config(_hf_directory(path))
        arrays = transformers_to_official(_st.read_safetensors(_hf_weights_path(path)), heads)
        return _flat_posembed(arrays)
    return _flat_posembed(_keras_hub.read_keras_hub(path), add_batch=True)


def _flat_posembed(arrays, add_batch=False):
    key = POS_EMBED_KEY
    if add_batch and key in arrays and arrays[key].ndim == 2:
        arrays[key] = arrays[key][None]
    return arrays


def inspect_checkpoint(path, format=None):
    """A `CheckpointInfo` from headers and configs only (cheap for large files)."""
    fmt = detect_format(path)
    if format is not None and fmt != format:
        raise CheckpointError(f"{path} is a {fmt} checkpoint, not the {format} file expected.")
    if fmt == "npz":
        info = inspect_npz(path)
        return CheckpointInfo(info.shapes, info.metadata, format="npz",
                              layer_norm_epsilon=info.metadata.get("layer_norm_epsilon"),
                              approximate_gelu=info.metadata.get("approximate_gelu"))
    if fmt == "timm":
        shapes = timm_to_official(_shapes_only(_st.safetensors_shapes(_hf_weights_path(path))),
                                  source=path)
        # A bare state dict does not record its heads (the variant's are assumed); a Hub
        # folder's config.json names the architecture, whose heads variants.py's timm table knows.
        heads = _timm.heads_from_config(_hf_directory(path)) if os.path.isdir(path) else None
        return CheckpointInfo(_to_shapes(shapes), format="timm", heads=heads)
    if fmt == "transformers":
        config = _hf.read_config(_hf_directory(path))
        shapes = transformers_to_official(
            _shapes_only(_st.safetensors_shapes(_hf_weights_path(path))))
        return CheckpointInfo(_to_shapes(shapes), format="transformers",
                              layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
                              approximate_gelu=config.get("hidden_act", "gelu") != "gelu",
                              heads=config.get("num_attention_heads"))
    config = _keras_hub.keras_hub_config(path)
    # An image classifier's task config: its head, and pre_logits if it has one.
    shapes = keras_hub_shapes(config, _keras_hub.task_config(path))
    return CheckpointInfo(shapes, format="keras_hub", heads=config.get("num_heads"),
                          layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6))


class _ShapeOnly:
    """An array stand-in carrying only a shape, for translating headers with the readers'
    own code (transposes and slices are all they do)."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.ndim = len(self.shape)

    @property
    def T(self):
        return _ShapeOnly(self.shape[::-1])

    def transpose(self, *axes):
        return _ShapeOnly(tuple(self.shape[a] for a in axes))

    def __getitem__(self, index):
        return _ShapeOnly(np.empty((self.shape[0], 0))[index].shape[:1] + self.shape[1:])

    def reshape(self, shape):
        return _ShapeOnly(shape)


def _shapes_only(shapes):
    return {k: _ShapeOnly(s) for k, s in shapes.items()}


def _to_shapes(arrays):
    return {k: tuple(v.shape) for k, v in arrays.items()}
