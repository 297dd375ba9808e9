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
