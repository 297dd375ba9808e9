"""A file whose config describes another architecture than its arrays (an edited depth or MLP
ratio) is refused in one line from the headers, before any model is built: else the config's
model, possibly of gigabytes, is built first and only the load finds the mismatch. The file is
keras_vit's own timm-layout writer's (save_safetensors) of a one-block ViT-Ti; the config is
timm's Hub config.json. (OpenCLIP's MLP ratio: tests/checkpoints/formats/test_open_clip.py.)"""

import dataclasses
import json

import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.models import vit


@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timm") / "tiny"
    folder.mkdir()
    variant = dataclasses.replace(keras_vit.get_variant("Ti/16"), depth=1)
    keras_vit.save_safetensors(keras_vit.ViT(variant, image_size=32, classes=3),
                               folder / "model.safetensors")
    return folder


def _config(folder, **model_args):
    (folder / "config.json").write_text(json.dumps({
        "architecture": "vit_tiny_patch16_224", "num_classes": 3,
        "model_args": {"depth": 1, "img_size": 32, **model_args}}))
    return str(folder)


def test_the_config_that_describes_the_arrays_loads(timm_folder):
    model = keras_vit.from_pretrained(_config(timm_folder))
    assert model.output_shape == (None, 3)


@pytest.mark.parametrize("model_args, named", [
    (dict(depth=12), "depth: 12 in the config, 1 in the arrays"),
    (dict(embed_dim=384, num_heads=6), "width: 384 in the config, 192 in the arrays"),
], ids=["depth", "width"])
def test_a_config_of_another_architecture_is_refused_before_anything_is_built(
        timm_folder, monkeypatch, model_args, named):
    def no_build(*args, **kwargs):
        raise AssertionError("a model was built")
    monkeypatch.setattr(vit, "_build", no_build)
    with pytest.raises(CheckpointError, match="its config does not describe its weights") \
            as error:
        keras_vit.from_pretrained(_config(timm_folder, **model_args))
    assert named in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("model_args", [dict(num_heads=0), dict(patch_size=0),
                                        dict(embed_dim=0), dict(num_heads=5)],
                         ids=["zero-heads", "zero-patch", "zero-width", "heads-not-dividing"])
def test_a_config_of_no_possible_model_is_one_line(timm_folder, monkeypatch, model_args):
    """Zero heads, patch or width (a ZeroDivisionError once), heads that do not divide the
    width: refused in one line, nothing built."""
    monkeypatch.setattr(vit, "_build", lambda *a, **k: pytest.fail("a model was built"))
    with pytest.raises(CheckpointError) as error:
        keras_vit.from_pretrained(_config(timm_folder, **model_args))
    assert "\n" not in str(error.value) and str(timm_folder) in str(error.value)


def test_every_size_of_a_described_model_is_checked():
    from keras_vit.checkpoints.formats.config_values import check_geometry

    tiny = keras_vit.get_variant("Ti/16")
    for fields, named in [(dict(mlp_dim=0), "mlp_dim 0"), (dict(depth=0), "depth 0"),
                          (dict(heads=5), "5 attention heads, which do not divide its width 192")]:
        with pytest.raises(CheckpointError, match=named):
            check_geometry("config.json", dataclasses.replace(tiny, **fields))
    check_geometry("config.json", tiny)  # the row itself passes
