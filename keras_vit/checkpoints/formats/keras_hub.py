"""keras-hub ViT presets (`save_to_preset` directories) -> the official layout.

A preset is `config.json` + `model.weights.h5` (a backbone), with `task.json` +
`task.weights.h5` for an image classifier. Its Keras weights file is read by
keras-hub itself (the only reader that knows how its layers nest); the variables
are then renamed by path. keras-hub's ViT mirrors the official one: (D, heads,
head_dim) attention kernels, a class token, exact-erf GELU, epsilon from config.
"""

import json
import os
import re

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError

__all__ = ["is_keras_hub_preset", "read_keras_hub", "keras_hub_config"]

_BLOCK = {"ln_1/gamma": "LayerNorm_0/scale", "ln_1/beta": "LayerNorm_0/bias",
          "ln_2/gamma": "LayerNorm_2/scale", "ln_2/beta": "LayerNorm_2/bias",
          "mlp/dense_1/kernel": "MlpBlock_3/Dense_0/kernel",
          "mlp/dense_1/bias": "MlpBlock_3/Dense_0/bias",
          "mlp/dense_2/kernel": "MlpBlock_3/Dense_1/kernel",
          "mlp/dense_2/bias": "MlpBlock_3/Dense_1/bias",
          "mha/attention_output/kernel": "MultiHeadDotProductAttention_1/out/kernel",
          "mha/attention_output/bias": "MultiHeadDotProductAttention_1/out/bias"}


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
        out[_official_name(variable.path)] = np.asarray(variable.numpy())
    return out


def _official_name(path):
    m = re.search(r"transformer_block_(\d+)/(.+)$", path)
    if m:
        b = f"Transformer/encoderblock_{int(m.group(1)) - 1}"
        rest = m.group(2)
        if rest in _BLOCK:
            return f"{b}/{_BLOCK[rest]}"
        qkv = re.fullmatch(r"mha/(query|key|value)/(kernel|bias)", rest)
        if qkv:
            return f"{b}/MultiHeadDotProductAttention_1/{qkv.group(1)}/{qkv.group(2)}"
    for suffix, key in (("class_token", "cls"), ("patch_embedding/kernel", "embedding/kernel"),
                        ("patch_embedding/bias", "embedding/bias"),
                        ("vit_encoder/ln/gamma", "Transformer/encoder_norm/scale"),
                        ("vit_encoder/ln/beta", "Transformer/encoder_norm/bias"),
                        ("pre_logits/kernel", "pre_logits/kernel"),
                        ("pre_logits/bias", "pre_logits/bias"),
                        ("output_dense/kernel", "head/kernel"), ("output_dense/bias", "head/bias")):
        if path.endswith(suffix):
            return key
    if path.endswith("position_embedding/embeddings"):
        return "Transformer/posembed_input/pos_embedding"
    return "keras_hub:" + path  # the strict loader names it as unexpected
