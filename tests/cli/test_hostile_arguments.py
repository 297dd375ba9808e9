"""Hostile command lines, each bounded: its exit status, its stderr lines, its time, and that
nothing the user had was changed. One table; a case that needs a fresh process has one."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import ROOT

PNG = "{tmp}/a.png"  # a real 20x20 image (the `user_files` fixture writes it)

# (argv, exit status, text stderr's one line holds, or None for a command that succeeds,
#  seconds: an upper bound the behaviour this table replaced exceeded, at least 10x the time the
#  case took under load (tests/conftest.py TIME_BOUNDS: the 5 s cases took at most 0.11 s, the
#  30 s ones at most 2.2 s with TensorFlow started first); None where the time is the work's:
#  a command that succeeds, and a folder refused after its scan (15 s under load, TensorFlow's
#  first image pipeline), which the unchanged folder shows came before any training).
CASES = [
    (["analyze", PNG, "--model", "demo", "--max-images", "-1"], 2, "--max-images", 5),
    (["analyze", PNG, "--model", "demo", "--max-images", "0"], 2, "--max-images", 5),
    (["analyze", PNG, "--model", "demo", "--rollout-images", "0"], 2, "--rollout-images", 5),
    (["analyze", PNG, "--model", "demo", "--output-dir", "{tmp}/notes.txt"], 2, "notes.txt", 30),
    # Refused before the model is built, and before the minute B/16's conversion takes.
    (["export", "--model", "B/16", "--format", "tflite", "--output", "{tmp}/folder"], 2,
     "existing folder", 5),
    (["export", "--model", "demo", "--format", "keras", "--version", "3", "--output",
      "{tmp}/new/m.keras"], 2, "--version", 5),
    (["export", "--model", "demo", "--version", "0", "--output", "{tmp}/new"], 2, "--version", 5),
    (["export", "--model", "demo", "--top-k", "0", "--output", "{tmp}/new"], 2, "--top-k", 5),
    (["export", "--model", "demo", "--output", "{tmp}/notes.txt"], 2, "notes.txt", 5),
    # --image-size takes one or two numbers; the image path after them stays an image.
    (["predict", "--model", "demo", "--image-size", "32", PNG], 0, None, None),
    (["predict", "--model", "demo", "--image-size", "32", "48", PNG], 0, None, None),
    # Sizes that cannot fit in any memory this machine has: one line naming the flag.
    (["predict", "--model", "demo", "--image-size", "65536", PNG], 2, "--image-size 65536", 30),
    (["predict", "--model", "B/16", "--classes", "2000000000", PNG], 2, "--classes", 30),
    (["predict", "--model", "demo", "--classes", "2e9", PNG], 2, "--classes", 5),
    (["train", "--batch-size", "100000000", "--output", "{tmp}/new"], 2, "--batch-size", 30),
    (["train", "--image-size", "65536", "--output", "{tmp}/new"], 2, "--image-size", 30),
    (["train", "--dataset", "{tmp}/bad_class_name", "--model", "demo", "--recipe", "scratch",
      "--output", "{tmp}/new"], 2, "bad\\nname", 30),
    (["train", "--dataset", "{tmp}/one_image_class", "--model", "demo", "--recipe", "scratch",
      "--output", "{tmp}/new"], 2, "lonely", None),
]


def _write_png(path, size=(20, 20), seed=0):
    import tensorflow as tf

    pixels = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(tf.io.encode_png(pixels).numpy())


@pytest.fixture
def user_files(tmp_path):
    """What a user has in the folder: an image, a file, a folder, two broken datasets."""
    _write_png(tmp_path / "a.png")
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "keep.txt").write_text("mine too\n")
    for dataset, classes in (("bad_class_name", ("ok", "bad\nname")),
                             ("one_image_class", ("lonely", "crowd"))):
        for name in classes:
            os.makedirs(tmp_path / dataset / name)
            for i in range(1 if name == "lonely" else 3):
                _write_png(tmp_path / dataset / name / f"{i}.png", (8, 8), seed=i)
    return tmp_path


def _snapshot(folder):
    """{relative path: bytes or None for a folder} of everything under `folder`."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), folder)] = None
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.relpath(os.path.join(root, name), folder)] = f.read()
    return found


@pytest.mark.parametrize("argv,status,says,seconds", CASES, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else None)
def test_a_hostile_command_is_bounded_and_changes_nothing(argv, status, says, seconds, user_files,
                                                          cli):
    argv = [arg.format(tmp=user_files) for arg in argv]
    before = _snapshot(user_files)
    _start_tensorflow()  # its one-off start (15 s under load) is not the refusal's time
    start = time.perf_counter()
    result = cli(argv)
    elapsed = time.perf_counter() - start
    assert result.returncode == status, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    if says is None:
        assert argv[-1] in result.stdout
    else:
        assert len(lines) == 1 and says in lines[0], result.stderr
        assert result.stdout == ""
    assert _snapshot(user_files) == before  # nothing changed, no empty folder made
    assert seconds is None or elapsed < seconds, f"{elapsed:.1f} s"


def _start_tensorflow():
    """TensorFlow imported and tf.data run once in this process."""
    import tensorflow as tf

    assert list(tf.data.Dataset.range(2).map(lambda x: x + 1).as_numpy_iterator()) == [1, 2]


# (argv, exit status, what stdout starts with). Run in a fresh process: what these cost is the
# start-up, and each replaced behaviour imported TensorFlow first (5 to 40 s). Counted, not
# timed: the frameworks the process imported (none); the start-up time is a benchmark's
# (`python -m benchmarks.cli_startup`, docs/performance.md). Counted by `python -X importtime`.
FRESH = [
    ([], 2, "usage: keras-vit"),
    (["--version"], 0, "keras-vit 0."),
    (["train", "--help"], 0, "usage: keras-vit train"),
]
HEAVY = {"tensorflow", "keras", "jax", "torch"}


def imported_frameworks(stderr):
    """The HEAVY modules named in `python -X importtime`'s report on stderr."""
    names = (line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()
             if line.startswith("import time:"))
    return sorted(HEAVY.intersection(names))


@pytest.mark.parametrize("argv,status,starts", FRESH, ids=lambda v: " ".join(v) or "bare"
                         if isinstance(v, list) else None)
def test_first_commands_answer_without_importing_a_framework(argv, status, starts, python):
    result = python(["-X", "importtime", "-m", "keras_vit.cli", *argv], timeout=120)
    assert result.returncode == status, result.stderr[-2000:]
    assert result.stdout.startswith(starts), result.stdout
    assert "import time:" in result.stderr  # the report is there to be read
    assert imported_frameworks(result.stderr) == [], result.stderr[-2000:]


def test_the_import_count_sees_a_framework(fresh_import):
    """The check above can fail: the same report, for a process that imports Keras and
    keras_vit's core (tests/conftest.py's FRESH_IMPORT, under -X importtime), names it."""
    code, stderr, _ = fresh_import
    assert code == 0 and "import time:" in stderr, stderr[-2000:]
    assert "tensorflow" in imported_frameworks(stderr), stderr[-2000:]


def test_the_usual_quiet_setting_leaves_the_command_silent(fresh_command):
    """TF_CPP_MIN_LOG_LEVEL=3 (the common way to silence TensorFlow): no absl or cudart lines.
    The shared fresh command (tests/conftest.py FRESH_COMMAND) imports TensorFlow to build
    train's arguments; its stderr holds its one error line and the launcher's line, nothing
    else."""
    code, _, stderr = fresh_command
    lines = stderr.splitlines()
    assert code == 2 and len(lines) == 2, stderr
    assert lines[0].startswith("keras-vit train: error: ") and "tensorflow" in lines[1], stderr


def _refused_train(user_files, cli):
    """`--model demo` on a folder would fine-tune from imagenet21k weights demo does not have:
    refused in one line, before --output exists. Returns the folder and the --output."""
    dataset = user_files / "one_image_class"
    _write_png(dataset / "lonely" / "1.png", (8, 8), seed=5)
    _write_png(dataset / "lonely" / "2.png", (8, 8), seed=6)
    (dataset / "crowd" / "torn.png").write_bytes(b"\x89PNG\r\n\x1a\n torn")
    (dataset / "lonely" / "notes.txt").write_text("not an image")
    output = user_files / "run"
    refused = cli(["train", "--dataset", str(dataset), "--model", "demo", "--output", str(output)])
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "imagenet21k" in refused.stderr
    assert not output.exists()
    return dataset, output


def test_a_refused_train_writes_nothing_and_a_never_started_run_blocks_nothing(user_files, cli):
    """A run.json that no epoch followed (what a refused command wrote before this was fixed)
    is no run: another command's configuration in that --output goes on. The corrected command
    trained there: the slow test below."""
    from keras_vit.errors import RunConflictError
    from keras_vit.training.run_folder import check_previous_run

    _, output = _refused_train(user_files, cli)
    output.mkdir()
    (output / "run.json").write_text(json.dumps({"config": {"model": "other"}, "finished": False}))
    assert check_previous_run(str(output), {"model": "demo"}) is None
    (output / "log.csv").write_text("epoch,loss\n0,1.0\n")  # an epoch was logged: a run
    with pytest.raises(RunConflictError, match="model 'other' -> 'demo'"):
        check_previous_run(str(output), {"model": "demo"})


@pytest.mark.slow  # a training run, ~25 CPU-s; the refusal alone is the default test above
def test_a_refused_train_leaves_nothing_that_blocks_the_corrected_one(user_files, cli):
    """The corrected command then runs in the same --output. Also: one unreadable file is
    "1 unreadable file", report.json counts it and the file that is no image, and names the
    strategy."""
    dataset, output = _refused_train(user_files, cli)
    # A never-started run.json (what the refused command wrote before this was fixed).
    output.mkdir()
    (output / "run.json").write_text(json.dumps({"config": {"model": "other"}, "finished": False}))
    corrected = cli(["train", "--dataset", str(dataset), "--model", "demo", "--recipe", "scratch",
                     "--epochs", "1", "--batch-size", "4", "--image-size", "16",
                     "--output", str(output)])
    assert corrected.returncode == 0, corrected.stderr[-2000:]
    assert "; skipped 1 unreadable file;" in corrected.stdout, corrected.stdout
    with open(output / "report.json") as f:
        report = json.load(f)
    assert report["strategy"] == "one device"
    assert report["skipped_files"]["count"] == 1
    assert [os.path.basename(p) for p in report["skipped_files"]["files"]] == ["torn.png"]
    assert [os.path.basename(p) for p in report["unsupported_files"]["files"]] == ["notes.txt"]


def test_a_tfds_message_names_its_folder_as_a_path(tmp_path, monkeypatch):
    from keras_vit import data
    from keras_vit.errors import DatasetUnavailableError

    monkeypatch.setattr(data.datasets, "_internet_reachable", lambda: False)
    with pytest.raises(DatasetUnavailableError) as error:
        data.load_tfds("mnist", data_dir=str(tmp_path))
    assert "GPath" not in str(error.value) and repr(str(tmp_path)) in str(error.value)


def _interrupt(argv, ready, timeout=300, stdout=subprocess.PIPE):
    """Runs `keras-vit ARGV` until `ready()`, sends SIGINT as Ctrl-C does (the default
    handler restored in the child); returns the completed process. `stdout`: a file to watch
    (written unbuffered) instead of a pipe."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "keras_vit.cli", *argv], cwd=ROOT, env=env,
                               stdout=stdout, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + timeout
        while not ready() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()[1][-2000:]
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


INTERRUPTED = "keras-vit: interrupted; re-run the same command to resume"  # train's

# Ctrl-C while fd 2 points elsewhere (keras_vit/_support/tf_log.py hides TensorFlow's start-up
# and libjpeg's lines so): the one line still reaches stderr.
CTRL_C_WHILE_STDERR_IS_HIDDEN = """
import os, signal, sys
sys.argv[0] = "keras-vit"  # this process is the command: tf_log hides, keras_vit defers TF
from keras_vit._support import tf_log
from keras_vit.cli.main import _interrupted
signal.signal(signal.SIGINT, _interrupted)
with tf_log.without_libjpeg_lines():  # fd 2 is a temporary file in the block
    os.kill(os.getpid(), signal.SIGINT)
sys.exit("not interrupted")
"""


def test_ctrl_c_while_stderr_is_hidden_is_still_one_line():
    from keras_vit.cli.main import INTERRUPTED as generic

    result = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_STDERR_IS_HIDDEN], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                            text=True, timeout=120)
    assert (result.returncode, result.stderr) == (130, f"keras-vit: {generic}\n"), result.stderr


@pytest.mark.slow  # two training processes, about 90 s on 2 cores: run with -m slow
def test_ctrl_c_during_train_is_one_line_and_the_run_resumes(tmp_path, python):
    output = tmp_path / "run"
    argv = ["train", "--dataset", "digits", "--epochs", "2", "--output", str(output)]
    first = _interrupt(argv, lambda: (output / "backup").is_dir() and os.listdir(output / "backup"))
    assert first.returncode == 130, first.stderr[-3000:]
    assert first.stderr.splitlines() == [INTERRUPTED], first.stderr[-3000:]
    again = python(["-m", "keras_vit.cli", *argv], timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    with open(output / "log.csv") as f:
        epochs = [line.split(",")[0] for line in f.read().splitlines()[1:]]
    assert epochs == ["0", "1"]  # epoch 1 kept from the first process, not trained twice


@pytest.mark.slow  # two more TensorFlow processes
@pytest.mark.parametrize("command", ["predict", "export"])
def test_ctrl_c_during_predict_and_export_is_one_line(command, tmp_path):
    from keras_vit.atomic import TEMP_PREFIX

    _write_png(tmp_path / "a.png")
    # Interrupted in the middle of its work, whatever the machine's speed: predict once the
    # first image's lines are printed, with 2,000 images to go (a .txt file lists them); export
    # once its SavedModel is being written (its temporary folder is there).
    (tmp_path / "images.txt").write_text(f"{tmp_path / 'a.png'}\n" * 2000)
    served = tmp_path / "served"
    argv = {"predict": ["predict", "--model", "B/16", str(tmp_path / "images.txt")],
            "export": ["export", "--model", "B/16", "--output", str(served)]}[command]
    ready = {"predict": lambda: (tmp_path / "stdout").stat().st_size > 0,
             "export": lambda: served.is_dir() and any(
                 name.startswith(TEMP_PREFIX) for name in os.listdir(served))}[command]
    with open(tmp_path / "stdout", "w") as stdout:
        result = _interrupt(argv, ready, stdout=stdout)
    assert result.returncode == 130, result.stderr[-3000:]
    # predict's one warning (random weights) comes first; then the one line, no traceback,
    # which promises no resume: neither command resumes.
    import importlib

    from keras_vit.cli import predict
    said = {"predict": predict.INTERRUPTED,
            "export": importlib.import_module("keras_vit.cli.main").INTERRUPTED}[command]
    assert "resume" not in said
    lines = [line for line in result.stderr.splitlines() if "random weights" not in line]
    assert lines == [f"keras-vit: {said}"], result.stderr[-3000:]
    # Nothing half-written is in sight: no version folder, only the dead writer's temporary,
    # which the next export to the folder removes (keras_vit/atomic.py).
    assert not served.exists() or all(name.startswith(TEMP_PREFIX) for name in os.listdir(served))


def test_the_recipe_table_shows_the_digits_weight_decay():
    from keras_vit.data import PRESETS

    decay = PRESETS["digits"].overrides("scratch")["weight_decay"]
    page = open(os.path.join(ROOT, "docs", "fine-tuning.md")).read()
    row = next(line for line in page.splitlines() if line.startswith("| optimizer |"))
    assert f"({decay:g} for digits)" in row, row
