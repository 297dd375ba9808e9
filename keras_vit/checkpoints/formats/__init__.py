"""Checkpoint formats, one module each, and the registry that picks one.

    npz.py           the official .npz (the layout every other format is translated into)
    bit.py           BiT's .npz release files (big_transfer's ResNetV2 layout)
    big_vision.py    big_vision's two-tower .npz (SigLIP): the image tower under params/img/
    dinov2.py        DINOv2's own release files (.pth, through torch's weights-only loader)
    open_clip.py     OpenCLIP / OpenAI CLIP state dicts (.safetensors): the image tower under visual.,
                     alone or in an OpenCLIP Hub folder (open_clip_config.json: open_clip_config.py)
    timm.py          timm's VisionTransformer state dict (.safetensors, or a Hub folder)
    transformers.py  Hugging Face transformers ViT (save_pretrained folders)
    transformers_hybrid.py  transformers' ViTHybrid (R50+ViT-B/16; save_pretrained folders)
    transformers_families.py  transformers' DeiT, DINOv2, SigLIP and CLIP vision folders
    keras_hub.py     keras-hub ViT presets (save_to_preset folders)
    keras_hub_families.py  keras-hub presets of the families' image towers (SigLIP, CLIP, DINOv2)

Each defines `FORMAT` (a `base.CheckpointFormat`): how it recognises a path, how
it opens it, the numerics of its library. Beside them: `base.py` (the reader
every load goes through; `RowTableReader`, every library format's), `safetensors.py` (the
container, read and written with NumPy), `torch_state_dict.py` (pickled state dicts, through
torch's weights-only loader: the same interface, so every row-table format reads both),
`npz_metadata.py` (keras_vit's record in its own .npz files), `rows.py` (converters as
tables: each format's key rows, applied in either direction, and the fix-ups formats share),
`groups.py` (the official keys by feature, and
the row builders each table is composed of), `config_values.py` (the checks of every value a
format reads from a config, which a new format's table of fields reuses), `config_variant.py`
(a config's architecture -> its Variant, one matcher for every format).

A load detects the format once and opens each file once (`open_checkpoint`).
Adding a format is one module defining `FORMAT` and one line in `FORMATS`.
"""

import os

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import (
    big_vision,
    bit,
    dinov2,
    keras_hub,
    keras_hub_families,
    npz,
    open_clip,
    timm,
    transformers,
    transformers_families,
    transformers_hybrid,
)
from keras_vit.checkpoints.formats.base import CheckpointInfo, CheckpointReader, Source
from keras_vit.checkpoints.formats.safetensors import INDEX_SUFFIX
from keras_vit.checkpoints.formats.torch_state_dict import PICKLED_SUFFIXES, is_pickled

__all__ = ["FORMATS", "open_checkpoint", "inspect_checkpoint", "read_checkpoint", "detect_format",
           "is_checkpoint_path", "numerics_of", "CheckpointInfo", "CheckpointReader",
           "PICKLED_SUFFIXES"]

# The first format that recognises a path is its format. npz comes last: it takes any single
# file no other format took; transformers_hybrid before transformers, whose patch-embedding
# key a ViTHybrid folder has too; transformers_families (by config.json's model_type) before
# transformers, whose patch-embedding key DeiT and DINOv2 folders have too; keras_hub_families
# (by config.json's class_name) before keras_hub, which refuses every other keras-hub class;
# dinov2 (by its mask_token) before timm, whose patch-embedding key DINOv2's release files have
# too; open_clip (by open_clip_config.json) before transformers_families, whose CLIPModel an
# OpenCLIP repository holds beside its own weights. A pickled file (.bin, .pth, .pth.tar,
# .pt) is tried only by the formats that read state dicts through torch_state_dict.py
# (`pickled`), the others never see one.
FORMATS = [keras_hub_families.FORMAT, keras_hub.FORMAT, dinov2.FORMAT, timm.FORMAT,
           transformers_hybrid.FORMAT, open_clip.FORMAT, transformers_families.FORMAT,
           transformers.FORMAT, bit.FORMAT, big_vision.FORMAT, npz.FORMAT]



def is_checkpoint_path(weights):
    """Whether a `weights=` string names a file or directory rather than a catalogue tag."""
    return (weights.endswith((".npz", ".safetensors", INDEX_SUFFIX))
            or is_pickled(weights)
            or os.path.sep in weights or os.path.isdir(weights))


def numerics_of(name):
    """(approximate_gelu, layer_norm_epsilon) of the library writing format `name`."""
    return _named(name).numerics


def _named(name):
    for candidate in FORMATS:
        if candidate.name == name:
            return candidate
    raise CheckpointError(f"No checkpoint format is named {name!r}; keras_vit reads "
                          f"{', '.join(f.name for f in FORMATS)}.")


def detect(source):
    """The `CheckpointFormat` of an open `Source`. A pickled file is tried only by the formats
    that read pickles (through torch's weights-only loader, torch_state_dict.py)."""
    path = source.path
    pickled = not source.is_dir and is_pickled(path)
    for candidate in FORMATS:
        if (candidate.pickled or not pickled) and candidate.recognises(source):
            return candidate
    if pickled:
        raise CheckpointError(
            f"{path} is a pickled PyTorch file whose names are in no layout keras_vit reads "
            "(timm's, transformers', OpenCLIP's or DINOv2's release); keras_vit opens it only "
            "through torch's weights-only loader, so none of its code runs.")
    kinds = "; ".join(f.description for f in FORMATS)
    if source.is_dir:
        raise CheckpointError(f"{path} is a folder; a checkpoint is one .npz file, a .safetensors "
                              f"file, or a folder in a format keras_vit reads ({kinds}).")
    raise CheckpointError(f"{path} is in no checkpoint format keras_vit reads ({kinds}); a "
                          ".safetensors file needs timm's or transformers' ViT layout (no patch "
                          "embedding found).")


def open_checkpoint(path, format=None):
    """The `CheckpointReader` of a checkpoint path: its format detected once, its files opened
    once; close it (or use `with`) when done. `format` refuses any other format."""
    source = Source(path)
    try:
        found = detect(source)
        if format is not None and found.name != format:
            raise CheckpointError(f"{source.path} is a {found.name} checkpoint, not the {format} "
                                  "file expected.")
        return found.open(source)
    except BaseException:
        source.close()
        raise


def detect_format(path):
    """The name of a checkpoint path's format ("npz", "timm", ...)."""
    with open_checkpoint(path) as reader:
        return reader.format.name


def inspect_checkpoint(path, format=None):
    """A `CheckpointInfo` from headers and configs only (cheap for large files)."""
    with open_checkpoint(path, format) as reader:
        return reader.info()


def read_checkpoint(path, heads=None):
    """Every array of a checkpoint, keyed in the official layout (attention split into
    `heads` heads for the formats that fuse them)."""
    with open_checkpoint(path) as reader:
        headers = reader.headers(heads)
        return reader.read(list(headers), heads)
