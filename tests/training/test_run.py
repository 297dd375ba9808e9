"""End-to-end runs: a shortened digits run's outputs, a folder with a corrupt file,
resume after SIGKILL, and the offline TFDS error from the command line."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import data
from keras_vit.training import train
from tests.conftest import ROOT
from tests.data.test_pipeline import write_folder

OUTPUTS = ("backup", "best.keras", "log.csv", "report.json", "curves.png", "confusion.png",
           "model.keras")


def read_log(output):
    with open(os.path.join(output, "log.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_short_digits_run_writes_every_output(digits_run):
    """The shared two-epoch run (tests/conftest.py); its report read back from report.json.

    Its one bound on quality comes from a measured distribution, not a guess:
    `python -m benchmarks.digits_seeds --epochs 2 --seeds $(seq 0 23)` and seeds 10 to 13 again
    (28 runs, 2026-11-25, 2-core machine, loaded and quiet) gave test accuracy 0.306 to 0.456,
    runs of one seed differing by up to 0.033 (TensorFlow's thread order). The bound 0.2 sits
    0.106 below the observed minimum: over 4 binomial standard deviations of a 360-image score
    (0.024 at 0.3), and twice chance (0.1)."""
    output = digits_run[0]
    for name in OUTPUTS:
        assert os.path.exists(os.path.join(output, name)), name
    for png in ("curves.png", "confusion.png"):
        with open(os.path.join(output, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert [int(r["epoch"]) for r in read_log(output)] == [0, 1]
    with open(os.path.join(output, "report.json")) as f:
        report = saved = json.load(f)
    assert set(saved["per_class"]) == {str(i) for i in range(10)}
    assert set(saved["per_class"]["3"]) == {"precision", "recall", "f1", "support"}
    matrix = np.asarray(saved["confusion_matrix"])
    assert matrix.shape == (10, 10) and matrix.sum() == 360
    assert saved["skipped_files"]["count"] == 0
    assert saved["optimizer_iterations"] == 2 * 20  # 1293 // 64 (1437 less 144 for validation)
    # Independent check of the reported accuracy: reload the final model and score it.
    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    splits = data.load_digits()
    eval_data = data.make_pipeline(splits.test, 16, 128, training=False)
    predictions = np.argmax(model.predict(eval_data, verbose=0), axis=-1)
    labels = np.array([y for _, y in splits.test.as_numpy_iterator()])
    assert np.mean(predictions == labels) == pytest.approx(report["accuracy"], abs=1e-9)
    assert np.trace(matrix) / matrix.sum() == pytest.approx(report["accuracy"])
    assert report["accuracy"] > 0.2  # observed minimum 0.306 over 28 runs (the docstring)


# A whole folder run; by default tests/cli/test_hostile_arguments.py's corrected run trains a
# folder with an unreadable file and one that is no image and checks both in report.json, and
# tests/data/test_pipeline.py checks the counts of the scan this run reports.
@pytest.mark.slow
def test_folder_with_corrupt_file_trains_and_reports_it(tmp_path):
    write_folder(str(tmp_path / "data"))
    with open(os.path.join(os.fsencode(tmp_path / "data" / "cats"), b"\xff.png"), "wb") as f:
        f.write(b"a name that is not UTF-8")
    output = str(tmp_path / "run")
    report = train(str(tmp_path / "data"), model="demo", recipe="scratch", image_size=16,
                   batch_size=4, epochs=1, output=output, verbose=0)
    with open(os.path.join(output, "report.json")) as f:
        assert json.load(f)["unsupported_files"] == report["unsupported_files"]
    assert report["skipped_files"]["count"] == 2
    assert sorted(os.path.basename(p) for p in report["skipped_files"]["files"]) == [
        "\\xff.png", "broken.jpg"]
    assert report["unsupported_files"]["count"] == 1
    assert report["unsupported_files"]["files"][0].endswith("notes.txt")
    assert report["num_train"] + report["num_validation"] + report["num_test"] == 20
    assert report["class_names"] == ["cats", "dogs"]


LOAD_AFTER_IMPORT = """
import sys
import keras, numpy as np
import keras_vit

x = np.load(sys.argv[1])
for path in sys.argv[2:]:
    model = keras.saving.load_model(path)
    # A direct call, not predict(): the same outputs without tracing a predict function.
    np.savez(path + "." + keras.backend.backend() + ".npz",
             y=keras.ops.convert_to_numpy(model(x, training=False)), *model.get_weights())
    print(type(model.optimizer).__module__, type(model.optimizer).__name__)
"""


# JAX is a slow test (-m slow, 21 s): the default suite loads the files on TensorFlow, and
# tests/models/test_jax_backend.py builds and exports keras_vit models on JAX.
@pytest.mark.parametrize("backend", ["tensorflow", pytest.param("jax", marks=pytest.mark.slow)])
def test_train_made_keras_files_load_after_import_keras_vit(digits_run, backend, python, tmp_path):
    """`keras.saving.load_model` in a fresh process that imported keras_vit alone: the trained
    weights exactly, the optimizer keras_vit's AdamW (the digits preset's scratch recipe), and
    the prediction made in this process."""
    tiny_run = digits_run[0]
    x = np.random.default_rng(0).uniform(-1, 1, (1, 16, 16, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    paths = [os.path.join(tiny_run, name) for name in ("model.keras", "best.keras")]
    result = python(["-c", LOAD_AFTER_IMPORT, str(tmp_path / "x.npy"), *paths], timeout=300,
                    env={"KERAS_BACKEND": backend})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-2:] == ["keras_vit.training.optimizers AdamW"] * 2
    for path in paths:
        model = keras.saving.load_model(path)
        with np.load(f"{path}.{backend}.npz") as loaded:
            weights = [loaded[f"arr_{i}"] for i in range(len(model.weights))]
            prediction = loaded["y"]
        for ours, theirs in zip(model.get_weights(), weights, strict=True):
            np.testing.assert_array_equal(theirs, ours)  # a .keras file stores them exactly
        # Same weights, float32 on another backend (or thread split): only rounding differs.
        # Each of the ~30 dot products (length <= 128) on the way to the logits may round by
        # up to 128 * 2**-24 of its inputs' scale, which each LayerNorm brings back to ~1.
        bound = 30 * 128 * 2.0**-24
        np.testing.assert_allclose(prediction, model(x, training=False).numpy(), rtol=bound,
                                   atol=bound)


def kill_after_an_epoch_and_rerun(output, env=None, wait_s=240, rerun_timeout_s=300):
    """Runs `keras-vit train --dataset digits --epochs 4`, kills it (SIGKILL) once an epoch is
    logged, re-runs the same command, and checks that the re-run finished the run without
    repeating more than one epoch. Returns (epochs logged at the kill, the re-run's report)."""
    command = [sys.executable, "-m", "keras_vit.cli", "train", "--dataset", "digits",
               "--epochs", "4", "--output", output]
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    log = os.path.join(output, "log.csv")
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if os.path.exists(log) and len(read_log(output)) >= 1:
                break
            time.sleep(0.2)
        assert process.poll() is None, "the run ended before it could be killed"
        assert len(read_log(output)) >= 1, "no epoch was logged in time"
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    killed_after = len(read_log(output))
    assert killed_after < 4
    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=rerun_timeout_s)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert [int(r["epoch"]) for r in read_log(output)] == [0, 1, 2, 3]
    with open(os.path.join(output, "report.json")) as f:
        report = json.load(f)
    assert report["optimizer_iterations"] == 4 * 20  # the optimizer state was restored too
    # It resumed: only the missing epochs ran again (one more if the kill tore the newest
    # backup, which then falls back to the one before).
    rerun_epochs = sum(f"Epoch {k}/4" in rerun.stdout for k in range(1, 5))
    assert rerun_epochs <= 4 - killed_after + 1, rerun.stdout[-2000:]
    return killed_after, report


@pytest.mark.slow  # the default suite kills writers mid-write instead (tests/test_atomic.py)
def test_resume_after_sigkill(tmp_path):
    """Kill the run after its first epoch is logged; the same command finishes the rest."""
    kill_after_an_epoch_and_rerun(str(tmp_path / "run"))


def test_cli_tfds_offline_message(tmp_path, cli):
    """The command's exit status and one-line error, in this process (the `cli` fixture): what
    a fresh process adds is TensorFlow's start-up."""
    if data.datasets._internet_reachable():
        pytest.skip("this machine is online; the offline path cannot be exercised")
    result = cli(["train", "--dataset", "tf_flowers", "--data-dir", str(tmp_path),
                  "--output", str(tmp_path / "run")])
    assert result.returncode == 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("keras-vit train: error: ") and result.stderr.count("keras-vit train: error") == 1
    assert "tf_flowers" in error and "--dataset PATH" in error
    assert not os.path.exists(tmp_path / "run")  # nothing written
    # Not timed: that the offline check itself fails fast is timed by
    # tests/data/test_pipeline.py::test_tfds_offline_fails_fast_with_advice.


# --- hostile arguments and data (issue 17): exit 2, one line, nothing left behind ------------

def _folder_of(root, classes, corrupt=()):
    for name in classes:
        os.makedirs(os.path.join(root, name))
        for i in range(4):
            path = os.path.join(root, name, f"{i}.png")
            with open(path, "wb") as f:
                f.write(b"garbage" if name in corrupt else PNG_8X8)
    return root


PNG_8X8 = bytes(tf.io.encode_png(np.full((8, 8, 3), 90, np.uint8)).numpy())
FOLDER = "{tmp}/two"
BAD_RUNS = {
    "--steps 0": (["--steps", "0"], "steps must be a positive integer, got 0"),
    "--batch-size 0": (["--batch-size", "0"], "batch_size must be a positive integer, got 0"),
    "--epochs -2": (["--epochs", "-2"], "epochs must be a positive integer, got -2"),
    "--epochs 0": (["--epochs", "0"], "epochs must be a positive integer, got 0"),
    "--lr -1": (["--lr", "-1"], "lr must be a positive number, got -1.0"),
    "--lr nan": (["--lr", "nan"], "lr must be a positive number, got nan"),
    "--image-size 0": (["--image-size", "0"], "image_size must be a positive integer, got 0"),
    "one class": (["--dataset", "{tmp}/one"], "has one class ('a'); a classifier needs at "
                                              "least two"),
    "unknown TFDS name": (["--dataset", "no_such_dataset_xyz"], "Unknown dataset "
                                                                "'no_such_dataset_xyz'"),
    "missing folder": (["--dataset", "{tmp}/nowhere/"], "does not exist"),
    "empty folder": (["--dataset", "{tmp}/empty"], "has no class sub-folders"),
    "class all corrupt": (["--dataset", "{tmp}/corrupt"], "No readable images for classes ['b']"),
    "output is a file": (["--output", "{tmp}/a_file"], "is a file"),
    "read-only output": (["--output", "{readonly}/run"], "Cannot write to the output folder"),
    "unrelated log.csv": (["--output", "{tmp}/foreign_log"], "is not the log of a keras_vit run"),
    "unrelated model.keras": (["--output", "{tmp}/foreign_model"], "already holds model.keras"),
    "unrelated report.json": (["--output", "{tmp}/foreign_report"], "already holds report.json"),
}


def _hostile_tree(tmp):
    _folder_of(os.path.join(tmp, "two"), ["a", "b"])
    _folder_of(os.path.join(tmp, "one"), ["a"])
    _folder_of(os.path.join(tmp, "corrupt"), ["a", "b"], corrupt=("b",))
    os.makedirs(os.path.join(tmp, "empty"))
    with open(os.path.join(tmp, "a_file"), "w") as f:
        f.write("not a folder")
    for folder, name, text in (("foreign_log", "log.csv", "date,amount\n2024-01-01,3\n"),
                               ("foreign_model", "model.keras", "someone's model"),
                               ("foreign_report", "report.json", '{"mine": true}')):
        os.makedirs(os.path.join(tmp, folder))
        with open(os.path.join(tmp, folder, name), "w") as f:
            f.write(text)


def _readonly_folder(tmp):
    """A folder this process cannot write in: chmod, unless root ignores it; then sysfs."""
    folder = os.path.join(tmp, "readonly")
    os.makedirs(folder)
    os.chmod(folder, 0o555)
    if os.access(folder, os.W_OK):  # root
        if not os.path.isdir("/sys/kernel"):
            pytest.skip("running as root without sysfs: no read-only folder to write to")
        return "/sys/kernel"
    return folder


def _snapshot(root):
    return sorted((os.path.relpath(os.path.join(d, f), root), open(os.path.join(d, f), "rb").read())
                  for d, _, files in os.walk(root) for f in files) + sorted(
        os.path.relpath(d, root) for d, _, _ in os.walk(root))


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_bad_training_input_exits_2_in_one_line_and_leaves_nothing(case, tmp_path, capsys):
    from keras_vit.cli import main

    if case == "unknown TFDS name":
        pytest.importorskip("tensorflow_datasets")
    tmp = str(tmp_path)
    _hostile_tree(tmp)
    readonly = _readonly_folder(tmp)
    argv, message = BAD_RUNS[case]
    argv = ["train", "--dataset", FOLDER, "--model", "demo", "--recipe", "scratch",
            "--image-size", "8", "--batch-size", "2", "--output", "{tmp}/run", *argv]
    if "--steps" not in argv and "--epochs" not in argv:
        argv += ["--epochs", "1"]
    argv = [a.format(tmp=tmp, readonly=readonly) for a in argv]  # later flags win
    before = _snapshot(tmp)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-vit train: error: "), err
    assert message in lines[0], err
    os.chmod(os.path.join(tmp, "readonly"), 0o755)
    assert _snapshot(tmp) == before  # no folder made, no file touched


MEMORY_RUN = """
import sys
from keras_vit.training import train
from tests.memory import peak_rss_mb
train(sys.argv[1], model="demo", recipe="scratch", image_size=16, batch_size=8, epochs=2,
      output=sys.argv[2], verbose=0)
print(peak_rss_mb())
"""


def _write_large_photos(root, per_class=30, side=2000):
    """Smooth pictures (small JPEG files) of side x side pixels, two classes."""
    ramp = np.arange(side, dtype=np.uint16)
    for c, name in enumerate(("a", "b")):
        os.makedirs(os.path.join(root, name))
        for i in range(per_class):
            image = np.stack(np.broadcast_arrays((ramp[None, :] + 7 * i) % 256,
                                                 (ramp[:, None] * (1 + c)) % 256,
                                                 (ramp[None, :] + ramp[:, None]) % 256), -1)
            tf.io.write_file(os.path.join(root, name, f"{i}.jpg"),
                             tf.io.encode_jpeg(image.astype(np.uint8), quality=80))


@pytest.mark.slow
def test_a_folder_of_large_photos_trains_at_16_px_in_little_memory(python, tmp_path):
    """60 photos of 2000 x 2000 at --image-size 16: the pipeline holds files, not pixels
    (720 MB decoded; 2.5 GB peak before). Measured: about 1.14 GB, most of it the ~0.8 GB
    that importing TensorFlow and Keras takes."""
    _write_large_photos(str(tmp_path / "photos"))
    result = python(["-c", MEMORY_RUN, str(tmp_path / "photos"), str(tmp_path / "run")],
                    timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    peak_mb = float(result.stdout.strip().splitlines()[-1])
    print(f"peak RSS {peak_mb:.0f} MB")
    assert peak_mb < 1200, f"peak RSS {peak_mb:.0f} MB"
