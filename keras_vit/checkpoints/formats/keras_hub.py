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
from keras_vit.checkpoints.layout import keras_hub_key

__all__ = ["is_keras_hub_preset", "read_keras_hub", "keras_hub_config"]

def is_keras_hub_preset(directory):
    try:
        with open(os.path.join(directory, "config.json")) as f:
            return str(json.load(f).get("module", "")).startswith("keras_hub.")
    except (OSError, ValueError, AttributeError):
        return False


def keras_hub_config(directory):
    """The backbone's config (image_shape, patch_size, hidden_dim, ..., layer_norm_epsilon)."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    if config.get("class_name") != "ViTBackbone":
        raise CheckpointError(f"{directory} is a keras-hub {config.get('class_name')} preset; "
                              "keras_vit reads ViTBackbone presets.")
    return config["config"]


def read_keras_hub(directory):
    """Official-key arrays of a keras-hub ViT preset (the classifier's head too, if saved)."""
    keras_hub_config(directory)
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(f"Reading the keras-hub preset {directory} needs keras-hub: "
                          "pip install keras-hub.") from error
    if os.path.exists(os.path.join(directory, "task.json")):
        model = keras_hub.models.ImageClassifier.from_preset(directory)
    else:
        model = keras_hub.models.Backbone.from_preset(directory)
    out = {}
    for variable in model.weights:
        out[keras_hub_key(variable.path)] = np.asarray(variable.numpy())
    return out
