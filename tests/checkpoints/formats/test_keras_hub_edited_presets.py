"""A keras-hub DINOv2 preset whose config.json was edited (heads, width, depth, registers,
position grid, image shape) or whose preprocessor.json holds a list: refused in one line,
before keras-hub builds the config's model (a depth of 256 is not built), also through
`keras-vit predict --weights`. The preset is keras-hub's own `save_to_preset` of a tiny
backbone; the expected shapes come from keras-hub building the config, not from keras_vit."""

import json
import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError

keras_hub = pytest.importorskip("keras_hub")


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dinov2") / "preset"
    keras_hub.models.DINOV2Backbone(
        patch_size=8, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=48,
        num_register_tokens=2, image_shape=(32, 32, 3),
        position_embedding_shape=(48, 48, 3)).save_to_preset(str(directory))
    from PIL import Image

    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(directory.parent / "a.png")
    return directory


def _edited(preset, tmp_path, **changes):
    directory = tmp_path / "edited"
    shutil.copytree(preset, directory)
    config = json.loads((directory / "config.json").read_text())
    config["config"].update(changes)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_the_preset_as_saved_loads(preset):
    """The check passes keras-hub's own file: the refusals below are the edits'."""
    model = keras_vit.from_pretrained(str(preset), include_top=False)
    assert model.output_shape == (None, 32)


@pytest.mark.parametrize("changes", [
    dict(num_heads=4), dict(hidden_dim=64, num_heads=2), dict(num_layers=256),
    dict(num_register_tokens=4), dict(position_embedding_shape=[64, 64, 3]),
    dict(image_shape=[40, 40, 3])],
    ids=["heads", "width", "depth-256", "registers", "position-grid", "image-shape"])
def test_an_edited_config_is_refused_before_its_model_is_built(preset, tmp_path, monkeypatch,
                                                               cli, changes):
    directory = _edited(preset, tmp_path, **changes)
    built = []
    original = keras_hub.models.Backbone.from_preset
    monkeypatch.setattr(keras_hub.models.Backbone, "from_preset",
                        lambda *a, **k: built.append(a) or original(*a, **k))
    with pytest.raises(CheckpointError, match="config.json does not describe model.weights.h5"
                                              "|keras-hub cannot build") as error:
        keras_vit.from_pretrained(str(directory))
    assert "\n" not in str(error.value) and built == []
    result = cli(["predict", "--model", "DINOv2-S/14", "--weights", str(directory),
                  str(preset.parent / "a.png")])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert str(directory) in result.stderr


def test_a_preprocessor_whose_config_is_a_list_is_refused_in_one_line(preset, tmp_path):
    directory = _edited(preset, tmp_path)
    (directory / "preprocessor.json").write_text(json.dumps({"class_name": "X", "config": [1]}))
    with pytest.raises(CheckpointError, match="preprocessor.json.*JSON list") as error:
        keras_vit.from_pretrained(str(directory))
    assert "\n" not in str(error.value)
