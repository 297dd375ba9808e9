"""keras_vit against timm on the same random official-layout checkpoint."""

import dataclasses

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.variants import get_variant
from tests.oracle import random_vit_npz, run_timm, timm_vit

TOLERANCE = 1e-4


def _images(n, size, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *size, 3)).astype(np.float32)


def _compare(variant, image_size, classes, tmp_path, pre_logits=None, batch=2):
    grid = (image_size // variant.patch_size,) * 2
    path = tmp_path / "ckpt.npz"
    random_vit_npz(path, variant, grid, classes=classes, pre_logits=pre_logits)
    images = _images(batch, (image_size, image_size))

    ours = keras_vit.ViT(variant, weights=str(path), representation_size=None)
    theirs = timm_vit(variant, image_size, classes, path)
    logits = ours.predict(images, verbose=0)
    reference = run_timm(theirs, images)
    np.testing.assert_allclose(logits, reference, atol=TOLERANCE, rtol=0)

    pooled = ours.get_layer(f"{variant.classifier}_pool").output
    features = keras.Model(ours.input, pooled)  # the pre-head features, same weights
    np.testing.assert_allclose(features.predict(images, verbose=0),
                               run_timm(theirs, images, features=True), atol=TOLERANCE, rtol=0)
    return logits


@pytest.mark.parametrize("name,image_size", [("Ti/16", 224), ("S/32", 224), ("B/8", 64),
                                             ("B/16-gap", 96), ("S/16-gap", 64)])
def test_logits_and_features_match_timm(name, image_size, tmp_path):
    logits = _compare(get_variant(name), image_size, 1000, tmp_path)
    assert np.abs(logits).max() > 0.1  # a loaded head, not the zero-initialised one


@pytest.mark.slow
@pytest.mark.parametrize("classes", [1000, 21843])
def test_b16_full_size_matches_timm(classes, tmp_path):
    _compare(get_variant("B/16"), 224, classes, tmp_path)


def test_b16_full_size_1000_classes_matches_timm(tmp_path):
    # The headline configuration stays in the default run; 21,843 classes is slow-marked.
    _compare(get_variant("B/16"), 224, 1000, tmp_path, batch=1)


def test_pre_logits_kept_and_computed_as_dense_tanh(tmp_path):
    """timm ignores pre_logits, so this path is checked against NumPy on the file's arrays."""
    variant = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")
    path = tmp_path / "ckpt.npz"
    arrays = random_vit_npz(path, variant, (4, 4), classes=10, pre_logits=32)
    model = keras_vit.ViT(variant, weights=str(path), image_size=64)
    assert model.get_layer("pre_logits").units == 32
    images = _images(2, (64, 64))
    features = keras_vit.ViT(variant, weights=str(path), image_size=64, include_top=False)
    pooled = features.predict(images, verbose=0)
    pre = np.tanh(pooled @ arrays["pre_logits/kernel"] + arrays["pre_logits/bias"])
    expected = pre @ arrays["head/kernel"] + arrays["head/bias"]
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-5)
    # A new class count drops pre_logits and starts the head at zero, as fine-tuning does.
    tuned = keras_vit.ViT(variant, weights=str(path), image_size=64, classes=3)
    assert "pre_logits" not in [layer.name for layer in tuned.layers]
    assert not np.any(tuned.get_layer("head").kernel.numpy())
