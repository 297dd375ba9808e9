"""Layer-wise learning-rate decay and the weights' moving average (EMA).

The rates are BEiT's formula with timm's groups (the final LayerNorm with the last block,
tests/training/test_layer_decay_timm.py compares every family with timm) worked out by hand
for a two-block ViT; an optimizer step moves
each variable by its own rate (SGD and AdamW); with EMA, the saved model.keras holds the
optimizer's averages, not the last trained weights."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training.optimizers import SGD, AdamW
from keras_vit.training.recipes import get_recipe, make_optimizer
from keras_vit.training.regularization import layer_scales
from keras_vit.training.resume import save_model
from keras_vit.variants import DEMO_VARIANT

TWO_BLOCKS = dataclasses.replace(DEMO_VARIANT, depth=2)


@pytest.fixture(scope="module")
def model():
    return keras_vit.ViT(TWO_BLOCKS, image_size=8, classes=3)


def by_hand(path):
    """decay 0.5, L = 2: embeddings id 0 -> 0.5**3, block i -> 0.5**(2 - i), the final norm
    with the last block, the head 1."""
    if path.split("/")[0] in ("embedding", "cls", "posembed_input"):
        return 0.125
    if path.startswith("encoderblock_0/"):
        return 0.25
    if path.startswith(("encoderblock_1/", "encoder_norm/")):
        return 0.5
    assert path.split("/")[0] == "head", path
    return 1.0


def test_layer_scales_are_beits_formula(model):
    variables = model.trainable_variables
    assert layer_scales(variables, 0.5) == tuple(by_hand(v.path) for v in variables)
    assert {by_hand(v.path) for v in variables} == {0.125, 0.25, 0.5, 1.0}  # every id is there


@pytest.mark.parametrize("optimizer, rtol", [
    # float32: 0.1 * scale, rounded once or twice
    (SGD(learning_rate=0.1, momentum=0.0, global_clipnorm=None, layer_decay=0.5), 1e-6),
    # Adam's first step is lr * m / (sqrt(v) + eps) = lr * g / (|g| + eps): lr for a gradient
    # of 1, so it shows the rate is scaled (scaling the gradient would change nothing). Its
    # bias correction sqrt(1 - 0.999) in float32: 0.999 is stored to 6e-8, so 1 - 0.999 is
    # off by up to 6e-5 relative and its root by 3e-5; eps / sqrt(v) adds 3e-6.
    (AdamW(learning_rate=0.1, weight_decay=0.0, global_clipnorm=None, layer_decay=0.5), 4e-5),
], ids=["sgd", "adamw"])
def test_one_step_moves_each_variable_by_its_own_rate(optimizer, rtol):
    model = keras_vit.ViT(TWO_BLOCKS, image_size=8, classes=3)
    variables = model.trainable_variables
    for variable in variables:
        variable.assign(np.zeros(variable.shape, "float32"))
    optimizer.build(variables)  # finds each variable's layer from its path
    optimizer.apply([np.ones(v.shape, "float32") for v in variables], variables)
    for variable in variables:
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable),
                                   -0.1 * by_hand(variable.path), rtol=rtol, err_msg=variable.path)


def test_the_decay_is_saved_with_the_optimizer(model):
    optimizer = keras.optimizers.deserialize(keras.optimizers.serialize(
        AdamW(learning_rate=0.1, layer_decay=0.65)))
    assert type(optimizer) is AdamW and optimizer.layer_decay == 0.65


def test_with_ema_the_saved_model_holds_the_averages(tmp_path):
    keras.utils.set_random_seed(0)
    # One block: the averages are the optimizer's per variable, at any depth, and fit, save and
    # load trace the model at a cost that grows with the blocks.
    model = keras_vit.ViT(dataclasses.replace(DEMO_VARIANT, depth=1), image_size=8, classes=3)
    recipe = get_recipe("scratch", ema=0.5, learning_rate=0.01, warmup_steps=0)
    model.compile(optimizer=make_optimizer(recipe, 4), loss="categorical_crossentropy",
                  jit_compile=False)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (16, 8, 8, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 16)]
    trained = []
    last_epoch = keras.callbacks.LambdaCallback(  # before fit writes the averages in
        on_epoch_end=lambda epoch, logs: trained.append(
            [keras.ops.convert_to_numpy(v) for v in model.trainable_variables]))
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[last_epoch])
    save_model(model, str(tmp_path / "model.keras"))

    loaded = keras.saving.load_model(str(tmp_path / "model.keras"))
    averages = [keras.ops.convert_to_numpy(v)
                for v in loaded.optimizer._model_variables_moving_average]
    weights = [keras.ops.convert_to_numpy(v) for v in loaded.trainable_variables]
    assert len(averages) == len(weights) == len(trained[-1])
    for weight, average in zip(weights, averages):
        np.testing.assert_array_equal(weight, average)
    assert any(not np.array_equal(w, t) for w, t in zip(weights, trained[-1]))  # not a no-op


@pytest.mark.slow  # a whole digits run; the test above is its cheap sibling
def test_train_with_ema_writes_the_averages_to_model_keras(tmp_path):
    output = str(tmp_path / "run")
    keras_vit.train("digits", model="demo", recipe="scratch", image_size=8, batch_size=16,
                    steps=3, output=output, ema=0.5, layer_decay=0.75, execution="graph",
                    verbose=0)
    loaded = keras.saving.load_model(os.path.join(output, "model.keras"))
    for weight, average in zip(loaded.trainable_variables,
                               loaded.optimizer._model_variables_moving_average):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(weight),
                                      keras.ops.convert_to_numpy(average))
    with open(os.path.join(output, "report.json")) as f:
        recipe = json.load(f)["recipe"]
    assert (recipe["ema"], recipe["layer_decay"]) == (0.5, 0.75)
