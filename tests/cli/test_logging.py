"""The command line prints no TensorFlow C++ log lines, unless the user asks for them (issue 15)."""

import contextlib
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


CONVERTER_LINES = ("converting 1 of 3 subgraphs", "fully_quantize: 0, inference_type: 6")


def _chatty_converter(fails):
    """A converter that logs as TensorFlow Lite's and tf2onnx's do (a Python line, a native line
    on fd 2), then fails or returns a file's bytes."""
    def convert(converter, quantize=None):
        print(CONVERTER_LINES[0], file=sys.stderr)
        os.write(2, f"{CONVERTER_LINES[1]}\n".encode())
        if fails:
            raise RuntimeError("'tfl.gelu' op is neither a custom op nor a flex op")
        return b"TFL3"
    return convert


@pytest.mark.parametrize("fails", [True, False], ids=["fails", "succeeds"])
def test_a_converter_that_logs_then_fails_leaves_only_the_one_line(cli, monkeypatch, tmp_path,
                                                                    fails):
    """Under the command a converter's log is held while it runs: dropped when it fails (the
    one-line error is all there is; it was 12-155 lines before it), written after it when it
    succeeds. (The native line goes to fd 2, which capsys does not read: dropped_if_refused's
    own test below sees it.)"""
    from keras_vit._support import tf_log
    from keras_vit.export import quantized

    monkeypatch.setattr(tf_log, "running_the_command", lambda: True)
    monkeypatch.setattr(quantized, "convert", _chatty_converter(fails))
    output = tmp_path / "m.tflite"
    result = cli(["export", "--model", "demo", "--image-size", "16", "--format", "tflite",
                  "--output", str(output)])
    if fails:
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr
        assert result.stderr.startswith("keras-vit export: error: ") and "tfl.gelu" in result.stderr
        assert not output.exists()
    else:
        assert result.returncode == 0, result.stderr
        assert CONVERTER_LINES[0] in result.stderr
        assert output.read_bytes() == b"TFL3"


@pytest.mark.parametrize("ending", ["refused", "bug", "succeeds"])
def test_a_held_native_log_line_is_dropped_on_a_refusal_only(capfd, monkeypatch, ending):
    """A refusal's one line is all there is; a bug's traceback keeps the log that explains it."""
    from keras_vit._support import tf_log
    from keras_vit.errors import ArgumentError

    monkeypatch.setattr(tf_log, "running_the_command", lambda: True)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    error = {"refused": ArgumentError, "bug": RuntimeError}.get(ending)
    with pytest.raises(error) if error else contextlib.nullcontext():
        with tf_log.dropped_if_refused():
            os.write(2, b"I0000 00:00:1.0 1 converter.cc:1] pass 1 of 3\n")
            print("a Python line", file=sys.stderr)
            if error:
                raise error("no such op")
    err = capfd.readouterr().err
    assert err == ("" if ending == "refused" else
                   "I0000 00:00:1.0 1 converter.cc:1] pass 1 of 3\na Python line\n"), err
