"""The recipes' optimizer, schedule, clipping, accumulation and head, checked by hand."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import training
from keras_vit.training import (
    DEMO_VARIANT,
    accumulation_steps,
    build_model,
    distribute,
    get_recipe,
    learning_rate_schedule,
    make_optimizer,
    strategy_name,
)


def _lr(schedule, step):
    return float(schedule(step))


def test_schedule_warmup_then_cosine():
    peak, total, warmup = 0.03, 1000, 100
    schedule = learning_rate_schedule(peak, total, warmup)
    assert _lr(schedule, 0) == pytest.approx(0.0, abs=1e-9)
    assert _lr(schedule, 50) == pytest.approx(peak * 50 / 100, rel=1e-5)  # linear warmup
    assert _lr(schedule, warmup) == pytest.approx(peak, rel=1e-5)
    mid = warmup + (total - warmup) // 2  # half-way through the cosine: half the peak
    assert _lr(schedule, mid) == pytest.approx(peak / 2, rel=1e-4)
    step = 800  # anywhere on the cosine: 0.5 * peak * (1 + cos(pi * t))
    expected = 0.5 * peak * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
    assert _lr(schedule, step) == pytest.approx(expected, rel=1e-4)
    assert _lr(schedule, total) == pytest.approx(0.0, abs=1e-7)


def test_finetune_defaults_are_the_official_ones():
    recipe = get_recipe("finetune")
    assert (recipe.optimizer, recipe.momentum, recipe.weight_decay, recipe.clipnorm) == (
        "sgd", 0.9, 0.0, 1.0)
    assert (recipe.global_batch_size, recipe.image_size, recipe.crop_area, recipe.flip) == (
        512, 384, (0.05, 1.0), True)
    optimizer = make_optimizer(recipe, total_updates=500, accumulation=16)
    assert type(optimizer).__name__ == "SGD"
    assert optimizer.momentum == 0.9 and optimizer.global_clipnorm == 1.0
    assert optimizer.weight_decay is None
    assert optimizer.gradient_accumulation_steps == 16
    # The schedule counts forward passes: warmup 100 updates = 1600 passes, end at 8000.
    schedule = optimizer._learning_rate
    assert float(schedule(1600)) == pytest.approx(recipe.learning_rate, rel=1e-5)
    assert float(schedule(8000)) == pytest.approx(0.0, abs=1e-7)


def test_scratch_recipe_is_adamw():
    recipe = get_recipe("scratch")
    optimizer = make_optimizer(recipe, total_updates=1000)
    assert type(optimizer).__name__ == "AdamW"
    assert (optimizer.weight_decay, optimizer.beta_1, optimizer.beta_2) == (0.1, 0.9, 0.999)
    assert recipe.label_smoothing > 0 and recipe.dropout > 0


def test_accumulation_reaches_the_global_batch():
    assert accumulation_steps(512, 32) == 16
    assert accumulation_steps(512, 512) == 1
    assert accumulation_steps(None, 64) == 1
    with pytest.raises(ValueError, match="not a multiple"):
        accumulation_steps(512, 48)


def test_update_is_clipped_to_global_norm_one():
    recipe = get_recipe("finetune", learning_rate=1.0, warmup_steps=0)
    optimizer = make_optimizer(recipe, total_updates=10)
    weights = [tf.Variable(np.zeros(3, np.float32)), tf.Variable(np.zeros(2, np.float32))]
    grads = [tf.constant([30.0, 0.0, 40.0]), tf.constant([0.0, 0.0])]  # global norm 50
    optimizer.apply_gradients(zip(grads, weights))
    update = np.concatenate([w.numpy() for w in weights])
    # First SGD-momentum step: w = -lr * g / max(1, ||g||).
    np.testing.assert_allclose(update, [-0.6, 0.0, -0.8, 0.0, 0.0], atol=1e-6)
    assert np.linalg.norm(update) == pytest.approx(1.0, rel=1e-6)


def test_accumulation_applies_the_mean_gradient_every_k_steps():
    recipe = get_recipe("finetune", learning_rate=1.0, warmup_steps=0, clipnorm=None)
    optimizer = make_optimizer(recipe, total_updates=100, accumulation=2)
    weight = tf.Variable([0.0])
    optimizer.apply_gradients([(tf.constant([0.2]), weight)])
    assert weight.numpy()[0] == 0.0  # first pass only accumulates
    optimizer.apply_gradients([(tf.constant([0.4]), weight)])
    lr = float(optimizer._learning_rate(1))  # the schedule at the update's iteration
    np.testing.assert_allclose(weight.numpy(), [-lr * 0.3], rtol=1e-5)


class _CountingSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warmup and cosine, counting how often it is evaluated."""

    def __init__(self):
        self.calls = 0
        self.schedule = learning_rate_schedule(0.1, total_steps=20, warmup_steps=4)

    def __call__(self, step):
        self.calls += 1
        return self.schedule(step)


def _three_traced_steps(optimizer):
    weights = [tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)),
               tf.Variable(np.float32([0.5, -0.25]))]
    grads = [tf.constant(np.float32([[0.3, -0.2, 0.1], [0.0, 0.4, -0.5]])),
             tf.constant(np.float32([0.7, -0.1]))]

    optimizer.build(weights)  # its variables exist before the trace, which so runs once

    @tf.function
    def step():
        optimizer.apply(grads, weights)

    for _ in range(3):
        step()
    return [w.numpy() for w in weights]


@pytest.mark.parametrize("name", ["AdamW", "SGD"])
def test_the_schedule_is_evaluated_once_per_update_and_the_steps_are_keras_own(name):
    options = ({"weight_decay": 0.05} if name == "AdamW" else {"momentum": 0.9})
    ours, theirs = _CountingSchedule(), _CountingSchedule()
    got = _three_traced_steps(getattr(training, name)(learning_rate=ours, **options))
    expected = _three_traced_steps(getattr(keras.optimizers, name)(learning_rate=theirs,
                                                                   **options))
    # The same float32 ops in the same order: equal to the last bit.
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    # Traced once: Keras' AdamW reads the rate once for the update and once per variable
    # for the weight decay (3 here); keras_vit's once in all.
    assert ours.calls == 1
    assert theirs.calls == (3 if name == "AdamW" else 1)


def test_new_head_starts_at_zero_and_trains():
    model = build_model(DEMO_VARIANT, None, 16, classes=7)
    head = model.get_layer("head")
    assert head.kernel.shape == (64, 7)
    assert not np.any(head.kernel.numpy()) and not np.any(head.bias.numpy())
    model.compile(optimizer=make_optimizer(get_recipe("finetune", warmup_steps=0), 10),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(np.random.uniform(-1, 1, (4, 16, 16, 3)), np.arange(4))
    assert np.any(head.kernel.numpy())


def test_strategy_resolution(monkeypatch):
    for var in ("TF_CONFIG", "TPU_NAME", "COLAB_TPU_ADDR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(distribute, "_tpu_configured", lambda: False)
    assert strategy_name("auto") == "none"  # this machine: one CPU, no GPU
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:2"]}, '
                                    '"task": {"type": "worker", "index": 0}}')
    assert strategy_name("auto") == "multiworker"
    monkeypatch.undo()
    monkeypatch.setattr(distribute, "_tpu_configured", lambda: True)
    assert strategy_name("auto") == "tpu"
    with pytest.raises(ValueError, match="strategy must be one of"):
        strategy_name("horovod")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="Unknown recipe"):
        get_recipe("sota")
    with pytest.raises(ValueError, match="precision"):
        training.train(precision="float8")
    with pytest.raises(ValueError, match="Unknown ViT variant"):
        training.train(model="Q/3")
