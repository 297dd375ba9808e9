"""keras-hub's DINOv3 presets: a `DINOV3Backbone` (width 64, 2 blocks, 2 heads of 32, 16-pixel
patches, 4 registers) with random weights, written by keras-hub's `save_to_preset`, read by
`keras_vit.from_pretrained`. keras-hub's output is the whole normed sequence (class token,
registers, patches): keras_vit's `pooling=None` gives the same tokens, at the preset's 64 x 64
and, from `from_preset(..., image_shape=...)`, at 48 x 80 (RoPE for the new grid, no table to
resize). Plain MLP with the key's bias off (the releases'), gated (S+, H+) and all biases.

Tolerance: 1e-4 of the largest output, as tests/checkpoints/formats/test_keras_hub_families.py.
"""

import numpy as np
import pytest

import keras_vit
from keras_vit.errors import CheckpointError
from tests.checkpoints.formats.test_formats import _images
from tests.checkpoints.formats.test_keras_hub_families import _assert_close, _randomise

TOWER = dict(patch_size=16, num_layers=2, hidden_dim=64, num_heads=2, intermediate_dim=128,
             num_register_tokens=4, layer_scale_init_value=1e-5, image_shape=(64, 64, 3))
CASES = {"plain": dict(use_key_bias=False), "gated": dict(use_gated_mlp=True,
                                                          hidden_activation="silu"),
         "all-biases": {}}


def _preset(keras_hub, directory, **extra):
    backbone = _randomise(keras_hub.models.DINOV3Backbone(**{**TOWER, **extra}))
    backbone.save_to_preset(directory)
    return backbone


@pytest.mark.parametrize("case", list(CASES))
def test_a_dinov3_preset_computes_what_keras_hub_computes(case, tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    directory = str(tmp_path / "dinov3")
    backbone = _preset(keras_hub, directory, **CASES[case])
    ours = keras_vit.from_pretrained(directory, include_top=False, pooling=None)
    images = _images(2, (64, 64))
    _assert_close(np.asarray(ours(images)), np.asarray(backbone(images)))
    theirs = keras_hub.models.Backbone.from_preset(directory, image_shape=(48, 80, 3))
    ours = keras_vit.from_pretrained(directory, include_top=False, pooling=None,
                                     image_size=(48, 80))
    images = _images(2, (48, 80))
    _assert_close(np.asarray(ours(images)), np.asarray(theirs(images)))


@pytest.mark.parametrize("change, named", [
    (dict(rope_theta=10000.0), "rope_theta"), (dict(use_proj_bias=False), "use_proj_bias"),
    (dict(use_query_bias=False), "biases"), (dict(hidden_activation="silu"), "hidden_activation")])
def test_a_dinov3_setting_keras_vit_does_not_compute_is_refused_in_one_line(change, named,
                                                                           tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    directory = str(tmp_path / "dinov3")
    _preset(keras_hub, directory, **change)
    with pytest.raises(CheckpointError, match=named) as raised:
        keras_vit.from_pretrained(directory)
    assert "\n" not in str(raised.value)
