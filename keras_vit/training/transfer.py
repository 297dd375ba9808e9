"""Starting a run from an earlier run: `weights` naming a `.keras` file or a run folder.

The earlier model's backbone goes into the new model through the same loader as every
other checkpoint: it is written as a temporary official-layout `.npz` (with save_npz's
record of its numerics, grid and normalisation) without its head, so the new model gets
the paper's zero-initialised head for the new dataset's classes, its position
embeddings are resized for a new resolution, and a shape that does not fit is refused
naming the keys, as for any file.
"""

import contextlib
import os
import tempfile

import numpy as np

from keras_vit._support.json_files import read_json
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.errors import ArgumentError, PathNotFoundError
from keras_vit.models.factory import RUN_FILE, keras_file

__all__ = ["run_model_file", "source_architecture", "backbone_weights"]


def run_model_file(weights):
    """The `.keras` file `weights` names (itself, or a run folder's model.keras:
    `keras_vit.models.factory.keras_file`), which must exist before a run starts from it; None
    when `weights` is something else (a catalogue tag, an .npz, ...)."""
    path = keras_file(weights)
    if path is not None and not os.path.isfile(path):
        raise PathNotFoundError(f"No .keras file at {path}.")
    return path


def source_architecture(weights):
    """The architecture name of the model `weights` names when it is a `.keras` file or a
    run folder (the run's recorded model, else the model's own name); None otherwise."""
    path = run_model_file(weights)
    if path is None:
        return None
    from keras_vit.variants import get_architecture

    recorded = _recorded_model(os.path.dirname(path) or ".")
    name = recorded if isinstance(recorded, str) else _load(path).name
    try:
        return get_architecture(name).name
    except ValueError:
        raise ArgumentError(f"{path} holds a model named {name!r}, which is no architecture "
                            "keras_vit knows by name; give its architecture with --model.") from None


@contextlib.contextmanager
def backbone_weights(weights):
    """`weights` as the loader reads it: for a `.keras` file or a run folder, the path of a
    temporary `.npz` of its model without the head (deleted on exit); else `weights`."""
    path = run_model_file(weights)
    if path is None:
        yield weights
        return
    from keras_vit.checkpoints.formats.npz_metadata import (
        METADATA_KEY,
        metadata_array,
        model_metadata,
    )
    from keras_vit.checkpoints.layout import DROPPABLE_PREFIXES, official_arrays

    model = _load(path)
    # The head, and pre_logits when there is one: the new dataset's model starts both afresh.
    arrays = {key: value for key, value in official_arrays(model).items()
              if not key.startswith(DROPPABLE_PREFIXES)}
    arrays[METADATA_KEY] = metadata_array(model_metadata(model))
    with tempfile.TemporaryDirectory() as folder:
        npz = os.path.join(folder, "backbone.npz")
        np.savez(npz, **arrays)
        yield npz


def _recorded_model(folder):
    try:
        record = read_json(os.path.join(folder, RUN_FILE), "a run record", CheckpointError)
        return record.get("config", {}).get("model")
    except (OSError, CheckpointError, AttributeError):
        return None


def _load(path):
    from keras_vit.models.factory import load

    return load(path, compile=False)
