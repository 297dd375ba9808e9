"""The attention probe and `analyze` on a NaFlex model (SigLIP 2 NaFlex's architecture, shrunk):
probed on images of its stored grid's size, fed as their patches.

The reference is the same architecture taking images (`patch_input="image"`: a patch
convolution and a learned position embedding at the same grid) holding the same weights,
whose probe path is checked against timm's attention in tests/cli/test_family_commands.py.
At its stored grid, with every token a patch, the NaFlex model computes that function, so
each block's attention, its tokens and the outputs agree to float32 rounding: 1e-5 on
attention probabilities (at most 1) and a relative 1e-5 on tokens and logits (the patch
embedding sums 768 products in another order; measured ~1e-7). Patches fed in another order
move the attention maps by far more.
"""

import dataclasses
import json

import numpy as np
import pytest

import keras_vit
from keras_vit.analysis import AttentionProbe, analyze
from keras_vit.analysis.embeddings import position_embedding_similarity
from tests.runtime.test_naflex_predict import TINY_NAFLEX, tiny_naflex_model

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def models():
    naflex = tiny_naflex_model()
    images = keras_vit.ViT(dataclasses.replace(TINY_NAFLEX, patch_input="image"), classes=7)
    for layer in images.layers:
        if layer.weights:
            layer.set_weights(naflex.get_layer(layer.name).get_weights())
    return naflex, images


def test_the_probe_reads_a_naflex_model_as_the_same_model_taking_images(models):
    naflex, images = models
    ours, theirs = AttentionProbe(naflex), AttentionProbe(images)
    for field in ("grid_size", "num_prefix_tokens", "has_class_token", "image_size", "stride",
                  "num_layers", "num_heads", "channels"):
        assert getattr(ours, field) == getattr(theirs, field), field
    pixels = np.random.default_rng(1).uniform(-1, 1, (3, 64, 64, 3)).astype(np.float32)
    got, expected = ours(pixels, batch_size=2), theirs(pixels, batch_size=2)
    np.testing.assert_allclose(got.attention, expected.attention, rtol=0, atol=TOLERANCE)
    for field in ("tokens", "outputs"):
        scale = np.abs(getattr(expected, field)).max()
        np.testing.assert_allclose(getattr(got, field) / scale, getattr(expected, field) / scale,
                                   rtol=0, atol=TOLERANCE, err_msg=field)
    np.testing.assert_allclose(ours.mean_attention_distance(pixels),
                               theirs.mean_attention_distance(pixels), rtol=TOLERANCE)


def test_analyze_writes_a_naflex_models_figures(models, tmp_path):
    naflex, images = models
    pixels = np.random.default_rng(2).uniform(0, 255, (4, 64, 64, 3)).astype(np.float32)
    reports, files = [], []
    for model, folder in ((naflex, tmp_path / "naflex"), (images, tmp_path / "images")):
        files.append([path[len(str(folder)):] for path in
                      analyze(model, pixels, str(folder), rollout_images=2)])
        with open(folder / "analysis.json") as file:
            reports.append(json.load(file))
    assert files[0] == files[1] and len(files[0]) == 5  # the position embedding's figure too
    np.testing.assert_allclose(position_embedding_similarity(naflex),
                               position_embedding_similarity(images), rtol=0, atol=1e-12)
    ours, theirs = reports
    assert ours["grid_size"] == theirs["grid_size"] == [4, 4]
    for key in ("mean_attention_distance_pixels", "attention_rollout_heatmaps"):
        np.testing.assert_allclose(ours[key], theirs[key], rtol=0, atol=1e-3)  # rounded to 3, 6
