"""benchmarks/train_step_memory.py and benchmarks/predict_step_overhead.py, --tiny, each in a JAX
process of its own (the suite runs on TensorFlow): they run, and the step that recomputes the
elementwise steps needs fewer of XLA's temporaries than the one that stores them."""

import json

from tests.conftest import run_python

JAX = {"KERAS_BACKEND": "jax"}


def test_train_step_memory_reads_both_programs_buffer_assignment():
    run = run_python(["-m", "benchmarks.train_step_memory", "--tiny", "--repeats", "2"],
                     timeout=600, env=JAX)
    assert run.returncode == 0, run.stderr[-3000:]
    ratios = json.loads(run.stdout.strip().splitlines()[-1])
    # XLA's buffer assignment is a count of bytes, the same on any machine for these versions:
    # the recomputed step stores fewer of the activations (tests/layers/test_recompute.py).
    assert 0 < ratios["temporaries_ratio"] < 1
    assert ratios["step_time_ratio"] > 0


def test_predict_step_overhead_times_both_calls():
    run = run_python(["-m", "benchmarks.predict_step_overhead", "--tiny"], timeout=600, env=JAX)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "tiny batch 8: predict_on_batch" in run.stdout and "ratio" in run.stdout
