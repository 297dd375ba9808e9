"""Run as a script with KERAS_BACKEND=jax and two virtual devices
(XLA_FLAGS=--xla_force_host_platform_device_count=2); prints one JSON line (RESULT ...).
One process serves several tests (each TensorFlow and JAX start-up costs seconds); the
arguments choose the parts:

- "export": preprocess_input mapped over tf.data, and a SavedModel exported from the
  JAX-backend model, against the model's own outputs (tests/models/test_jax_backend.py);
- "runner": keras_vit's own predict loop (`predict_images`) on a Keras model, which calls the
  model's bare jitted `stateless_call` and not Keras' `predict_on_batch`, against Keras'
  `predict` (tests/models/test_jax_backend.py);
- "errors": TensorFlow-only strategy names and impossible model splits, each one error
  (tests/training/test_jax.py);
- "data-parallel", "model-parallel": a few clipped, gradient-accumulated updates on one
  device and under that keras.distribution, from the same weights and the same batches,
  with the largest weight differences; "clipping" runs the one-device fit once more without
  clipping (tests/training/test_jax.py).
"""

import dataclasses
import json
import os
import sys
import tempfile

import keras
import numpy as np

import keras_vit
from keras_vit.training import DEMO_VARIANT, build_model, get_recipe, make_optimizer
from keras_vit.training.placement import JaxDistributionPlacement, get_placement

assert keras.backend.backend() == "jax", keras.backend.backend()
import jax  # noqa: E402

PARTS = sys.argv[1:]


def export_checks():
    import tensorflow as tf

    out = {}
    # preprocess_input mapped over a tf.data dataset (tf tensors, whatever the backend).
    pixels = np.random.default_rng(0).integers(0, 256, (6, 32, 32, 3)).astype(np.uint8)
    dataset = tf.data.Dataset.from_tensor_slices(pixels).batch(4).map(keras_vit.preprocess_input)
    mapped = np.concatenate([batch.numpy() for batch in dataset])
    out["dataset_dtype"] = str(mapped.dtype)
    out["dataset_error"] = float(np.abs(mapped - (pixels.astype(np.float64) / 127.5 - 1.0)).max())
    # A SavedModel exported from the JAX-backend model.
    variant = keras_vit.Variant("ViT-test_8", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)
    model = keras_vit.ViT(variant, image_size=32, classes=10)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(0.0, 0.5, head.kernel.shape))
    images = np.random.default_rng(2).uniform(0, 255, (3, 32, 32, 3)).astype(np.float32)
    expected = np.asarray(model(keras_vit.preprocess_input(images)))
    path = keras_vit.export_saved_model(model, tempfile.mkdtemp(), labels=[f"c{i}" for i in range(10)])
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](images=tf.constant(images))
    out["signatures"] = sorted(loaded.signatures)
    out["logits_error"] = float(np.abs(served["logits"].numpy() - expected).max())
    out["expected_spread"] = float(expected.std())
    out["class_ids"] = served["class_ids"].numpy().tolist()
    out["expected_top5"] = np.argsort(-expected, axis=-1, kind="stable")[:, :5].tolist()
    return out


def error_checks():
    from keras_vit.training.distribute import get_strategy
    from keras_vit.variants import Variant

    errors = []
    try:
        keras_vit.train("digits", steps=1, strategy="mirrored")
    except ValueError as error:
        errors.append(str(error))
    odd = Variant("ViT-odd_4", width=96, depth=1, mlp_dim=96, heads=3, patch_size=4)
    try:
        get_strategy("model-parallel", odd)
    except ValueError as error:
        errors.append(str(error))
    return errors

BATCH, ACCUMULATION, UPDATES = 4, 2, 3
# The demo model with one block: what is split or replicated is each block's alike, and a
# block less is a smaller program for XLA to compile four times.
MODEL = dataclasses.replace(DEMO_VARIANT, depth=1)
rng = np.random.default_rng(0)
images = rng.uniform(-1, 1, (BATCH * ACCUMULATION * UPDATES, 16, 16, 3)).astype(np.float32)
labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, len(images))]
keras.utils.set_random_seed(0)
initial = [np.asarray(w) for w in build_model(MODEL, None, 16, 10).get_weights()]
# A random head, so that every weight gets a gradient (a zero head blocks the body's).
initial[-2] = rng.normal(0, 0.1, initial[-2].shape).astype(np.float32)


def fit(strategy_name, clip):
    placement = get_placement(strategy_name, MODEL)
    # "none" is one device on any backend; the others are keras.distribution's.
    assert isinstance(placement, JaxDistributionPlacement) == (strategy_name != "none"), placement
    with placement.scope():
        model = build_model(MODEL, None, 16, 10)
        model.set_weights(initial)
        recipe = get_recipe("finetune", learning_rate=0.1, warmup_steps=0, clipnorm=clip,
                            batch_size=BATCH, global_batch_size=BATCH * ACCUMULATION)
        model.compile(optimizer=make_optimizer(recipe, total_updates=10,
                                               accumulation=ACCUMULATION),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    with placement.run_scope():
        model.fit(images, labels, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    qkv = model.get_layer("encoderblock_0").attention.qkv_kernel.value
    return model, {
        "strategy": type(placement.strategy).__name__, "replicas": placement.num_replicas,
        "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "qkv_devices": len(qkv.sharding.device_set),
        "qkv_shard_shape": list(qkv.sharding.shard_shape(qkv.shape)),
    }


def max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def runner_checks():
    """keras_vit.predict_images over 10 image files at batch 4 (three compiled calls), with
    Keras' predict_on_batch counted, against Keras' model.predict of the same pixels."""
    import tensorflow as tf

    from keras_vit.runtime.execution import compiled_forward

    variant = keras_vit.Variant("ViT-test_8", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)
    model = keras_vit.ViT(variant, image_size=32, classes=10)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(0.0, 0.5, head.kernel.shape))
    pixels = np.random.default_rng(3).integers(0, 256, (10, 32, 32, 3)).astype(np.uint8)
    folder = tempfile.mkdtemp()
    paths = []
    for i, image in enumerate(pixels):
        paths.append(os.path.join(folder, f"{i}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(image))
    calls = []
    predict_on_batch = model.predict_on_batch
    model.predict_on_batch = lambda *args, **kwargs: calls.append(1) or predict_on_batch(*args, **kwargs)
    rows = list(keras_vit.predict_images(model, paths, batch_size=4))
    ours = np.stack([row.probabilities for row in rows])
    keras_probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(
        model.predict(keras_vit.preprocess_input(pixels.astype(np.float32)), verbose=0)))
    forward = compiled_forward(model, None)
    x = keras_vit.preprocess_input(pixels[:4].astype(np.float32))
    return {"largest_logit": float(np.abs(np.asarray(predict_on_batch(x))).max()),
            "predict_on_batch_calls": len(calls), "images": len(rows),
            "bare_vs_predict_on_batch": float(np.abs(np.asarray(forward(x))
                                                     - np.asarray(predict_on_batch(x))).max()),
            "probabilities_vs_predict": float(np.abs(ours - keras_probabilities).max())}


result = {"devices": jax.device_count()}
if "runner" in PARTS:
    result["runner"] = runner_checks()
if "export" in PARTS:
    result["export"] = export_checks()
if "errors" in PARTS:
    result["errors"] = error_checks()
names = [name for name in PARTS if name in ("data-parallel", "model-parallel")]
if names or "clipping" in PARTS:
    reference, result["none"] = fit("none", 0.05)
    reference_weights = reference.get_weights()
    result["max_abs_update"] = max_diff(reference_weights, initial)
if "clipping" in PARTS:
    unclipped, _ = fit("none", None)
    result["clipping_changed_weights_by"] = max_diff(unclipped.get_weights(), reference_weights)
for name in names:
    model, result[name] = fit(name, 0.05)
    result[name]["max_abs_diff"] = max_diff(model.get_weights(), reference_weights)
print("RESULT " + json.dumps(result))
os.sys.stdout.flush()
