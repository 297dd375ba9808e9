"""The class-token fast path: a token-pooled ViT computes only the class token in its last block."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.variants import get_variant

TINY = dataclasses.replace(get_variant("Ti/16"), width=32, depth=2, mlp_dim=64, heads=4,
                           patch_size=8, name="tiny-8")


def _random_weights(model, seed=0):
    rng = np.random.default_rng(seed)
    for w in model.weights:  # the head too: it starts at zero
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.2)
    return model


def _images(batch=3, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (batch, 32, 48, 3)).astype("float32")


def _full_last_block_forward(model, images, training=False):
    """The model's own layers in order, with the last block computing every token."""
    x = images
    for layer in model.layers[1:]:
        x = layer(x, training=training) if isinstance(layer, keras_vit.TransformerBlock) else layer(x)
    return x


def test_block_first_token_only_is_the_first_row_of_the_full_block():
    block = keras_vit.TransformerBlock(num_heads=4, mlp_dim=64)
    x = np.random.default_rng(0).standard_normal((2, 7, 32)).astype("float32")
    full, full_weights = block(x, return_attention_scores=True)
    first, first_weights = block(x, return_attention_scores=True, first_token_only=True)
    assert tuple(first.shape) == (2, 1, 32) and tuple(first_weights.shape) == (2, 4, 1, 7)
    np.testing.assert_allclose(first, np.asarray(full)[:, :1], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(first_weights, np.asarray(full_weights)[:, :, :1], atol=1e-6)
    symbolic = block(keras.Input((7, 32)), first_token_only=True)
    assert tuple(symbolic.shape) == (None, 1, 32)


@pytest.mark.parametrize("variant,pooling,include_top,last_tokens", [
    (TINY, "token", True, 1),
    (TINY, "token", False, 1),
    (TINY, None, False, 1 + 4 * 6),
    (dataclasses.replace(TINY, classifier="gap", name="tiny-8-gap"), "gap", True, 4 * 6),
])
def test_only_class_token_pooling_shortens_the_last_block(variant, pooling, include_top, last_tokens):
    model = keras_vit.ViT(variant, image_size=(32, 48), pooling=pooling, include_top=include_top)
    assert model.get_layer("encoderblock_1").output.shape[1] == last_tokens
    assert model.get_layer("encoderblock_0").output.shape[1] == 4 * 6 + (variant.classifier == "token")


def test_token_model_logits_equal_the_full_last_block():
    model = _random_weights(keras_vit.ViT(TINY, image_size=(32, 48), classes=5))
    images = _images()
    np.testing.assert_allclose(model.predict(images, verbose=0),
                               _full_last_block_forward(model, images), atol=1e-5, rtol=1e-5)


def test_training_gradients_equal_the_full_last_block():
    """Fine-tuning through the fast path moves every weight exactly as the full block would."""
    model = _random_weights(keras_vit.ViT(TINY, image_size=(32, 48), classes=5))
    images, labels = _images(), np.array([0, 3, 4])

    def gradients(forward):
        with tf.GradientTape() as tape:
            logits = forward(images)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        return tape.gradient(loss, model.trainable_variables)

    fast = gradients(lambda x: model(x, training=True))
    full = gradients(lambda x: _full_last_block_forward(model, x, training=True))
    assert all(g is not None for g in fast)
    for variable, a, b in zip(model.trainable_variables, fast, full):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4, err_msg=variable.path)
    assert max(float(np.abs(g).max()) for g in fast) > 1e-3  # gradients that say something
