"""Numbers a training run cannot use, and a run whose loss stops being a number.

Every numeric flag of `keras-vit train` refuses a non-finite or absurd value in one line, exit
2, before anything is written; a run whose loss becomes NaN or infinite stops at that batch,
says so in one line, and leaves run.json saying it is not finished, with no report."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

BASE = ["train", "--dataset", "digits", "--model", "demo", "--recipe", "scratch"]
# (flags, what the one line names). Each value is finite-but-absurd or not finite at all.
CASES = [
    (["--mixup", "inf"], "mixup must be an alpha"),
    (["--mixup", "1e308"], "mixup must be an alpha"),
    (["--cutmix", "inf"], "cutmix must be an alpha"),
    (["--cutmix", "nan"], "cutmix must be an alpha"),
    (["--lr", "inf"], "lr must be a positive number"),
    (["--lr", "1e308"], "lr 1e+308 is above 10"),
    (["--steps", "100000000000000000000"], "steps must be an integer in [1, 1,000,000,000]"),
    (["--epochs", "100000000000000000000"], "epochs must be an integer in [1, 1,000,000,000]"),
    (["--seed", "-1"], "seed must be an integer in [0, 4,294,967,295]"),
    (["--seed", "100000000000000000000"], "seed must be an integer in [0, 4,294,967,295]"),
    (["--validation-seed", "100000000000000000000"], "validation_seed must be an integer"),
    (["--validation-fraction", "nan"], "validation_fraction must be a number between 0 and 1"),
    (["--validation-fraction", "inf"], "validation_fraction must be a number between 0 and 1"),
    (["--drop-path", "nan"], "drop_path must be a rate in [0, 1)"),
    (["--layer-decay", "inf"], "layer_decay must be a number in (0, 1]"),
    (["--ema", "nan"], "ema must be a number in (0, 1)"),
    (["--randaugment", "100000,5"], "needs N >= 1 layers (at most 11)"),
    (["--randaugment", "100000000000000000000,5"], "needs N >= 1 layers (at most 11)"),
    (["--lora-rank", "100000000000000000000"], "lora_rank 100000000000000000000 exceeds"),
    (["--teacher", "demo", "--distillation-temperature", "1e308"],
     "distillation temperature must be a finite number in [0.01, 100]"),
    (["--teacher", "demo", "--distillation-temperature", "1e-300"],
     "distillation temperature must be a finite number in [0.01, 100]"),
    (["--teacher", "demo", "--distillation-alpha", "nan"], "distillation alpha must be a number"),
    (["--image-size", "100000000000000000000"], "--image-size 100000000000000000000 cannot fit"),
    (["--batch-size", "100000000000000000000"], "--batch-size 100000000000000000000 cannot fit"),
]


@pytest.mark.parametrize("flags, message", CASES, ids=[" ".join(f) for f, _ in CASES])
def test_a_number_no_run_can_use_is_one_line(cli, tmp_path, flags, message):
    output = tmp_path / "run"
    result = cli([*BASE, *flags, "--output", str(output)])
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-vit train: error: "), result.stderr
    assert message in lines[0]
    assert not output.exists()  # refused before anything was written


def _two_class_folder(root):
    for c, name in enumerate(("a", "b")):
        os.makedirs(root / name)
        for i in range(6):
            pixels = np.full((8, 8, 3), 40 + 150 * c + i, np.uint8)
            (root / name / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    return root


def test_a_run_whose_loss_becomes_nan_stops_unfinished(cli, tmp_path, monkeypatch):
    """A model with one infinite weight (what a diverged step leaves) gives a NaN loss at the
    first batch: the run stops there, says so, and is neither reported nor finished."""
    from keras_vit.training import run as training_run

    built = training_run.build_model

    def poisoned(*args, **kwargs):
        model = built(*args, **kwargs)
        kernel = model.get_layer("head").kernel
        kernel.assign(np.full(kernel.shape, np.inf, np.float32))
        return model

    monkeypatch.setattr(training_run, "build_model", poisoned)
    output = tmp_path / "run"
    result = cli(["train", "--dataset", str(_two_class_folder(tmp_path / "data")), "--model",
                  "demo", "--recipe", "scratch", "--image-size", "8", "--batch-size", "4",
                  "--epochs", "2", "--output", str(output)])
    assert result.returncode == 2
    error = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and error[0].startswith("keras-vit train: error: the training loss "
                                                   "became nan at epoch 1, batch 1"), result.stderr
    assert json.loads((output / "run.json").read_text())["finished"] is False
    for written in ("report.json", "model.keras", "best.keras"):
        assert not (output / written).exists()
