"""keras-hub ViT presets (`save_to_preset` directories) -> the official layout.

A preset is `config.json` + `model.weights.h5` (a backbone), with `task.json` +
`task.weights.h5` for an image classifier. Its Keras weights file is read by
keras-hub itself (the only reader that knows how its layers nest); the variables
are then renamed by path. keras-hub's ViT mirrors the official one: (D, heads,
head_dim) attention kernels, a class token, exact-erf GELU, epsilon from config.
"""

import json
import os

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.config_values import check_config_values, check_object
from keras_vit.checkpoints.layout import keras_hub_key

__all__ = ["is_keras_hub_preset", "read_keras_hub", "keras_hub_config", "task_config"]

def is_keras_hub_preset(directory):
    try:
        with open(os.path.join(directory, "config.json")) as f:
            return str(json.load(f).get("module", "")).startswith("keras_hub.")
    except (OSError, ValueError, AttributeError):
        return False


KERAS_HUB_COUNTS = ("hidden_dim", "num_layers", "num_heads", "mlp_dim")


def keras_hub_config(directory):
    """The backbone's config (image_shape, patch_size, hidden_dim, ..., layer_norm_epsilon)."""
    path = os.path.join(directory, "config.json")
    config = check_object(path, _read_json(path))
    # Both names: a class of the same name registered by another package is not keras-hub's.
    if (config.get("class_name") != "ViTBackbone"
            or config.get("registered_name", "keras_hub>ViTBackbone") != "keras_hub>ViTBackbone"):
        raise CheckpointError(f"{directory} is a keras-hub {_short(config.get('class_name'))} "
                              f"preset (registered as {_short(config.get('registered_name'))}); "
                              "keras_vit reads keras_hub>ViTBackbone presets.")
    backbone = check_object(f"{path} (its \"config\")", config.get("config"))
    check_config_values(path, backbone, counts=KERAS_HUB_COUNTS, epsilons=("layer_norm_epsilon",))
    return backbone


def task_config(directory):
    """The classifier's config from task.json, or None for a backbone-only preset. A
    classifier's head is in task.weights.h5: a task without it is refused, not given a
    random head."""
    path = os.path.join(directory, "task.json")
    if not os.path.exists(path):
        return None
    task = check_object(path, _read_json(path))
    name, registered = task.get("class_name"), task.get("registered_name")
    if name != "ViTImageClassifier" or registered not in (None, "keras_hub>ViTImageClassifier"):
        raise CheckpointError(f"{path} describes a {_short(name)} (registered as "
                              f"{_short(registered)}); keras_vit reads "
                              "keras_hub>ViTImageClassifier tasks.")
    if not os.path.exists(os.path.join(directory, "task.weights.h5")):
        raise CheckpointError(f"{directory}: task.json describes a classifier but task.weights.h5, "
                              "which holds its head, is missing (an incomplete copy?).")
    return check_object(f"{path} (its \"config\")", task.get("config", {}))


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable JSON file ({error}).") from error


def _short(value, limit=80):
    """A config value for a message: never a dump of whatever a lying file holds."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def read_keras_hub(directory):
    """Official-key arrays of a keras-hub ViT preset (the classifier's head too, if saved)."""
    keras_hub_config(directory)
    has_task = task_config(directory) is not None
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(f"Reading the keras-hub preset {directory} needs keras-hub: "
                          "pip install keras-hub.") from error
    if has_task:
        model = keras_hub.models.ImageClassifier.from_preset(directory)
    else:
        model = keras_hub.models.Backbone.from_preset(directory)
    out = {}
    for variable in model.weights:
        out[keras_hub_key(variable.path)] = np.asarray(variable.numpy())
    return out
