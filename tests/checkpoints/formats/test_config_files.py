"""Configs that lie: each refused in one line naming the file and the field, the model
unchanged. The folders are written by transformers' save_pretrained and keras-hub's
save_to_preset, then one value is edited."""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit.variants import get_variant
from tests.checkpoints.formats.test_formats import _assert_refused, _hf

TINY = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")
HF = dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3, intermediate_size=768,
          image_size=64, num_labels=4)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A transformers folder and a keras-hub classifier preset of the tiny ViT."""
    keras_hub = pytest.importorskip("keras_hub")
    root = tmp_path_factory.mktemp("sources")
    _, _, transformers = _hf(HF, root)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(64, 64, 3), patch_size=16, num_layers=2, num_heads=3, hidden_dim=192,
        mlp_dim=768, layer_norm_epsilon=1e-6)
    preset = root / "preset"
    keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=4,
                                        preprocessor=None).save_to_preset(str(preset))
    return {"transformers": transformers, "keras_hub": preset}


def _set(field, value):
    def edit(config):
        config[field] = value
    return edit


def _set_backbone(field, value):
    def edit(config):
        config["config"][field] = value
    return edit


NAN = float("nan")
CASES = [  # (source, file edited, edit, words the message must hold)
    ("transformers", "config.json", _set("layer_norm_eps", NAN), "layer_norm_eps is nan"),
    ("transformers", "config.json", _set("layer_norm_eps", -1e-6), "layer_norm_eps is -1e-06"),
    ("transformers", "config.json", _set("layer_norm_eps", 0), "layer_norm_eps is 0"),
    ("transformers", "config.json", _set("layer_norm_eps", True), "layer_norm_eps is True"),
    ("transformers", "config.json", _set("layer_norm_eps", "1e-12"), "layer_norm_eps is '1e-12'"),
    ("transformers", "config.json", _set("layer_norm_eps", float("inf")), "layer_norm_eps is inf"),
    ("transformers", "config.json", _set("num_attention_heads", "3"), "num_attention_heads is '3'"),
    ("transformers", "config.json", _set("num_attention_heads", 0), "num_attention_heads is 0"),
    ("transformers", "config.json", _set("hidden_size", 192.0), "hidden_size is 192.0"),
    ("transformers", "config.json", _set("num_hidden_layers", False), "num_hidden_layers is False"),
    ("transformers", "config.json", lambda c: [1, 2], "holds a JSON list"),
    ("transformers", "config.json", lambda c: "vit", "holds a JSON str"),
    ("keras_hub", "config.json", _set_backbone("layer_norm_epsilon", NAN), "layer_norm_epsilon is nan"),
    ("keras_hub", "config.json", _set_backbone("num_heads", "3"), "num_heads is '3'"),
    ("keras_hub", "config.json", _set_backbone("hidden_dim", -192), "hidden_dim is -192"),
    ("keras_hub", "config.json", _set("registered_name", "other>ViTBackbone"), "other>ViTBackbone"),
    ("keras_hub", "config.json", _set("config", [0.5] * 10000), "holds a JSON list"),
    ("keras_hub", "task.json", _set("registered_name", "other>ViTImageClassifier"),
     "other>ViTImageClassifier"),
    ("keras_hub", "task.json", lambda c: 7, "holds a JSON int"),
    ("keras_hub", "task.weights.h5", None, "task.weights.h5, which holds its head, is missing"),
    # Values out of range (issue 32): refused before keras_vit or keras-hub builds anything.
    ("transformers", "config.json", _set("num_hidden_layers", 10 ** 6), "num_hidden_layers is 1000000"),
    ("transformers", "config.json", _set("hidden_size", 10 ** 9), "hidden_size is 1000000000"),
    ("transformers", "config.json", _set("patch_size", 10 ** 9), "patch_size is 1000000000"),
    ("transformers", "config.json", _set("image_size", float("inf")), "image_size is inf"),
    ("transformers", "config.json", _set("num_attention_heads", True), "num_attention_heads is True"),
    ("keras_hub", "config.json", _set_backbone("num_layers", 10 ** 6), "num_layers is 1000000"),
    ("keras_hub", "config.json", _set_backbone("hidden_dim", float("inf")), "hidden_dim is inf"),
    ("keras_hub", "config.json", _set_backbone("image_shape", [64, 64]), "image_shape is [64, 64]"),
    ("keras_hub", "config.json", _set_backbone("patch_size", "16"), "patch_size is '16'"),
    ("keras_hub", "config.json", _set_backbone("use_class_token", "yes"), "use_class_token is 'yes'"),
    ("keras_hub", "config.json", lambda c: c["config"].pop("num_layers") and None,
     "num_layers is missing"),
    # Within the caps, 256 blocks of width 262,144 need 4.6e14 bytes: refused before keras-hub
    # builds its model from the config.
    ("keras_hub", "config.json", lambda c: c["config"].update(hidden_dim=2 ** 18, mlp_dim=2 ** 18,
                                                              num_layers=256),
     "describes a model this machine cannot hold"),
    ("keras_hub", "task.json", _set_backbone("num_classes", float("inf")), "num_classes is inf"),
]


@pytest.mark.parametrize("source,name,edit,words", CASES,
                         ids=[f"{s}-{n}-{w[:24]}" for s, n, _, w in CASES])
def test_a_lying_config_is_refused_in_one_line_naming_the_field(folders, tmp_path, source, name,
                                                               edit, words):
    directory = tmp_path / source
    shutil.copytree(folders[source], directory)
    path = directory / name
    if edit is None:
        os.remove(path)
    else:
        config = json.loads(path.read_text())
        edited = edit(config)
        path.write_text(json.dumps(config if edited is None else edited))
    model = keras_vit.ViT(TINY, image_size=64, classes=4)
    _assert_refused(model, directory, words.replace("(", r"\(").replace("[", r"\[").replace(".", r"\."))
    with pytest.raises(keras_vit.CheckpointError) as error:
        keras_vit.ViT(TINY, weights=str(directory))
    message = str(error.value)
    assert "\n" not in message and str(directory) in message
    assert len(message) < 400  # a lying config's contents are never dumped into the message


def test_the_unedited_folders_load(folders):
    """The control: the folders the cases edit load as they are."""
    for source in ("transformers", "keras_hub"):
        model = keras_vit.ViT(TINY, weights=str(folders[source]))
        assert model.output_shape == (None, 4) and np.isfinite(model.get_weights()[0]).all()
