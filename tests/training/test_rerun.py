"""Re-running `keras-vit train` on one --output: finished, changed, overwritten; labels.txt."""

import json
import os
import re
import shutil

import pytest

from tests.conftest import DIGITS_RUN
from tests.training.test_run import read_log

TRAIN = DIGITS_RUN[2:]  # the shared run's own command, after `-m keras_vit.cli`


def our_lines(stderr):
    """stderr without TensorFlow's C++ start-up log, which no Python setting silences."""
    tf_log = ("I0000 ", "W0000 ", "E0000 ", "WARNING: All log messages before absl")
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(tf_log)]


def _steps_shown(stdout):
    """The step numbers of Keras' progress lines ("7/20 ━━━ ..."), colour codes removed; a line
    ends at a newline or, where Keras redraws the line in place, at a carriage return."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", stdout)
    return {int(m.group(1)) for m in re.finditer(r"(?:^|\r)\s*(\d+)/20 ", plain, re.MULTILINE)}


def _snapshot(output):
    """Every file under `output`: path -> (mtime_ns, size)."""
    files = {}
    for folder, _, names in os.walk(output):
        for name in names:
            path = os.path.join(folder, name)
            stat = os.stat(path)
            files[os.path.relpath(path, output)] = (stat.st_mtime_ns, stat.st_size)
    return files


@pytest.fixture
def trained(digits_run):
    """The finished digits run shared by the suite (tests/conftest.py): copy before changing."""
    return digits_run


def test_same_command_finished_then_changed_then_overwritten(tmp_path, cli, trained):
    output = str(tmp_path / "run")
    # A copy of a finished run: its run.json names no path (digits is built in), so the
    # same command recognises it here.
    shutil.copytree(trained[0], output)
    first = trained[1]
    with open(os.path.join(output, "labels.txt")) as f:
        assert f.read().splitlines() == [str(i) for i in range(10)]
    before = _snapshot(output)
    assert {"report.json", "model.keras", "labels.txt", "run.json", "log.csv"} <= set(before)

    # 1. The same command again: the run is finished, nothing is trained or rewritten.
    again = cli([*TRAIN, "--output", output])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished" in again.stdout
    assert "val_accuracy" not in again.stdout  # no epoch ran (Keras prints no "Epoch 1/1")
    assert _snapshot(output) == before

    # 2. Another learning rate on the same folder: refused in one line, exit 2, nothing touched.
    with open(os.path.join(output, "report.json")) as f:
        report_before = f.read()
    changed = cli([*TRAIN, "--output", output, "--lr", "0.01"])
    assert changed.returncode == 2
    assert changed.stdout == ""
    lines = our_lines(changed.stderr)
    assert len(lines) == 1, changed.stderr
    assert lines[0].startswith("keras-vit train: error: ")
    assert "recipe.learning_rate" in lines[0] and "0.01" in lines[0]
    assert "--overwrite" in lines[0] and "another --output" in lines[0]
    with open(os.path.join(output, "report.json")) as f:
        assert f.read() == report_before
    assert _snapshot(output) == before

    # 3. --overwrite: a new run, whose report describes the new learning rate; --verbose
    # shows progress per step (without it, one "20/20" line per epoch, as in run 1).
    fresh = cli([*TRAIN, "--output", output, "--lr", "0.01", "--epochs", "1", "--overwrite",
                 "--verbose"])  # the last --epochs wins: one epoch is enough
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "20/20" in fresh.stdout and "val_accuracy" in fresh.stdout  # an epoch ran
    assert len(_steps_shown(fresh.stdout)) > 2, fresh.stdout[-2000:]
    assert _steps_shown(first.stdout) == {20}, first.stdout[-2000:]
    with open(os.path.join(output, "report.json")) as f:
        report = json.load(f)
    assert report["recipe"]["learning_rate"] == 0.01
    assert [int(r["epoch"]) for r in read_log(output)] == [0]
    assert _snapshot(output)["report.json"] != before["report.json"]


@pytest.mark.parametrize("flag", [["--model", "Ti/16"], ["--seed", "1"]])
def test_changed_configuration_names_what_differs(tmp_path, flag):
    """Checked from run.json alone, before any data is loaded or file written."""
    from keras_vit.data import get_preset
    from keras_vit.training import run
    from keras_vit.training.recipes import get_recipe
    from keras_vit.training.settings import run_config
    from keras_vit.variants import get_architecture

    output = tmp_path / "run"
    output.mkdir()
    config = run_config("digits", get_architecture("demo"), None,
                        get_recipe("scratch", **get_preset("digits").overrides("scratch")),
                        "float32", 0)
    (output / "run.json").write_text(json.dumps({"config": config, "finished": True}))
    kwargs = {"model": "Ti/16"} if flag[0] == "--model" else {"seed": 1}
    with pytest.raises(run.RunConflictError, match="--overwrite") as error:
        run.train("digits", output=str(output), verbose=0, **kwargs)
    assert ("model" if flag[0] == "--model" else "seed 0 -> 1") in str(error.value)
    assert sorted(os.listdir(output)) == ["run.json"]


def test_predict_on_a_trained_model_prints_its_class_names(tmp_path, cli, trained):
    """labels.txt, written by train beside model.keras, names predict's classes."""
    import numpy as np
    from PIL import Image

    from keras_vit.data import load_digits

    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    # Class names no model could invent: the folder's, written in labels.txt's place.
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    with open(os.path.join(output, "labels.txt")) as f:
        assert f.read().splitlines() == [str(i) for i in range(10)]
    with open(os.path.join(output, "labels.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    image, _ = next(iter(load_digits().test))
    path = str(tmp_path / "digit.png")
    Image.fromarray(np.asarray(image)[..., 0]).save(path)  # 8 x 8 grey
    result = cli(["predict", path, "--model", os.path.join(output, "model.keras"), "--top", "10"])
    assert result.returncode == 0, result.stderr[-3000:]
    printed = [line.split()[-1] for line in result.stdout.splitlines()[1:]]
    assert sorted(printed) == sorted(names)
    assert "class " not in result.stdout
