"""keras-hub ViT presets (`save_to_preset` directories) -> the official layout.

A classifier preset saved with its preprocessor holds `preprocessor.json`, whose
image converter's scale/offset is the model's normalisation.

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

from keras_vit._support.files import read_text
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import (
    ArraysReader,
    CheckpointFormat,
    CheckpointInfo,
    channel_values,
    normalization_from,
)
from keras_vit.checkpoints.formats.config_values import check_config_values, check_object
from keras_vit.checkpoints.layout import HEAD_KERNEL_KEY, POS_EMBED_KEY, PRE_LOGITS_KERNEL_KEY

__all__ = ["FORMAT", "read_keras_hub", "keras_hub_config", "task_config", "keras_hub_key",
           "keras_hub_shapes"]


def _recognises(source):
    if not source.is_dir:
        return False
    try:
        config = source.json("config.json")
    except CheckpointError:
        return False  # another format's reader names the broken file
    return isinstance(config, dict) and str(config.get("module", "")).startswith("keras_hub.")


def _open(source):
    """keras-hub reads its own weights file (only it knows how its layers nest): the arrays
    are read whole, once, when the preset is opened."""
    directory = source.path
    config = keras_hub_config(directory)
    task = task_config(directory)
    info = CheckpointInfo(keras_hub_shapes(config, task), format="keras_hub",
                          heads=config.get("num_heads"),
                          layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
                          normalization=_normalization(directory))
    arrays = read_keras_hub(directory, has_task=task is not None)
    if POS_EMBED_KEY in arrays and arrays[POS_EMBED_KEY].ndim == 2:
        arrays[POS_EMBED_KEY] = arrays[POS_EMBED_KEY][None]
    return ArraysReader(arrays, path=directory, source=source, format=FORMAT, info=info)


def _normalization(directory):
    """The preprocessor's image converter as mean/std on pixels in [0, 1] (it computes
    x * scale + offset on x in [0, 255]), or None where no preprocessor was saved."""
    path = os.path.join(directory, "preprocessor.json")
    if not os.path.exists(path):
        return None
    preprocessor = check_object(path, _read_json(path))
    converter = (preprocessor.get("config") or {}).get("image_converter") or {}
    converter = converter.get("config", {}) if isinstance(converter, dict) else {}
    scale, offset = converter.get("scale"), converter.get("offset")
    if scale is None:
        return None
    scale = channel_values(path, "scale", scale)
    offset = channel_values(path, "offset", 0.0 if offset is None else offset)
    if min(scale) <= 0:
        raise CheckpointError(f"{path}: the image converter's scale {scale} is not positive.")
    std = tuple(1.0 / (255.0 * s) for s in scale)
    mean = tuple(-o * s for o, s in zip(offset, std))
    return normalization_from(path, mean, std)


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
        return json.loads(read_text(path, "a JSON file", CheckpointError))
    except CheckpointError:
        raise
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable JSON file ({error}).") from error


def _short(value, limit=80):
    """A config value for a message: never a dump of whatever a lying file holds."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def read_keras_hub(directory, has_task):
    """Official-key arrays of a keras-hub ViT preset (the classifier's head too, if saved)."""
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


FORMAT = CheckpointFormat(
    name="keras_hub", description="keras-hub preset folder (save_to_preset: backbone, or "
                                  "image classifier with task.json)",
    recognises=_recognises, open=_open, numerics=(False, 1e-6))


_KERAS_HUB_BLOCK = {"ln_1/gamma": "LayerNorm_0/scale", "ln_1/beta": "LayerNorm_0/bias",
          "ln_2/gamma": "LayerNorm_2/scale", "ln_2/beta": "LayerNorm_2/bias",
          "mlp/dense_1/kernel": "MlpBlock_3/Dense_0/kernel",
          "mlp/dense_1/bias": "MlpBlock_3/Dense_0/bias",
          "mlp/dense_2/kernel": "MlpBlock_3/Dense_1/kernel",
          "mlp/dense_2/bias": "MlpBlock_3/Dense_1/bias",
          "mha/attention_output/kernel": "MultiHeadDotProductAttention_1/out/kernel",
          "mha/attention_output/bias": "MultiHeadDotProductAttention_1/out/bias"}


def keras_hub_key(path):
    m = re.search(r"transformer_block_(\d+)/(.+)$", path)
    if m:
        b = f"Transformer/encoderblock_{int(m.group(1)) - 1}"
        rest = m.group(2)
        if rest in _KERAS_HUB_BLOCK:
            return f"{b}/{_KERAS_HUB_BLOCK[rest]}"
        qkv = re.fullmatch(r"mha/(query|key|value)/(kernel|bias)", rest)
        if qkv:
            return f"{b}/MultiHeadDotProductAttention_1/{qkv.group(1)}/{qkv.group(2)}"
    for suffix, key in (("class_token", "cls"), ("patch_embedding/kernel", "embedding/kernel"),
                        ("patch_embedding/bias", "embedding/bias"),
                        ("vit_encoder/ln/gamma", "Transformer/encoder_norm/scale"),
                        ("vit_encoder/ln/beta", "Transformer/encoder_norm/bias"),
                        ("pre_logits/kernel", "pre_logits/kernel"),
                        ("pre_logits/bias", "pre_logits/bias"),
                        ("output_dense/kernel", "head/kernel"), ("output_dense/bias", "head/bias"),
                        ("predictions/kernel", "head/kernel"), ("predictions/bias", "head/bias")):
        if path.endswith(suffix):
            return key
    if path.endswith("position_embedding/embeddings"):
        return "Transformer/posembed_input/pos_embedding"
    return "keras_hub:" + path  # the strict loader names it as unexpected



def keras_hub_shapes(config, task_config=None):
    """The official-key shapes of a keras-hub ViT backbone of `config` (and of its image
    classifier's pre_logits and head, given the task's config): its configs, not its h5
    file, are the cheap header."""
    d, p = config["hidden_dim"], config["patch_size"]
    h, w, c = config["image_shape"]
    p = p if isinstance(p, int) else p[0]
    has_cls = config.get("use_class_token", True)
    shapes = {"embedding/kernel": (p, p, c, d), POS_EMBED_KEY: (1, (h // p) * (w // p) + has_cls, d)}
    if has_cls:
        shapes["cls"] = (1, 1, d)
    for i in range(config["num_layers"]):
        shapes[f"Transformer/encoderblock_{i}/LayerNorm_0/scale"] = (d,)
    if task_config is not None:
        hidden = task_config.get("intermediate_dim")
        if hidden:
            shapes[PRE_LOGITS_KERNEL_KEY] = (d, hidden)
        shapes[HEAD_KERNEL_KEY] = (hidden or d, task_config.get("num_classes"))
    return shapes
