"""Distillation's losses and teacher, on one batch: the loss Keras' Distiller computes is the
KL (times T**2) or the cross-entropy on the teacher's argmax worked out in NumPy, its gradient
follows the teacher and not the labels, a distilled DeiT's distillation head learns from the
teacher and its class head from the labels, and a teacher of another size and normalisation
sees its own input."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.errors import ArgumentError, PathNotFoundError
from keras_vit.training.distillation import (
    TokenDistiller,
    check_distillation,
    check_teacher,
    load_teacher,
    make_distiller,
    teacher_input_adapter,
)
from keras_vit.variants import DEMO_VARIANT, get_variant

CLASSES, T = 3, 3.0
TINY = dataclasses.replace(DEMO_VARIANT, depth=2, width=32, mlp_dim=64, heads=2)
TINY_DEIT = dataclasses.replace(get_variant("DeiT-Ti/16-distilled"), name="DeiT-tiny-distilled",
                                depth=2, width=32, mlp_dim=64, heads=2, patch_size=4)
# float32 logits of a few dozen terms, softmax and log: a few ulps each, far below 1e-5.
RTOL = 1e-5


def linear(seed, name):
    """A model whose logits are a planted linear function of the flattened 4x4 image."""
    inputs = keras.Input((4, 4, 3))
    dense = keras.layers.Dense(CLASSES, name="logits")
    model = keras.Model(inputs, dense(keras.layers.Flatten()(inputs)), name=name)
    dense.kernel.assign(np.random.default_rng(seed).normal(size=(48, CLASSES)).astype("float32"))
    return model


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (8, 4, 4, 3)).astype("float32")


def softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def features(x):
    return x.reshape(len(x), -1).astype(np.float64)


def compiled(distiller):
    distiller.compile(optimizer="sgd", loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                      jit_compile=False)
    return distiller


def loss_and_gradient(distiller, x, y, variable):
    with tf.GradientTape() as tape:
        loss = distiller.compute_loss(x, y, distiller(x, training=True))
    return float(loss), tape.gradient(loss, variable).numpy()


def test_soft_distillation_is_the_kl_times_t_squared_and_its_gradient_follows_the_teacher(batch):
    teacher, student = linear(1, "teacher"), linear(2, "student")
    t_logits = features(batch) @ teacher.get_layer("logits").kernel.numpy()
    s_logits = features(batch) @ student.get_layer("logits").kernel.numpy()
    # Labels that are never the teacher's choice: the gradient must not follow them.
    y = keras.utils.to_categorical((t_logits.argmax(-1) + 1) % CLASSES, CLASSES)
    distiller = compiled(make_distiller(teacher, student, "soft", T, alpha=1.0))
    kernel = student.get_layer("logits").kernel
    loss, gradient = loss_and_gradient(distiller, batch, y, kernel)
    p_t, p_s = softmax(t_logits / T), softmax(s_logits / T)
    kl = np.mean(np.sum(p_t * np.log(p_t / p_s), -1))
    np.testing.assert_allclose(loss, T**2 * kl, rtol=RTOL)
    # d(T^2 KL)/d logits = T (p_s - p_t) / batch: the teacher's probabilities, no label.
    by_hand = features(batch).T @ (T * (p_s - p_t) / len(batch))
    np.testing.assert_allclose(gradient, by_hand, rtol=1e-4, atol=1e-6)
    other_labels, _ = loss_and_gradient(distiller, batch, y[::-1], kernel)
    assert other_labels == loss
    # alpha = 0.5: the labels' cross-entropy and the distillation loss, half each.
    half = compiled(make_distiller(teacher, student, "soft", T, alpha=0.5))
    ce = np.mean(-np.log(np.sum(softmax(s_logits) * y, -1)))
    np.testing.assert_allclose(loss_and_gradient(half, batch, y, kernel)[0],
                               0.5 * ce + 0.5 * T**2 * kl, rtol=RTOL)


def test_hard_distillation_is_the_cross_entropy_on_the_teachers_argmax(batch):
    teacher, student = linear(3, "teacher"), linear(4, "student")
    t_logits = features(batch) @ teacher.get_layer("logits").kernel.numpy()
    s_logits = features(batch) @ student.get_layer("logits").kernel.numpy()
    y = keras.utils.to_categorical((t_logits.argmax(-1) + 1) % CLASSES, CLASSES)
    distiller = compiled(make_distiller(teacher, student, "hard", None, alpha=1.0))
    loss, gradient = loss_and_gradient(distiller, batch, y, student.get_layer("logits").kernel)
    decided = np.eye(CLASSES)[t_logits.argmax(-1)]
    np.testing.assert_allclose(loss, np.mean(-np.log(np.sum(softmax(s_logits) * decided, -1))),
                               rtol=RTOL)
    by_hand = features(batch).T @ ((softmax(s_logits) - decided) / len(batch))
    np.testing.assert_allclose(gradient, by_hand, rtol=1e-4, atol=1e-6)


def planted_head(model, layer, seed):
    """Random weights for a zero-initialised head, so its logits tell inputs apart."""
    dense = model.get_layer(layer)
    dense.kernel.assign(np.random.default_rng(seed).normal(size=dense.kernel.shape)
                        .astype("float32"))


@pytest.mark.parametrize("alpha, learning, still", [(1.0, "head_dist", "head"),
                                                    (0.0, "head", "head_dist")],
                         ids=["teacher-teaches-distillation-head", "labels-teach-class-head"])
def test_a_distilled_deits_distillation_head_learns_from_the_teacher(alpha, learning, still):
    keras.utils.set_random_seed(0)
    student = keras_vit.ViT(TINY_DEIT, image_size=8, classes=CLASSES)
    teacher = keras_vit.ViT(TINY, image_size=8, classes=CLASSES)
    planted_head(teacher, "head", 5)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    t_logits = keras.ops.convert_to_numpy(teacher(x))
    y = keras.utils.to_categorical((t_logits.argmax(-1) + 1) % CLASSES, CLASSES)
    distiller = compiled(make_distiller(teacher, student, "hard", None, alpha))
    assert isinstance(distiller, TokenDistiller)
    with tf.GradientTape() as tape:
        heads = distiller(x, training=True)
        loss = distiller.compute_loss(x, y, heads)
    kernels = [student.get_layer(name).kernel for name in (learning, still)]
    moving, resting = tape.gradient(loss, kernels)
    assert np.abs(moving.numpy()).max() > 0 and np.abs(resting.numpy()).max() == 0
    # Its loss: the distillation head's cross-entropy on the teacher's argmax (alpha 1), or
    # the class head's on the labels (alpha 0).
    class_logits, distillation_logits = (keras.ops.convert_to_numpy(h).astype(np.float64)
                                         for h in heads)
    logits, targets = ((distillation_logits, np.eye(CLASSES)[t_logits.argmax(-1)]) if alpha
                       else (class_logits, y))
    np.testing.assert_allclose(float(loss), np.mean(-np.log(np.sum(softmax(logits) * targets, -1))),
                               rtol=RTOL)
    # The student saved averages the two heads (in inference mode; training adds no dropout
    # here, the tiny variant has none).
    np.testing.assert_allclose(keras.ops.convert_to_numpy(student(x)),
                               (class_logits + distillation_logits) / 2, rtol=RTOL, atol=1e-6)


def test_lora_on_a_distilled_deit_trains_its_distillation_head_from_the_teacher():
    """LoRA freezes all but the heads: "head_dist" among them, or the teacher teaches nothing
    (the distillation loss would stay where it starts, at the zero head's ln(classes))."""
    keras.utils.set_random_seed(0)
    student = keras_vit.enable_lora(keras_vit.ViT(TINY_DEIT, image_size=8, classes=CLASSES),
                                    rank=2)
    trainable = {v.path for v in student.trainable_weights}
    assert {v.path for name in ("head", "head_dist")
            for v in student.get_layer(name).weights} <= trainable
    teacher = keras_vit.ViT(TINY, image_size=8, classes=CLASSES)
    planted_head(teacher, "head", 5)
    x = np.random.default_rng(1).uniform(-1, 1, (16, 8, 8, 3)).astype("float32")
    y = keras.utils.to_categorical(np.arange(16) % CLASSES, CLASSES)
    distiller = make_distiller(teacher, student, "hard", None, 1.0)
    distiller.compile(optimizer=keras.optimizers.Adam(0.05),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                      jit_compile=False)

    def distillation_loss():
        return distiller.compute_loss(x, y, distiller(x, training=False))

    before = float(distillation_loss())
    np.testing.assert_allclose(before, np.log(CLASSES), rtol=RTOL)  # both heads start at zero
    distiller.fit(x, y, batch_size=16, epochs=10, verbose=0)
    assert float(distillation_loss()) < 0.9 * before


@pytest.mark.parametrize("student_takes_pixels", [False, True], ids=["normalised", "pixels"])
def test_a_teacher_of_another_size_and_normalisation_sees_its_own_input(student_takes_pixels):
    """Student 16 px (official [-1, 1] input, or its own pixel preprocessing); teacher 8 px
    taking the other: the adapter's logits are the teacher's on its own resized pixels."""
    keras.utils.set_random_seed(0)
    student = keras_vit.ViT(TINY, image_size=16, classes=CLASSES,
                            include_preprocessing=student_takes_pixels)
    teacher = keras_vit.ViT(TINY, image_size=8, classes=CLASSES,
                            include_preprocessing=not student_takes_pixels)
    planted_head(teacher, "head", 6)
    pixels = np.random.default_rng(2).uniform(0, 255, (2, 16, 16, 3)).astype("float32")
    student_input = pixels if student_takes_pixels else pixels / 127.5 - 1
    small = tf.image.resize(pixels, (8, 8), method="bilinear").numpy()
    expected = keras.ops.convert_to_numpy(
        teacher(small if not student_takes_pixels else small / 127.5 - 1))
    adapter = teacher_input_adapter(teacher, student)
    # float32 pixels through two affine maps (their rounding, ~1e-5 of 255) and the tiny
    # encoder: logits of order 10 agree to 1e-4.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(adapter(student_input)), expected,
                               atol=1e-4)
    assert np.ptp(expected) > 0.1  # the planted head tells the images apart
    assert teacher_input_adapter(teacher, teacher) is teacher  # the same input: no layers


def test_distillation_options_are_checked_with_deits_defaults():
    assert check_distillation(None, None, None, distilled_student=False) == ("soft", 3.0, 0.5)
    assert check_distillation(None, None, None, distilled_student=True) == ("hard", None, 0.5)
    for bad in [("warm", None, None), ("hard", 2.0, None), ("soft", 0.0, None),
                ("soft", None, 1.5), ("soft", float("nan"), None)]:
        with pytest.raises(ArgumentError) as error:
            check_distillation(*bad, distilled_student=False)
        assert "\n" not in str(error.value)


def test_an_unreadable_or_missing_teacher_is_one_line(tmp_path):
    torn = tmp_path / "torn.keras"
    torn.write_bytes(b"not a zip")
    for teacher, family in [(str(torn), CheckpointError),
                            (str(tmp_path / "missing.keras"), PathNotFoundError),
                            (str(tmp_path), CheckpointError),  # a folder holding no model
                            (str(tmp_path / "no_run"), PathNotFoundError),
                            ("S/16", ArgumentError)]:  # an architecture without weights
        with pytest.raises(family) as error:
            load_teacher(teacher)
        assert "\n" not in str(error.value), teacher


def test_a_teacher_of_other_classes_or_with_a_softmax_head_is_refused_in_one_line():
    logits = linear(0, "teacher")
    assert check_teacher(logits, "t", CLASSES, "d") is logits
    probabilities = keras_vit.ViT(TINY, image_size=8, classes=CLASSES,
                                  classifier_activation="softmax")
    for teacher, classes, named in [(logits, CLASSES + 1, "3 classes"),
                                    (probabilities, CLASSES, "softmax")]:
        with pytest.raises(ArgumentError) as error:
            check_teacher(teacher, "t", classes, "d")
        assert named in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("variant", [TINY, TINY_DEIT], ids=["vit", "distilled-deit"])
def test_a_distillers_backup_restores_its_student_and_optimizer(variant, tmp_path):
    """What a re-run resumes from: the Backup callback's file of a distiller loads into a new
    one (same teacher, fresh student) as made, before fit has built anything."""
    from keras_vit.training.resume import Backup, restore

    keras.utils.set_random_seed(0)
    teacher = keras_vit.ViT(TINY, image_size=8, classes=CLASSES)

    def distiller():
        made = compiled(make_distiller(teacher, keras_vit.ViT(variant, image_size=8,
                                                              classes=CLASSES), "soft", T, 0.5))
        made.optimizer.build(made.trainable_variables)
        return made

    trained, rng = distiller(), np.random.default_rng(4)
    for variable in trained.student.weights + trained.optimizer.variables:
        variable.assign(rng.integers(1, 9, variable.shape).astype(variable.dtype))
    backup = Backup(str(tmp_path / "backup"))
    backup.set_model(trained)
    backup.on_epoch_end(0)
    fresh = distiller()
    assert restore(fresh, str(tmp_path / "backup")) == 1
    for saved, loaded in zip(trained.student.weights + trained.optimizer.variables,
                             fresh.student.weights + fresh.optimizer.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded),
                                      keras.ops.convert_to_numpy(saved), err_msg=saved.path)
