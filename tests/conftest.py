import os
import subprocess
import sys

import pytest

# Quiet TensorFlow's start-up banner in test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(args, timeout, env=None, **kwargs):
    """Runs `python args...` from the repository root with keras_vit importable."""
    full_env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=full_env, timeout=timeout,
                          capture_output=True, text=True, **kwargs)


@pytest.fixture
def python():
    return run_python


# The one finished digits run every test that only reads a trained run shares (or copies
# before changing it): `keras-vit train --dataset digits --epochs 2`, in a fresh process so
# its stdout is the command's own. Training it once instead of in each test saves a run each.
DIGITS_RUN = ["-m", "keras_vit.cli", "train", "--dataset", "digits", "--epochs", "2"]


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory):
    """(output folder, completed process) of the shared two-epoch digits run; read it only."""
    output = str(tmp_path_factory.mktemp("digits_run") / "run")
    result = run_python([*DIGITS_RUN, "--output", output], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return output, result
