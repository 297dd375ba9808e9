"""Recomputing the elementwise steps in a JAX training step (keras_vit/layers/recompute.py): the
same loss and gradients, fewer stored activations, and a step that traces twice still runs.
The JAX side runs in a process of its own (tests/scripts/recompute_jax.py): the suite runs on
TensorFlow, where nothing is recomputed."""

import json

import numpy as np
import pytest

from keras_vit.layers import recompute

U = np.finfo(np.float32).eps / 2


def _gamma(n):
    return n * U / (1 - n * U)


# The longest chain of float32 roundings a gradient of the script's 2-block width-32 ViT goes
# through, forward and backward (per block: the width twice, the 16 tokens twice, the MLP's
# 64, the head's 32): n = 2 * 2 * (2 * 32 + 2 * 16 + 64 + 32) = 768. Recomputing changes only
# how XLA fuses the elementwise steps, so the two sides differ by at most this, relative to
# the largest of each quantity.
TOLERANCE = _gamma(768)


@pytest.fixture(scope="module")
def jax_result(tmp_path_factory):
    from tests.conftest import run_python

    run = run_python(["tests/scripts/recompute_jax.py"], timeout=900, env={"KERAS_BACKEND": "jax"})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, run.stdout[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_recomputed_steps_give_the_same_loss_and_gradients(jax_result):
    parity = jax_result["parity"]
    assert sorted(parity) == sorted(["exact gelu", "tanh gelu", "quick gelu", "packed swiglu",
                                     "split swiglu, inner norm, rms"])
    for kind, differences in parity.items():
        assert differences["loss"] <= TOLERANCE, kind
        assert differences["gradients"] <= TOLERANCE, kind


def test_a_block_keeps_what_timm_keeps_of_its_mlp_and_norms(jax_result):
    """Under mixed_bfloat16: of the MLP's hidden activations, the GELU's input and output
    (the output layer's input), as PyTorch's fused GELU keeps; no float32 copy of the tokens,
    where Keras' LayerNorm, computing in float32, keeps three per norm when stored."""
    residuals = jax_result["residuals"]
    assert residuals["recomputed"]["hidden"] == 2
    assert residuals["recomputed"]["float32 tokens"] == 0
    # what recomputing removed (the exact GELU's erf intermediates, the norms' float32 copies)
    assert residuals["stored"]["hidden"] > 2
    assert residuals["stored"]["float32 tokens"] == 6


def test_a_train_step_traced_again_runs(jax_result):
    """A shorter last batch, or a second compile (a second stage of training), traces Keras'
    train step again; a recomputed step whose trace jax.checkpoint cached by its layer would
    hand the later trace the first one's values (an UnexpectedTracerError)."""
    losses = jax_result["traced again"]
    assert len(losses) == 3 and np.all(np.isfinite(losses))


def test_only_jax_training_recomputes(monkeypatch):
    def function(x):
        return x

    assert recompute.recomputed_in_training(function, True) is function  # the suite: TensorFlow
    monkeypatch.setattr(recompute.keras.backend, "backend", lambda: "jax")
    remats = []
    monkeypatch.setattr(recompute.keras, "remat", lambda f: remats.append(f) or f)
    for training in (False, None):
        assert recompute.recomputed_in_training(function, training) is function
    assert remats == []
    assert recompute.recomputed_in_training(function, True)(3) == 3
    assert len(remats) == 1
    monkeypatch.setattr(recompute, "enabled", False)
    assert recompute.recomputed_in_training(function, True) is function
