"""On Keras' JAX backend: preprocess_input inside tf.data, and a SavedModel export whose
outputs match the model's (a subprocess, since the backend is fixed when Keras is imported)."""

import json

JAX_SCRIPT = r"""
import json, os, sys, tempfile
import numpy as np
import keras
import tensorflow as tf
import keras_vit

assert keras.backend.backend() == "jax", keras.backend.backend()
out = {}

# 1. preprocess_input mapped over a tf.data dataset (tf tensors, whatever the backend).
pixels = np.random.default_rng(0).integers(0, 256, (6, 32, 32, 3)).astype(np.uint8)
dataset = tf.data.Dataset.from_tensor_slices(pixels).batch(4).map(keras_vit.preprocess_input)
mapped = np.concatenate([batch.numpy() for batch in dataset])
out["dataset_dtype"] = str(mapped.dtype)
out["dataset_error"] = float(np.abs(mapped - (pixels.astype(np.float64) / 127.5 - 1.0)).max())

# 2. A SavedModel exported from the JAX-backend model.
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
print("RESULT " + json.dumps(out))
"""


def test_preprocess_in_tf_data_and_saved_model_export_on_jax(python):
    result = python(["-c", JAX_SCRIPT], timeout=600, env={"KERAS_BACKEND": "jax"})
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["dataset_dtype"] == "float32"
    assert out["dataset_error"] < 1e-6
    assert out["signatures"] == ["serve_bytes", "serve_uint8", "serving_default"]
    assert out["expected_spread"] > 0.1  # a head that tells the classes apart
    assert out["logits_error"] < 1e-4
    assert out["class_ids"] == out["expected_top5"]
