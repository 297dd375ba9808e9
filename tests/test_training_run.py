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

from keras_vit import data
from keras_vit.training import train
from tests.conftest import ROOT
from tests.test_data import write_folder

OUTPUTS = ("backup", "best.keras", "log.csv", "report.json", "curves.png", "confusion.png",
           "model.keras")


def read_log(output):
    with open(os.path.join(output, "log.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_short_digits_run_writes_every_output(tmp_path):
    output = str(tmp_path / "digits")
    report = train("digits", epochs=2, output=output, verbose=0)
    for name in OUTPUTS:
        assert os.path.exists(os.path.join(output, name)), name
    for png in ("curves.png", "confusion.png"):
        with open(os.path.join(output, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert [int(r["epoch"]) for r in read_log(output)] == [0, 1]
    with open(os.path.join(output, "report.json")) as f:
        saved = json.load(f)
    assert saved["accuracy"] == report["accuracy"]
    assert set(saved["per_class"]) == {str(i) for i in range(10)}
    assert set(saved["per_class"]["3"]) == {"precision", "recall", "f1", "support"}
    matrix = np.asarray(saved["confusion_matrix"])
    assert matrix.shape == (10, 10) and matrix.sum() == 360
    assert saved["skipped_files"]["count"] == 0
    assert saved["optimizer_iterations"] == 2 * 22  # 1437 // 64 steps per epoch
    # Independent check of the reported accuracy: reload the final model and score it.
    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    splits = data.load_digits()
    eval_data = data.make_pipeline(splits.test, 16, 128, training=False)
    predictions = np.argmax(model.predict(eval_data, verbose=0), axis=-1)
    labels = np.array([y for _, y in splits.test.as_numpy_iterator()])
    assert np.mean(predictions == labels) == pytest.approx(report["accuracy"], abs=1e-9)
    assert np.trace(matrix) / matrix.sum() == pytest.approx(report["accuracy"])
    assert report["accuracy"] > 0.2  # two epochs already learn something (chance: 0.1)


def test_folder_with_corrupt_file_trains_and_reports_it(tmp_path):
    write_folder(str(tmp_path / "data"))
    output = str(tmp_path / "run")
    report = train(str(tmp_path / "data"), model="demo", recipe="scratch", image_size=16,
                   batch_size=4, epochs=1, output=output, verbose=0)
    assert report["skipped_files"]["count"] == 1
    assert report["skipped_files"]["files"][0].endswith("broken.jpg")
    assert report["num_train"] + report["num_test"] == 20
    assert report["class_names"] == ["cats", "dogs"]


def test_resume_after_sigkill(tmp_path):
    """Kill the run after its first epoch is logged; the same command finishes the rest."""
    output = str(tmp_path / "run")
    command = [sys.executable, "-m", "keras_vit.cli", "train", "--dataset", "digits",
               "--epochs", "4", "--output", output]
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    log = os.path.join(output, "log.csv")
    deadline = time.monotonic() + 240
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
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert [int(r["epoch"]) for r in read_log(output)] == [0, 1, 2, 3]
    with open(os.path.join(output, "report.json")) as f:
        report = json.load(f)
    assert report["optimizer_iterations"] == 4 * 22  # the optimizer state was restored too
    # It resumed: only the missing epochs ran again (one more if the kill tore the newest
    # backup, which then falls back to the one before).
    rerun_epochs = sum(f"Epoch {k}/4" in rerun.stdout for k in range(1, 5))
    assert rerun_epochs <= 4 - killed_after + 1, rerun.stdout[-2000:]


def test_cli_tfds_offline_message(tmp_path):
    if data.datasets._internet_reachable():
        pytest.skip("this machine is online; the offline path cannot be exercised")
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit.cli", "train", "--dataset", "tf_flowers",
         "--data-dir", str(tmp_path), "--output", str(tmp_path / "run")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert result.returncode == 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("keras-vit train: error: ") and result.stderr.count("keras-vit train: error") == 1
    assert "tf_flowers" in error and "--dataset PATH" in error
    # Most of the time is importing TensorFlow; the dataset check itself takes seconds.
    assert elapsed < 60, f"took {elapsed:.1f} s"
