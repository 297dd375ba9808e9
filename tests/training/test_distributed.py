"""MirroredStrategy over 2 logical CPUs and MultiWorkerMirroredStrategy over two
processes, each in subprocesses (device setup must precede TensorFlow's start)."""

import json
import os
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit  # noqa: F401  (registers the layers that load_model needs)
from tests.conftest import ROOT, run_python

ENV = {"PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}


def result_of(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, stdout[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_mirrored_step_equals_single_device():
    run = run_python(["tests/scripts/mirrored_step.py"], timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = result_of(run.stdout)
    assert result["replicas"] == 2
    plain, clipped = result["clip=None"], result["clip=1.0"]
    assert plain["all_mirrored"] and clipped["all_mirrored"]
    assert plain["max_abs_update"] > 1e-3  # the step moved the weights
    # Tolerance 1e-5: float32 gradients summed over 2 replicas in another order (seen: ~2e-7).
    assert plain["max_abs_diff"] < 1e-5, result
    # keras_vit's optimizers clip the summed gradient, so the clipped update is the
    # one-device update too (Keras' own clip each replica's share: seen 6.6e-3 apart).
    assert clipped["max_abs_update"] > 1e-3
    assert clipped["max_abs_diff"] < 1e-5, result


@pytest.mark.slow
def test_mirrored_digits_run(tmp_path):
    """A digits run on two replicas, after the script's one-step runs of a smaller model in the
    same process and strategy (a notebook's second `train`): it once failed there with an
    all-reduce shape mismatch, each run making its own MirroredStrategy."""
    run = run_python(["tests/scripts/mirrored_step.py", "--fit", str(tmp_path / "run")],
                     timeout=420)
    assert run.returncode == 0, run.stderr[-3000:]
    result = result_of(run.stdout)
    assert result["fit_strategy"] == "mirrored" and result["fit_replicas"] == 2
    # No guessed threshold on one epoch's quality: the accuracy the run states is the one its
    # report's confusion matrix holds.
    with open(tmp_path / "run" / "report.json") as f:
        matrix = np.asarray(json.load(f)["confusion_matrix"])
    assert matrix.sum() == 360 and result["fit_accuracy"] == pytest.approx(np.trace(matrix) / 360)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_multiworker_two_processes_end_identical(tmp_path):
    ports = [str(p) for p in free_ports(2)]
    output = str(tmp_path / "run")
    workers = [subprocess.Popen([sys.executable, "tests/scripts/multiworker.py", str(i), *ports,
                                 output], cwd=ROOT, env={**os.environ, **ENV},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(2)]
    try:
        outs = [w.communicate(timeout=420) for w in workers]
    finally:
        for w in workers:
            w.kill()
    for w, (out, err) in zip(workers, outs):
        assert w.returncode == 0, err[-3000:]
        result = result_of(out)
        assert result["strategy"] == "multiworker"  # report.json's name, not TensorFlow's class
        assert result["replicas"] == 2
    chief = keras.saving.load_model(os.path.join(output, "model.keras"))
    other = keras.saving.load_model(os.path.join(output, "worker-1", "model.keras"))
    for a, b in zip(chief.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert np.any(chief.get_layer("head").kernel.numpy())  # it trained: the zero head moved
