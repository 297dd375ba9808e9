"""keras-hub ViT presets (`save_to_preset` directories) -> the official layout.

A classifier preset saved with its preprocessor holds `preprocessor.json`, whose
image converter's scale/offset is the model's normalisation.

A preset is `config.json` + `model.weights.h5` (a backbone), with `task.json` +
`task.weights.h5` for an image classifier. Its Keras weights file is read by
keras-hub itself (the only reader that knows how its layers nest); the variables
are then renamed by path. keras-hub's ViT mirrors the official one: (D, heads,
head_dim) attention kernels, a class token, exact-erf GELU, epsilon from config.
"""

import os
import re

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import config_values as checks
from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import (
    ArraysReader,
    CheckpointFormat,
    CheckpointInfo,
)
from keras_vit.checkpoints.formats.config_variant import match_or_name
from keras_vit.checkpoints.formats.keras_hub_families import PRESET_FAMILIES
from keras_vit.checkpoints.formats.keras_hub_presets import (
    import_keras_hub,
    preset_normalization,
    preset_preprocessing,
    read_preset_json,
)
from keras_vit.checkpoints.formats.rows import ADD_BATCH_AXIS, COPY, KeyRow, to_official
from keras_vit.variants import Variant

__all__ = ["FORMAT", "KERAS_HUB_ROWS", "read_keras_hub", "keras_hub_config", "task_config",
           "keras_hub_to_official", "keras_hub_shapes"]


def _recognises(source):
    if not source.is_dir:
        return False
    try:
        config = source.json("config.json")
    except CheckpointError:
        if os.path.exists(os.path.join(source.path, "model.weights.h5")):
            raise  # a preset's Keras weights beside it: no other format names the broken file
        return False  # another format's reader names the broken file
    return isinstance(config, dict) and str(config.get("module", "")).startswith("keras_hub.")


def _open(source):
    """keras-hub reads its own weights file (only it knows how its layers nest): the arrays
    are read whole, once, when the preset is opened."""
    directory = source.path
    config = keras_hub_config(directory)
    task = task_config(directory)
    # keras-hub builds its model from these configs: the architecture is checked against
    # memory first.
    checks.check_architecture(os.path.join(directory, "config.json"), keras_hub_variant(config),
                       tuple(config["image_shape"][:2]), (task or {}).get("num_classes"))
    info = CheckpointInfo(keras_hub_shapes(config, task), format="keras_hub",
                          image_size=tuple(config["image_shape"][:2]),
                          heads=config.get("num_heads"),
                          layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
                          normalization=preset_normalization(directory),
                          preprocessing=preset_preprocessing(directory),
                          variant=keras_hub_variant(config))
    arrays = read_keras_hub(directory, has_task=task is not None)
    return ArraysReader(arrays, path=directory, source=source, format=FORMAT, info=info)


def _patch_size(value):
    """A check: keras-hub's patch_size, one side or [rows, columns]."""
    return checks.counts(checks.MAX_PIXELS, 2, least=2)(value) if isinstance(value, list) else \
        checks.PIXELS(value)


# The fields keras_vit reads from a ViTBackbone's config (keras_hub_shapes, the numerics), and
# those keras-hub builds its model from, checked before either happens.
KERAS_HUB_FIELDS = {
    "hidden_dim": checks.WIDTH, "num_layers": checks.LAYERS, "num_heads": checks.HEADS,
    "mlp_dim": checks.WIDTH, "image_shape": checks.counts(checks.MAX_PIXELS, 3, least=3),
    "patch_size": _patch_size, "layer_norm_epsilon": checks.epsilon, "use_class_token": checks.flag,
}
KERAS_HUB_REQUIRED = ("hidden_dim", "num_layers", "num_heads", "mlp_dim", "image_shape",
                      "patch_size")
# ... and from a ViTImageClassifier's task.json.
TASK_FIELDS = {"num_classes": checks.CLASSES, "intermediate_dim": checks.optional(checks.WIDTH)}


def keras_hub_config(directory):
    """The backbone's config (image_shape, patch_size, hidden_dim, ..., layer_norm_epsilon)."""
    path = os.path.join(directory, "config.json")
    config = checks.check_object(path, read_preset_json(path))
    # Both names: a class of the same name registered by another package is not keras-hub's.
    if (config.get("class_name") != "ViTBackbone"
            or config.get("registered_name", "keras_hub>ViTBackbone") != "keras_hub>ViTBackbone"):
        known = ", ".join(["ViTBackbone", *PRESET_FAMILIES])
        raise CheckpointError(f"{directory} is a keras-hub {_short(config.get('class_name'))} "
                              f"preset (registered as {_short(config.get('registered_name'))}); "
                              f"keras_vit reads the presets of keras_hub's {known}.")
    backbone = checks.check_object(f"{path} (its \"config\")", config.get("config"))
    return checks.check_fields(path, backbone, KERAS_HUB_FIELDS, required=KERAS_HUB_REQUIRED)


def keras_hub_variant(config):
    """The `Variant` a checked ViTBackbone config describes (its memory is checked on it)."""
    patch = config["patch_size"]
    return match_or_name(Variant(
        "", width=config["hidden_dim"], depth=config["num_layers"], mlp_dim=config["mlp_dim"],
        heads=config["num_heads"], patch_size=max(patch) if isinstance(patch, list) else patch,
        classifier="token" if config.get("use_class_token", True) else "gap"))


def task_config(directory):
    """The classifier's config from task.json, or None for a backbone-only preset. A
    classifier's head is in task.weights.h5: a task without it is refused, not given a
    random head."""
    path = os.path.join(directory, "task.json")
    if not os.path.exists(path):
        return None
    task = checks.check_object(path, read_preset_json(path))
    name, registered = task.get("class_name"), task.get("registered_name")
    if name != "ViTImageClassifier" or registered not in (None, "keras_hub>ViTImageClassifier"):
        raise CheckpointError(f"{path} describes a {_short(name)} (registered as "
                              f"{_short(registered)}); keras_vit reads "
                              "keras_hub>ViTImageClassifier tasks.")
    if not os.path.exists(os.path.join(directory, "task.weights.h5")):
        raise CheckpointError(f"{directory}: task.json describes a classifier but task.weights.h5, "
                              "which holds its head, is missing (an incomplete copy?).")
    config = checks.check_object(f"{path} (its \"config\")", task.get("config", {}))
    return checks.check_fields(path, config, TASK_FIELDS, required=("num_classes",))


def _short(value, limit=80):
    """A config value for a message: never a dump of whatever a lying file holds."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def read_keras_hub(directory, has_task):
    """Official-key arrays of a keras-hub ViT preset (the classifier's head too, if saved)."""
    keras_hub = import_keras_hub(directory)
    if has_task:
        model = keras_hub.models.ImageClassifier.from_preset(directory)
    else:
        model = keras_hub.models.Backbone.from_preset(directory)
    return keras_hub_to_official({v.path: np.asarray(v.numpy()) for v in model.weights})


FORMAT = CheckpointFormat(
    name="keras_hub", description="keras-hub preset folder (save_to_preset: backbone, or "
                                  "image classifier with task.json)",
    recognises=_recognises, open=_open, numerics=(False, 1e-6))


_BLOCK = "vit_encoder/transformer_block_{i+1}/"  # keras-hub counts blocks from 1
_EMBEDDING = "vit_patching_and_embedding/"
# keras-hub's ViT, row by row (formats/rows.py): its variable paths, whose layouts are the
# official ones but for the position embedding's missing batch axis.
KERAS_HUB_ROWS = (
    KeyRow(_EMBEDDING + "class_token", g.CLS),
    *g.dense(_EMBEDDING + "patch_embedding", g.PATCH, COPY, g.KERAS),
    KeyRow(_EMBEDDING + "position_embedding/embeddings", g.POSITIONS, ADD_BATCH_AXIS),
    *g.norm(_BLOCK + "ln_1", g.NORM1, g.KERAS_NORM),
    *g.attention(_BLOCK + "mha/", ("query", "key", "value", "attention_output"),
                 transforms=(COPY, COPY), suffixes=g.KERAS),
    *g.norm(_BLOCK + "ln_2", g.NORM2, g.KERAS_NORM),
    *g.dense(_BLOCK + "mlp/dense_1", g.MLP_IN, COPY, g.KERAS),
    *g.dense(_BLOCK + "mlp/dense_2", g.MLP_OUT, COPY, g.KERAS),
    *g.norm("vit_encoder/ln", g.ENCODER_NORM, g.KERAS_NORM),
    # keras-hub's classifier names its pre_logits layer and variables as the official ones.
    *g.dense("pre_logits", g.PRE_LOGITS, COPY, g.KERAS),
    *g.dense("predictions", g.HEAD, COPY, g.KERAS),
    # Older keras-hub classifiers named the head output_dense.
    *g.dense("output_dense", g.HEAD, COPY, g.KERAS, read_only=True),
)
# The layers a variable path is read from (a model nested in another adds its own name before).
_ROOTS = re.compile(r"(?:.*/)?((?:vit_patching_and_embedding|vit_encoder|pre_logits|predictions"
                    r"|output_dense)/.+)")


def keras_hub_to_official(arrays):
    """{keras-hub variable path: array} -> official-key arrays; a path no row takes passes
    through (prefixed "keras_hub:"), for the strict loader to name as unexpected."""
    roots = {}
    for path in arrays:
        m = _ROOTS.fullmatch(path)
        roots[m.group(1) if m else path] = path
    out = to_official(KERAS_HUB_ROWS, {k: arrays[p] for k, p in roots.items()},
                      unknown_prefix="keras_hub:")
    return {(f"keras_hub:{roots[k[len('keras_hub:'):]]}" if k.startswith("keras_hub:") else k): v
            for k, v in out.items()}


def keras_hub_shapes(config, task_config=None):
    """The official-key shapes of a keras-hub ViT backbone of `config` (and of its image
    classifier's pre_logits and head, given the task's config): its configs, not its h5
    file, are the cheap header."""
    d, p = config["hidden_dim"], config["patch_size"]
    h, w, c = config["image_shape"]
    p = p if isinstance(p, int) else p[0]
    has_cls = config.get("use_class_token", True)
    shapes = {g.PATCH.kernel: (p, p, c, d),
              g.POSITIONS: (1, (h // p) * (w // p) + has_cls, d)}
    if has_cls:
        shapes[g.CLS] = (1, 1, d)
    for i in range(config["num_layers"]):
        shapes[g.NORM1.scale.format(i=i)] = (d,)
    if task_config is not None:
        hidden = task_config.get("intermediate_dim")
        if hidden:
            shapes[g.PRE_LOGITS.kernel] = (d, hidden)
        shapes[g.HEAD.kernel] = (hidden or d, task_config.get("num_classes"))
    return shapes
