"""Weights: the catalogue of official checkpoints, their key layout, and the strict loader.

    catalogue.py     tags -> files: look-up, download, cache, checksums
    layout.py        the one table of official keys -> model variables, and the accepted
                     alternative spellings of those keys
    loader.py        the one strict, all-or-nothing loader (trunk-only is a filter)
    formats/         readers: official .npz, timm safetensors, transformers (ViT and
                     ViTHybrid) and keras-hub directories, each into the official keys
    writers.py       save_npz / save_safetensors: a model back out, atomically
"""

from keras_vit.checkpoints.catalogue import (
                                             Checkpoint,
                                             cache_dir,
                                             catalogue,
                                             find_checkpoint,
                                             list_models,
                                             pin_checksum,
                                             resolve_weights,
)
from keras_vit.checkpoints.errors import CheckpointError, WeightsUnavailableError
from keras_vit.checkpoints.formats.npz import inspect_npz, read_npz
from keras_vit.checkpoints.layout import describe_architecture, layout, normalize_keys
from keras_vit.checkpoints.loader import load_resnet_weights, load_weights
from keras_vit.checkpoints.writers import save_npz, save_safetensors

__all__ = ["Checkpoint", "catalogue", "find_checkpoint", "list_models", "resolve_weights",
           "pin_checksum",
           "cache_dir", "CheckpointError", "WeightsUnavailableError", "load_weights",
           "load_resnet_weights", "read_npz", "inspect_npz", "normalize_keys", "layout",
           "describe_architecture", "save_npz", "save_safetensors"]
