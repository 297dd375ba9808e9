"""DINOv3 from transformers' `save_pretrained` folders: DINOv3ViTModel with a small config
(width 64, 2 blocks, 2 heads of 32, 16-pixel patches, 4 registers) and random weights, plain
(GELU MLP) and gated (SiLU-gated MLP, the S+ and H+ sizes' layout), read by
`keras_vit.from_pretrained`. Every token of `last_hidden_state` (the class token, the
registers, the patches, after the final norm) at the config's 64 x 64 and at a non-square
48 x 80, where transformers computes RoPE for the new grid as keras_vit does.

Tolerance: 1e-4 of the largest output, as tests/checkpoints/formats/test_transformers_families.py
argues; a wrong RoPE layout, register count or bias mapping moves 1e-2 or more.
"""

import numpy as np
import pytest

import keras_vit
from keras_vit.errors import CheckpointError
from tests.checkpoints.formats.test_formats import _images, _torch
from tests.checkpoints.formats.test_transformers_families import (
    _assert_close,
    saved_by_transformers,
)

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
             patch_size=16, image_size=64, num_register_tokens=4, layerscale_value=1e-5)
GATED = dict(use_gated_mlp=True, hidden_act="silu")


def _saved(folder, **extra):
    return saved_by_transformers(folder, "DINOv3ViTModel", "DINOv3ViTConfig", **{**SMALL, **extra})


@pytest.mark.parametrize("extra", [{}, GATED, dict(query_bias=False, value_bias=False)],
                         ids=["plain", "gated", "no-qkv-bias"])
def test_a_dinov3_folder_computes_what_transformers_computes(extra, tmp_path):
    theirs, torch = _saved(tmp_path, **extra)
    for size in ((64, 64), (48, 80)):
        ours = keras_vit.from_pretrained(str(tmp_path), include_top=False, pooling=None,
                                         image_size=size)
        images = _images(2, size)
        with torch.no_grad():
            expected = theirs(pixel_values=torch.from_numpy(
                images.transpose(0, 3, 1, 2).copy())).last_hidden_state.numpy()
        _assert_close(np.asarray(ours(images)), expected)
    # transformers' pooler_output is the class token after the final norm: pooling="token"
    pooled = keras_vit.from_pretrained(str(tmp_path), include_top=False, pooling="token")
    images = _images(2, (64, 64))
    with torch.no_grad():
        expected = theirs(pixel_values=torch.from_numpy(
            images.transpose(0, 3, 1, 2).copy())).pooler_output.numpy()
    _assert_close(np.asarray(pooled(images)), expected)


@pytest.mark.parametrize("fields, row", [
    (dict(), "DINOv3-S/16-qkvb"), (dict(query_bias=False, value_bias=False), "DINOv3-S/16"),
    (dict(GATED), "DINOv3-S+/16-qkvb"),
    (dict(hidden_size=1280, num_hidden_layers=32, num_attention_heads=20, intermediate_size=5120,
          **GATED), "DINOv3-H+/16-qkvb")])
def test_a_full_size_dinov3_config_names_its_row(fields, row):
    """facebook/dinov3-*'s configs (4 registers, LayerScale, 256 px) are the family's rows."""
    _torch()
    import transformers

    from keras_vit.checkpoints.formats.transformers_families import family_variant

    config = transformers.DINOv3ViTConfig(num_register_tokens=4, layerscale_value=1e-5,
                                          image_size=256, **fields).to_dict()
    assert family_variant(config).name == row


@pytest.mark.parametrize("change, named", [
    (dict(rope_theta=10000.0), "rope_theta"), (dict(proj_bias=False), "proj_bias"),
    (dict(key_bias=True, query_bias=False), "biases"), (dict(hidden_act="silu"), "hidden_act")])
def test_a_dinov3_setting_keras_vit_does_not_compute_is_refused_in_one_line(change, named,
                                                                           tmp_path):
    _saved(tmp_path, **change)
    with pytest.raises(CheckpointError, match=named) as raised:
        keras_vit.from_pretrained(str(tmp_path))
    assert "\n" not in str(raised.value)
