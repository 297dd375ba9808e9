"""keras_vit's attention through keras.ops.dot_product_attention against the explicit
matmul-softmax-matmul, on every Keras backend installed, against NumPy float64 by hand.

Both paths, in float32 and in bfloat16, must stay within an elementwise error bound that
tests/scripts/attention_paths.py derives from the unit roundoff of the dtype (bfloat16:
8 significant bits, u = 2^-8; float32: u = 2^-24), the reduction lengths (width 64, head
size 16, 17 tokens) and the magnitudes of this input's intermediates (its `error_bound`
docstring has the derivation). The backends store bfloat16 values between operations but
accumulate matmuls in float32 (measured by the script on each run: it falls back to the
bfloat16 accumulation bound, looser but still true, where a backend accumulates in
bfloat16), and both paths compute the softmax in float32. So the bound holds on any CPU
instead of being a fit to one; the two paths then differ by at most twice the bound.
"""

import importlib.util
import json
import os

import keras
import pytest

from tests.conftest import ROOT

# JAX and torch are slow tests (-m slow): their runs took 33 s and 21 s of a default suite
# that had reached ten minutes on two cores (JAX compiles each eager op, 220 compilations
# here). The default suite checks TensorFlow's paths, the same layer and the same bounds.
BACKENDS = [pytest.param(name, marks=[pytest.mark.skipif(
    importlib.util.find_spec(module) is None, reason=f"{module} is not installed"),
    *([] if name == "tensorflow" else [pytest.mark.slow])])
    for name, module in (("tensorflow", "tensorflow"), ("jax", "jax"), ("torch", "torch"))]


def _on_this_backend():
    """The script's result in this process (the suite runs on TensorFlow): a process of its own
    would only add a TensorFlow start-up."""
    spec = importlib.util.spec_from_file_location(
        "attention_paths", os.path.join(ROOT, "tests", "scripts", "attention_paths.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_and_explicit_attention_agree(python, backend):
    if backend == keras.backend.backend():
        result = _on_this_backend()
    else:  # the backend is fixed when Keras is imported
        run = python(["tests/scripts/attention_paths.py"], timeout=300,
                     env={"KERAS_BACKEND": backend})
        assert run.returncode == 0, run.stderr[-3000:]
        lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, run.stdout[-3000:]
        result = json.loads(lines[-1][len("RESULT "):])
    assert result["backend"] == backend
    # The automatic choice on this CPU (benchmarks/attention.py --paths): torch's fused SDPA
    # is faster, JAX's and TensorFlow's dot_product_attention are slower than the explicit path.
    assert result["auto"] is (backend == "torch")
    for dtype in ("float32", "bfloat16"):
        for tokens in ("all", "first_token_only"):
            name = f"{dtype} {tokens}"
            assert result[f"{name} fused"]["fused_calls"] == 1  # the forced path ran
            assert result[f"{name} explicit"]["fused_calls"] == 0
            # on torch, Keras' op is torch's fused F.scaled_dot_product_attention
            assert result[f"{name} fused"]["torch_sdpa_calls"] == (backend == "torch")
            assert result[f"{name} explicit"]["torch_sdpa_calls"] == 0
            # The analysis path (attention weights returned) stays the explicit one.
            assert result[f"{name} scores"]["fused_calls"] == 0
            checks = {path: result[f"{name} {path}"] for path in ("fused", "explicit", "scores")}
            checks["weights"] = result[f"{name} scores"]["weights"]
            for path, check in checks.items():
                # max_ratio: the largest |error| / bound over the elements.
                print(f"{backend} {name} {path}: max |error| {check['max_abs_error']:.3g}, "
                      f"bound there up to {check['max_bound']:.3g}, worst error/bound "
                      f"{check['max_ratio']:.3g}")
                assert check["max_ratio"] <= 1, (name, path, check, result[name])
    # A whole ViT with every block on one path or the other: the same logits.
    assert result["model_max_abs_diff"] < 1e-5 * max(1.0, result["model_logit_scale"])
