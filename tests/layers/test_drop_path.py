"""Stochastic depth: DropPath drops whole examples' branches while training only, ViT's
per-block rates rise linearly, and a model with them saves and reloads as .keras."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.errors import ArgumentError
from keras_vit.variants import DEMO_VARIANT


def test_drop_path_zeroes_or_rescales_each_example_whole():
    x = np.random.default_rng(0).standard_normal((64, 3, 4)).astype("float32") + 5.0
    out = keras.ops.convert_to_numpy(keras_vit.DropPath(0.25, seed=1)(x, training=True))
    kept = np.all(np.isclose(out, x / 0.75, rtol=1e-6), axis=(1, 2))
    dropped = np.all(out == 0.0, axis=(1, 2))
    assert np.all(kept ^ dropped)  # one draw per example, shared by its tokens and features
    assert 0 < dropped.sum() < 64
    np.testing.assert_array_equal(keras_vit.DropPath(0.25)(x, training=False), x)


def test_drop_path_rate_is_checked():
    with pytest.raises(ArgumentError, match="drop path rate"):
        keras_vit.DropPath(1.0)
    with pytest.raises(ArgumentError, match="drop_path_rate"):
        keras_vit.ViT(DEMO_VARIANT, drop_path_rate=1.5, classes=3)


def _blocks(model):
    return [layer for layer in model.layers if isinstance(layer, keras_vit.TransformerBlock)]


def test_vit_block_rates_rise_linearly_from_zero():
    model = keras_vit.ViT(DEMO_VARIANT, image_size=32, classes=3, drop_path_rate=0.2)
    rates = [block.drop_path for block in _blocks(model)]
    np.testing.assert_allclose(rates, np.linspace(0.0, 0.2, DEMO_VARIANT.depth), rtol=1e-12)


def test_drop_path_changes_training_outputs_not_inference(tmp_path):
    keras.utils.set_random_seed(0)
    plain = keras_vit.ViT(DEMO_VARIANT, image_size=32, classes=3)
    deep = keras_vit.ViT(DEMO_VARIANT, image_size=32, classes=3, drop_path_rate=0.5)
    rng = np.random.default_rng(0)
    for layer_weights in zip(plain.weights, deep.weights):
        value = rng.normal(0.0, 0.3, layer_weights[0].shape).astype("float32")
        for weight in layer_weights:
            weight.assign(value)  # the zero head too: an output that could not differ is no test
    x = rng.uniform(-1, 1, (16, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(deep(x, training=False), plain(x, training=False))
    np.testing.assert_array_equal(plain(x, training=True), plain(x, training=False))
    assert not np.allclose(deep(x, training=True), deep(x, training=False))

    path = str(tmp_path / "deep.keras")
    deep.save(path)
    loaded = keras.saving.load_model(path)
    assert [b.drop_path for b in _blocks(loaded)] == [b.drop_path for b in _blocks(deep)]
    np.testing.assert_array_equal(loaded(x, training=False), deep(x, training=False))
    assert not np.allclose(loaded(x, training=True), loaded(x, training=False))
