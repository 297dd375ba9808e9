"""keras.applications' arguments: input_shape, input_tensor, pooling="avg"/"max",
include_preprocessing; and named constructors whose signature shows every argument."""

import dataclasses
import inspect

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.export import export_saved_model
from tests.models.test_variants import EXPECTED_PARAMS

TINY = keras_vit.Variant("ViT-test_8", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)
GAP = keras_vit.Variant("ViT-test_8-gap", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8,
                        classifier="gap")


def _randomise_head(model, seed):
    """The head starts at zero, which would make every output equal: give it random weights."""
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(seed).normal(0.0, 0.5, head.kernel.shape))


def _pixels(shape, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, shape).astype(np.float32)


def test_vit_b16_with_input_shape():
    # Also the default run's full-size count of ViT-B_16, the official models_test.py figure
    # (tests/models/test_variants.py::test_parameter_count runs it under `-m slow`).
    model = keras_vit.ViT_B16(input_shape=(224, 224, 3))
    assert model.input_shape == (None, 224, 224, 3)
    assert model.output_shape == (None, 1000)
    assert model.count_params() == EXPECTED_PARAMS["ViT-B_16"]


def test_input_shape_is_image_size_and_channels():
    model = keras_vit.ViT(TINY, input_shape=(32, 48, 1), classes=4)
    same = keras_vit.ViT(TINY, image_size=(32, 48), channels=1, classes=4)
    assert model.input_shape == same.input_shape == (None, 32, 48, 1)
    same.set_weights(model.get_weights())
    _randomise_head(model, 1)
    same.set_weights(model.get_weights())
    x = _pixels((2, 32, 48, 1)) / 127.5 - 1
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(same(x)))


@pytest.mark.parametrize("kwargs,message", [
    ({"input_shape": (None, None, 3)}, "fixed positive sizes"),
    ({"input_shape": (32, 32)}, "height, width, channels"),
    ({"input_shape": (32, 32, 3), "image_size": 64}, "differs from input_shape"),
    ({"input_shape": (32, 32, 1), "channels": 4}, "differs from input_shape"),
    ({"input_tensor": np.zeros((1, 32, 32, 3))}, "Keras tensor"),
    ({"input_tensor": keras.Input((32, 32, 3)), "input_shape": (64, 64, 3)}, "differs from"),
    ({"include_top": True, "pooling": "max"}, 'pooling="max" gives features'),
    ({"include_preprocessing": "yes"}, "include_preprocessing"),
])
def test_bad_applications_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(TINY, **kwargs)


def test_input_tensor_builds_on_the_tensor_and_its_source():
    raw = keras.Input((64, 64, 3), name="raw")
    resized = keras.layers.Resizing(32, 32)(raw)
    model = keras_vit.ViT(TINY, input_tensor=resized, classes=3)
    assert model.inputs[0] is raw  # the model starts where the tensor's graph starts
    assert model.input_shape == (None, 64, 64, 3)
    _randomise_head(model, 2)
    plain = keras_vit.ViT(TINY, image_size=32, classes=3)
    plain.set_weights(model.get_weights())
    x = _pixels((2, 64, 64, 3)) / 127.5 - 1
    expected = np.asarray(plain(keras.layers.Resizing(32, 32)(x)))
    # predict: the model's inputs are the tensor's sources, a list, which a direct call warns of.
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", [TINY, GAP], ids=["token", "gap"])
@pytest.mark.parametrize("pooling,reduce", [("avg", np.mean), ("max", np.max)])
def test_avg_and_max_pooling_reduce_the_patch_tokens(variant, pooling, reduce):
    """Against NumPy on the whole normalised token sequence (pooling=None)."""
    keras.utils.set_random_seed(3)
    tokens = keras_vit.ViT(variant, image_size=32, include_top=False, pooling=None)
    pooled = keras_vit.ViT(variant, image_size=32, include_top=False, pooling=pooling)
    pooled.set_weights(tokens.get_weights())
    x = _pixels((2, 32, 32, 3)) / 127.5 - 1
    sequence = np.asarray(tokens(x))  # (2, prefix + 16, 32)
    prefix = 1 if variant.classifier == "token" else 0
    assert sequence.shape == (2, prefix + 16, 32)
    np.testing.assert_allclose(np.asarray(pooled(x)), reduce(sequence[:, prefix:], axis=1),
                               atol=1e-5, rtol=0)


def test_avg_is_gap_with_the_head():
    model = keras_vit.ViT(TINY, image_size=32, pooling="avg", classes=3)
    assert model.get_layer("gap_pool").mode == "gap"


def test_include_preprocessing_takes_raw_pixels(tmp_path):
    # One block, called directly: the Rescaling layer's place and its round trip do not depend
    # on the depth, and each predict (and the export) traces the model anew.
    one_block = dataclasses.replace(TINY, depth=1)
    plain = keras_vit.ViT(one_block, image_size=32, classes=5)
    _randomise_head(plain, 4)
    model = keras_vit.ViT(one_block, image_size=32, classes=5, include_preprocessing=True)
    model.set_weights(plain.get_weights())  # the preprocessing layer has no weights
    assert model.get_layer("preprocessing").count_params() == 0
    x = _pixels((3, 32, 32, 3), seed=5)
    expected = np.asarray(plain(keras_vit.preprocess_input(x), training=False))
    assert np.abs(expected).max() > 0.1  # a head that tells the classes apart
    np.testing.assert_allclose(np.asarray(model(x, training=False)), expected, atol=1e-5, rtol=0)

    # The .keras round trip, with safe_mode on and no custom objects passed.
    model.save(tmp_path / "with_preprocessing.keras")
    reloaded = keras.saving.load_model(tmp_path / "with_preprocessing.keras")
    assert isinstance(reloaded.get_layer("preprocessing"), keras.layers.Rescaling)
    np.testing.assert_allclose(np.asarray(reloaded(x, training=False)), expected, atol=1e-5,
                               rtol=0)

    # Exported, the serving signature (0..255 pixels in) does not scale the pixels twice.
    path = export_saved_model(model, str(tmp_path / "serving"))
    import tensorflow as tf

    served = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(x))
    np.testing.assert_allclose(served["logits"].numpy(), expected, atol=1e-5, rtol=0)


def test_named_constructors_show_every_argument():
    full = inspect.signature(keras_vit.ViT)
    expected = [p for p in full.parameters if p != "variant"]
    for name in keras_vit.__all__:
        if name.startswith("ViT_"):
            parameters = inspect.signature(getattr(keras_vit, name)).parameters
            assert list(parameters) == expected, name
    for argument in ("input_shape", "input_tensor", "include_preprocessing", "pooling"):
        assert argument in expected
