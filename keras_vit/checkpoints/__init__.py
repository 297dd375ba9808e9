"""Weights: the catalogue of official checkpoints, their key layout, and the strict loader.

    catalogue.py     the weight sets as `Checkpoint` records, and tag look-up
    cache.py         where each file lives: downloads, checksum pins, hub snapshots, the
                     contents check before use
    layout.py        the one place the official keys are spelled; the table of official
                     keys -> model variables, and the accepted alternative spellings
    loader.py        the one strict, all-or-nothing loader (trunk-only is a filter)
    formats/         one module per format: its reader, its row table to and from the
                     official keys (formats/rows.py applies them), and its writer where
                     keras_vit writes it (save_npz in npz.py, save_safetensors in timm.py)
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
from keras_vit.checkpoints.formats.npz import inspect_npz, read_npz, save_npz
from keras_vit.checkpoints.formats.timm import save_safetensors
from keras_vit.checkpoints.layout import describe_architecture, layout, normalize_keys
from keras_vit.checkpoints.loader import load_resnet_weights, load_weights

__all__ = ["Checkpoint", "catalogue", "find_checkpoint", "list_models", "resolve_weights",
           "pin_checksum",
           "cache_dir", "CheckpointError", "WeightsUnavailableError", "load_weights",
           "load_resnet_weights", "read_npz", "inspect_npz", "normalize_keys", "layout",
           "describe_architecture", "save_npz", "save_safetensors"]
