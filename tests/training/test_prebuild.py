"""`build_training_state`: no variable is created while `fit` traces its step, so TensorFlow
traces it once, not twice; and the state it builds does not leak into the fit's metrics."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.training import get_recipe, make_optimizer
from keras_vit.training.prebuild import build_training_state

TINY = keras_vit.Variant("ViT-prebuild_8", width=8, depth=1, mlp_dim=16, heads=2, patch_size=8)


def _compiled():
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(TINY, image_size=16, classes=3)
    model.compile(optimizer=make_optimizer(get_recipe("scratch"), total_updates=10),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _variables_created_in_traces(model):
    """The names of the variables `fit` creates inside a traced function (eager ones and
    Keras' own shape-inference graph excluded)."""
    created = []

    def creator(next_creator, **kwargs):
        if not tf.executing_eagerly() and "scratch" not in tf.compat.v1.get_default_graph().name:
            created.append(kwargs.get("name"))
        return next_creator(**kwargs)

    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    labels = np.eye(3, dtype="float32")[rng.integers(0, 3, 8)]
    with tf.variable_creator_scope(creator):
        history = model.fit(images, labels, batch_size=4, epochs=1, verbose=0)
    return created, history


@pytest.mark.parametrize("prebuilt", [False, True])
def test_no_variable_is_created_while_fit_traces(prebuilt):
    model = _compiled()
    if prebuilt:
        build_training_state(model)
        # The batch of zeros it computed the metrics on is not counted by the fit.
        states = [v for metric in model.metrics for v in metric.variables]
        assert states and all(not np.any(keras.ops.convert_to_numpy(v)) for v in states)
    created, _ = _variables_created_in_traces(model)
    if prebuilt:
        assert created == []
    else:  # the control: without it, the optimizer's slots appear inside the trace
        assert any(name and name.endswith("_momentum") for name in created), created
