"""AIMv2 from transformers' `save_pretrained` folders: Aimv2VisionModel with a small config
(width 64, 2 blocks, 2 heads, 14-pixel patches on 56 pixels) and random weights, read by
`keras_vit.from_pretrained`: every token of `last_hidden_state` (after the final RMSNorm) at the
config's size, and the mean of them (the row's features, timm's) at `pooling="gap"`. Its
attention-pooling head, which keras_vit's row (as timm's) does not compute, is refused with a
top and left unread without one.

Tolerance: 1e-4 of the largest output, as tests/checkpoints/formats/test_transformers_families.py
argues.
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

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96,
             patch_size=14, image_size=56)


def _saved(folder, **extra):
    return saved_by_transformers(folder, "Aimv2VisionModel", "Aimv2VisionConfig", **{**SMALL, **extra})


@pytest.mark.parametrize("use_head", [False, True])
def test_an_aimv2_folder_computes_what_transformers_computes(use_head, tmp_path):
    theirs, torch = _saved(tmp_path, use_head=use_head)
    images = _images(2, (56, 56))
    with torch.no_grad():
        expected = theirs(pixel_values=torch.from_numpy(
            images.transpose(0, 3, 1, 2).copy())).last_hidden_state.numpy()
    tokens = keras_vit.from_pretrained(str(tmp_path), include_top=False, pooling=None)
    _assert_close(np.asarray(tokens(images)), expected)
    pooled = keras_vit.from_pretrained(str(tmp_path), include_top=False)
    _assert_close(np.asarray(pooled(images)), expected.mean(axis=1))
    if use_head:
        with pytest.raises(CheckpointError, match="attention-pooling head") as raised:
            keras_vit.from_pretrained(str(tmp_path), include_top=True)
        assert "\n" not in str(raised.value)


@pytest.mark.parametrize("change, named", [(dict(is_native=True), "is_native"),
                                           (dict(qkv_bias=True), "qkv_bias"),
                                           (dict(hidden_act="gelu"), "hidden_act")])
def test_an_aimv2_setting_keras_vit_does_not_compute_is_refused_in_one_line(change, named,
                                                                           tmp_path):
    _saved(tmp_path, **change)
    with pytest.raises(CheckpointError, match=named) as raised:
        keras_vit.from_pretrained(str(tmp_path))
    assert "\n" not in str(raised.value)


def test_a_full_size_aimv2_config_names_its_row():
    _torch()
    import transformers

    from keras_vit.checkpoints.formats.transformers_families import family_variant

    config = transformers.Aimv2VisionConfig().to_dict()  # apple/aimv2-large-patch14-224's sizes
    assert family_variant(config).name == "AIMv2-L/14"
