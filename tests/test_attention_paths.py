"""keras_vit's attention through keras.ops.dot_product_attention against the explicit
matmul-softmax-matmul, on every Keras backend installed, against NumPy float64 by hand."""

import importlib.util
import json

import pytest

BACKENDS = [pytest.param(name, marks=pytest.mark.skipif(
    importlib.util.find_spec(module) is None, reason=f"{module} is not installed"))
    for name, module in (("tensorflow", "tensorflow"), ("jax", "jax"), ("torch", "torch"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_and_explicit_attention_agree(python, backend):
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
            # The analysis path (attention weights returned) stays the explicit one.
            assert result[f"{name} scores"]["fused_calls"] == 0
            scale = result[name]["output_scale"]  # the largest |output|, about 6 here
            if dtype == "float32":
                # float32 rounding: seen up to 1.4e-6 between the paths, 3.9e-6 from NumPy.
                assert result[name]["paths_max_abs_diff"] < 1e-5, (name, result[name])
                for path in ("fused", "explicit", "scores"):
                    assert result[f"{name} {path}"]["max_abs_error"] < 1e-5, (name, path)
                assert result[f"{name} scores"]["weights_max_abs_error"] < 1e-6
            else:
                # bfloat16 (8 significant bits, one ulp is 0.4% to 0.8% of a value): the
                # paths differ by rounding steps taken in another order, at most 1% of the
                # largest output (seen: one ulp, 0.56%); against float64 NumPy, whose inputs
                # are not rounded to bfloat16, 2% (seen 1.3%).
                assert result[name]["paths_max_abs_diff"] < 0.01 * scale, (name, result[name])
                for path in ("fused", "explicit", "scores"):
                    assert result[f"{name} {path}"]["max_abs_error"] < 0.02 * scale, (name, path)
                assert result[f"{name} scores"]["weights_max_abs_error"] < 0.02
    # A whole ViT with every block on one path or the other: the same logits.
    assert result["model_max_abs_diff"] < 1e-5 * max(1.0, result["model_logit_scale"])
