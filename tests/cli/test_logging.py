"""The command line prints no TensorFlow C++ log lines, unless the user asks for them (issue 15)."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from tests.conftest import ROOT

# What TensorFlow's C++ logging prints: absl's "I0000 00:00:... file.cc:NN]" lines and its
# "All log messages before absl::InitializeLog()" notice.
TF_LOG_LINE = re.compile(r"^[IWEF]\d{4} [\d:. ]+\d+ \S+\.cc:\d+\]|absl::InitializeLog", re.M)


def run(argv, **env):
    clean = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(argv, cwd=ROOT, env={**clean, "PYTHONPATH": ROOT, **env},
                          capture_output=True, text=True, timeout=300)


def test_a_command_that_runs_tensorflow_prints_no_log_lines_and_the_user_level_wins(
        digits_run, tmp_path):
    """Running ops starts TensorFlow's devices, which logs at ERROR level on a machine without
    CUDA ("failed call to cuInit"); level 2 alone would let that through. The quiet command is
    the shared digits run (tests/conftest.py), started without TF_CPP_MIN_LOG_LEVEL as from a
    user's shell: it trains, evaluates and saves, and prints nothing on stderr. (A command that
    only imports TensorFlow, under the user's level 3: tests/cli/test_hostile_arguments.py.)"""
    _, quiet = digits_run
    assert "test accuracy" in quiet.stdout and quiet.stderr == "", quiet.stderr
    # A user's own TF_CPP_MIN_LOG_LEVEL wins: 0 asks for everything, and TensorFlow 2.21 prints
    # its start-up lines here (which also shows the pattern above matches them).
    image = tmp_path / "grey.png"
    Image.new("L", (5, 5), 128).save(image)
    loud = run([sys.executable, "-m", "keras_vit.cli", "predict", str(image), "--model", "demo",
                "--image-size", "32"], TF_CPP_MIN_LOG_LEVEL="0")
    assert loud.returncode == 0 and len(loud.stdout.splitlines()) == 6, loud.stdout  # path, top 5
    assert TF_LOG_LINE.search(loud.stderr), loud.stderr
    # keras_vit's own line is there too, among TensorFlow's
    assert "random weights" in loud.stderr, loud.stderr


DRIVER_WITHOUT_GPU = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("tf_log", "keras_vit/_support/tf_log.py")
tf_log = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tf_log)  # alone: importing the keras_vit package would import TensorFlow
tf_log.running_the_command = lambda: True
tf_log.NVIDIA_DRIVER = sys.argv[1]  # "a driver is loaded", on this machine without a GPU
tf_log.quiet_for_command_line()
"""


def test_hidden_cuda_errors_are_named_where_a_driver_is_loaded(tmp_path):
    """(Without a driver there is no such line: the predict test above sees only its own.)"""
    result = run([sys.executable, "-c", DRIVER_WITHOUT_GPU, str(tmp_path)])
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("keras-vit: TensorFlow found no usable GPU, though an NVIDIA driver "
                             "is loaded; set TF_CPP_MIN_LOG_LEVEL=0 to see TensorFlow's "
                             "reasons.\n"), result.stderr


@pytest.mark.slow  # the same check as python -m keras_vit's above, through the console script
def test_the_installed_script_is_quiet_too():
    script = shutil.which("keras-vit", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("no keras-vit script beside this Python (not installed)")
    for command in (["info"], ["train", "--help"]):  # train's help quotes Keras-side recipes
        quiet = run([script, *command])
        assert quiet.returncode == 0, quiet.stderr
        assert quiet.stderr == "", (command, quiet.stderr)


def test_importing_keras_vit_leaves_tensorflow_logging_alone(fresh_import):
    """A library user's process keeps TensorFlow's own behaviour: only the command is quieted.
    (The process, started without TF_CPP_MIN_LOG_LEVEL: tests/conftest.py's FRESH_IMPORT.)"""
    code, stderr, result = fresh_import
    assert code == 0 and result is not None, stderr[-3000:]
    # TensorFlow's own setdefault on import, not keras_vit's 2
    assert result["tf_cpp_min_log_level"] == "1"
    assert TF_LOG_LINE.search(stderr), stderr
