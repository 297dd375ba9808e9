"""Chaining runs: `train(weights=<.keras file or run folder>)` starts from that model's
backbone with a new zero head for the new dataset: by default from the suite's shared digits
run (tests/conftest.py, ten classes) to a folder of digits 5-9; the slow test runs the whole
chain, a run on digits 0-4 then one on 5-9."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.errors import ArgumentError, CheckpointError, PathNotFoundError
from keras_vit.training import run as run_module
from keras_vit.training import train
from keras_vit.training.transfer import run_model_file, source_architecture
from keras_vit.variants import get_architecture

PER_CLASS = 30  # images per digit written: enough for a split, few enough to write fast
# "graph": no timing of XLA against the graph, which "auto" would spend seconds on.
SMALL = dict(recipe="scratch", image_size=16, batch_size=16, epochs=1, verbose=0,
             execution="graph")


def write_digits(root, digits):
    """scikit-learn's digits `digits` as grayscale PNGs in one sub-folder per digit."""
    from sklearn.datasets import load_digits

    data = load_digits()
    for digit in digits:
        os.makedirs(os.path.join(root, str(digit)))
        images = data.images[data.target == digit][:PER_CLASS]
        for i, image in enumerate(images):
            pixels = np.round(image * (255.0 / 16.0)).astype(np.uint8)[..., None]
            tf.io.write_file(os.path.join(root, str(digit), f"{i}.png"), tf.io.encode_png(pixels))
    return str(root)


@pytest.fixture(scope="module")
def first_run(digits_run, tmp_path_factory):
    """The shared digits run (read only), and a folder of digits 5-9."""
    return digits_run[0], write_digits(tmp_path_factory.mktemp("transfer") / "high", range(5, 10))


@pytest.fixture(scope="module")
def low_digits_run(tmp_path_factory):
    """A one-epoch demo run on digits 0-4, and a folder of digits 5-9."""
    tmp = tmp_path_factory.mktemp("chain")
    low, high = write_digits(tmp / "low", range(5)), write_digits(tmp / "high", range(5, 10))
    output = str(tmp / "x")
    train(low, model="demo", output=output, seed=0, **SMALL)
    return output, high


def _weights(model):
    return {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}


# The run folder's case is the same load once run_model_file maps the folder to its
# model.keras (checked by the test below), so only the file's case runs by default, from the
# shared digits run, and stops where the built model would be fitted: what it starts from and
# what the run records are then known, and the fit, the saves and the report (about 20
# CPU-seconds) are any run's (tests/training/test_run.py). The slow case runs the whole chain,
# digits 0-4 then 5-9, from the folder, to its report.
@pytest.mark.parametrize("chain", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["model.keras", "run-folder-of-digits-0-4"])
def test_weights_from_a_run_keep_its_backbone_and_start_a_zero_head(chain, request, tmp_path,
                                                                    monkeypatch):
    output, high = request.getfixturevalue("low_digits_run" if chain else "first_run")
    source = _weights(keras.saving.load_model(os.path.join(output, "model.keras"), compile=False))
    assert np.any(source["head/kernel"] != 0)  # trained: a kept head would show
    started = {}

    def build_and_record(*args, **kwargs):  # the model train() fits, before its first step
        model = build_model(*args, **kwargs)
        started.update(_weights(model))
        return model

    def record_instead_of_fitting(output, run, placement, splits, config, model, plan):
        # report.json's "model" and "weights" are these two (_fit_in's summary).
        return {"model": run.variant.name, "weights": run.weights}

    build_model = run_module.build_model
    monkeypatch.setattr(run_module, "build_model", build_and_record)
    if not chain:
        monkeypatch.setattr(run_module, "_fit_in", record_instead_of_fitting)
    weights = output if chain else os.path.join(output, "model.keras")
    # No model named: the earlier run's architecture is the default.
    report = train(high, weights=weights, output=str(tmp_path / "y"), **SMALL)

    backbone = {path for path in source if not path.startswith("head/")}
    assert backbone and backbone == {p for p in started if not p.startswith("head/")}
    for path in backbone:
        np.testing.assert_array_equal(started[path], source[path], err_msg=path)
    assert started["head/kernel"].shape == (source["head/kernel"].shape[0], 5)
    assert not np.any(started["head/kernel"]) and not np.any(started["head/bias"])
    assert report["weights"] == weights and report["model"] == get_architecture("demo").name


def test_run_model_file_names_what_a_run_folder_holds(first_run, tmp_path):
    output, high = first_run
    assert run_model_file(output) == os.path.join(output, "model.keras")
    assert run_model_file("imagenet21k") is None and run_model_file(high) is None
    assert source_architecture(output) == get_architecture("demo").name
    with pytest.raises(PathNotFoundError, match="No .keras file"):
        run_model_file(str(tmp_path / "missing.keras"))
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run.json").write_text(json.dumps({"config": {"model": "demo"}}))
    with pytest.raises(CheckpointError, match="without model.keras"):
        run_model_file(str(unfinished))


def test_another_architecture_than_the_runs_is_refused_naming_the_differences(first_run, tmp_path):
    """Refused from the file's headers before the model is built, naming where they differ."""
    output, high = first_run
    with pytest.raises((CheckpointError, ArgumentError),
                       match=r"another architecture, not ViT-Ti_16 \(width 192 in ViT-Ti_16, 64 in the file"):
        train(high, model="Ti/16", weights=output, output=str(tmp_path / "z"), **SMALL)
    assert not os.path.exists(tmp_path / "z")
