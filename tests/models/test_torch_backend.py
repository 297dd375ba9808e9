"""The torch backend: the forward pass equals TensorFlow's, and `train` runs end to end
(one device; tf.distribute and keras.distribution are TensorFlow and JAX only)."""

import importlib.util
import json
import os

import keras
import numpy as np
import pytest

from keras_vit.training import DEMO_VARIANT, build_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed")


def test_torch_forward_equals_tensorflow_and_train_runs(python, tmp_path):
    keras.utils.set_random_seed(0)
    model = build_model(DEMO_VARIANT, None, 16, 10)
    rng = np.random.default_rng(0)
    for w in model.weights:  # random everything, the zero head included
        w.assign(rng.normal(0, 0.1, w.shape).astype(np.float32))
    model.save_weights(str(tmp_path / "demo.weights.h5"))
    images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype(np.float32)
    np.save(tmp_path / "images.npy", images)
    run = python(["tests/scripts/torch_smoke.py", str(tmp_path / "demo.weights.h5"),
                  str(tmp_path / "images.npy"), str(tmp_path / "run")],
                 timeout=400, env={"KERAS_BACKEND": "torch"})
    assert run.returncode == 0, run.stderr[-3000:]
    expected = model(images).numpy()  # TensorFlow, this process
    assert np.abs(expected).max() > 0.1  # a real signal, not a zero head
    # torch takes the fused SDPA attention path on CPU: float32 rounding apart.
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), expected, atol=1e-5)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["fused_attention"] is True
    assert result["optimizer_iterations"] == 6
    for name in ("model.keras", "best.keras", "log.csv", "report.json", "backup"):
        assert os.path.exists(tmp_path / "run" / name), name
    # The torch-trained model loads in this TensorFlow process.
    trained = keras.saving.load_model(str(tmp_path / "run" / "model.keras"))
    assert trained.get_layer("head").kernel.numpy().any()  # the zero head moved
