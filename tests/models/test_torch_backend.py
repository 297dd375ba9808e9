"""The torch backend: the forward pass equals TensorFlow's, and `train` runs end to end
(one device; tf.distribute and keras.distribution are TensorFlow and JAX only)."""

import importlib.util
import os

import keras
import numpy as np
import pytest

from keras_vit.training import DEMO_VARIANT, build_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed")


def test_torch_forward_equals_tensorflow_and_train_runs(torch_backend_run):
    """(The torch process and its inputs: tests/conftest.py's `torch_backend_run`.)"""
    folder, (code, stderr, result) = torch_backend_run
    assert code == 0 and result is not None, stderr
    model = build_model(DEMO_VARIANT, None, 16, 10)  # TensorFlow, this process
    model.load_weights(os.path.join(folder, "demo.weights.h5"))
    expected = model(np.load(os.path.join(folder, "images.npy"))).numpy()
    assert np.abs(expected).max() > 0.1  # a real signal, not a zero head
    # torch takes the fused SDPA attention path on CPU: float32 rounding apart.
    np.testing.assert_allclose(np.load(os.path.join(folder, "logits.npy")), expected, atol=1e-5)
    assert result["fused_attention"] is True
    assert result["optimizer_iterations"] == 6
    for name in ("model.keras", "best.keras", "log.csv", "report.json", "backup"):
        assert os.path.exists(os.path.join(folder, "run", name)), name
    # The torch-trained model loads in this TensorFlow process.
    trained = keras.saving.load_model(os.path.join(folder, "run", "model.keras"))
    assert trained.get_layer("head").kernel.numpy().any()  # the zero head moved
