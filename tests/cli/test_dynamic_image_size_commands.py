"""Every command on a `.keras` file of a model built with `dynamic_image_size=True` (any size
at call time): predict, evaluate, analyze and export (SavedModel, TFLite int8 calibrated,
Keras int8) each run on it, feeding every image at the size the model was built for (its
stored position grid), the one size a batch of images of many sizes can share."""

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.variants import timm_variant

# A tiny ViT stored for 32 x 32 images (a 2 x 2 grid of 16-pixel patches); digits has 10 classes.
STORED = 32
VARIANT = dataclasses.replace(timm_variant("vit_tiny_patch16_224"), name="tiny_dynamic", depth=1,
                              width=32, heads=2, mlp_dim=64)


@pytest.fixture(scope="module")
def dynamic_file(tmp_path_factory):
    """The model with random weights (the head too: zero logits would hide a wrong input),
    saved as .keras, and a 40 x 56 PNG: neither the stored size nor a multiple of the patch."""
    folder = tmp_path_factory.mktemp("dynamic")
    model = keras_vit.ViT(VARIANT, weights=None, classes=10, image_size=STORED,
                          dynamic_image_size=True)
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(np.float32))
    path = str(folder / "dynamic.keras")
    model.save(path)
    image = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    tf.io.write_file(str(folder / "a.png"), tf.io.encode_png(image))
    return path, str(folder / "a.png"), image


def test_predict_feeds_the_stored_size(cli, dynamic_file, tmp_path):
    path, png, image = dynamic_file
    out = str(tmp_path / "p.jsonl")
    result = cli(["predict", "--model", path, png, "--top", "10", "--output", out])
    assert result.returncode == 0, result.stderr
    row = json.loads(open(out).read().splitlines()[-1])
    got = dict(zip(row["labels"], row["probabilities"]))
    # Expected by hand: bilinear (no antialias) to the stored size, [0, 255] -> [-1, 1].
    pixels = tf.image.resize(image[None].astype(np.float32), (STORED, STORED), "bilinear",
                             antialias=False).numpy() / 127.5 - 1
    expected = keras.ops.convert_to_numpy(
        keras.ops.softmax(keras.saving.load_model(path)(pixels)))[0]
    assert np.ptp(expected) > 1e-3  # random weights: the classes differ
    np.testing.assert_allclose([got[f"class {c}"] for c in range(10)], expected, atol=1e-4)


def test_evaluate_runs(cli, dynamic_file, tmp_path):
    out = tmp_path / "evaluation"
    result = cli(["evaluate", "--model", dynamic_file[0], "--dataset", "digits", "--output",
                  str(out)])
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["image_count"] == 360 == np.sum(report["confusion_matrix"])


def test_analyze_runs(cli, dynamic_file, tmp_path):
    out = tmp_path / "analysis"
    result = cli(["analyze", dynamic_file[1], "--model", dynamic_file[0], "--output-dir",
                  str(out)])
    assert result.returncode == 0, result.stderr
    assert (out / "analysis.json").is_file()


@pytest.mark.parametrize("arguments, written", [
    (["--output", "{tmp}/served"], "served/1/saved_model.pb"),
    (["--format", "tflite", "--quantize", "int8", "--calibration-data", "digits",
      "--calibration-images", "8", "--output", "{tmp}/q.tflite"], "q.tflite"),
    (["--format", "keras", "--quantize", "int8", "--output", "{tmp}/q.keras"], "q.keras")],
    ids=["saved_model", "tflite-int8", "keras-int8"])
def test_export_runs(cli, dynamic_file, tmp_path, arguments, written):
    arguments = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    result = cli(["export", "--model", dynamic_file[0], *arguments])
    assert result.returncode == 0, result.stderr
    assert (tmp_path / written).is_file()
