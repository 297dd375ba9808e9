"""A NaFlex model (SigLIP 2 NaFlex's architecture, shrunk) as users run it: `predict_images` and
`keras-vit predict` on image files of mixed aspect ratios under a sequence budget, batched with
padding masks; each image's result equals the same image run alone, and equals the model on
the packed patches of that image at timm's grid for the budget.

Tolerance 1e-5 on probabilities (at most 1): the batched and single runs compute the same
float32 arithmetic on rows that differ in padding the masks take out (measured below 1e-7).
"""

import csv
import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit.preprocessing import load_image, preprocess_input
from keras_vit.runtime.naflex_inputs import pack, sequence_grid

TOLERANCE = 1e-5
SIZES = [(40, 90), (120, 30), (64, 64), (33, 47)]  # (height, width): wide, tall, square, odd


# SigLIP 2 NaFlex shrunk: patch 16, a stored 4 x 4 grid (64 px)
TINY_NAFLEX = dataclasses.replace(keras_vit.get_variant("SigLIP2-B/16-naflex"), width=32, depth=2,
                                  heads=2, mlp_dim=64, image_size=64)


def tiny_naflex_model():
    """TINY_NAFLEX with 7 classes and random weights (N(0, 0.3), seed 0)."""
    model = keras_vit.ViT(TINY_NAFLEX, classes=7)
    rng = np.random.default_rng(0)
    for weight in model.weights:  # the zero head would give equal probabilities everywhere
        weight.assign(rng.normal(0, 0.3, weight.shape).astype(np.float32))
    return model


@pytest.fixture(scope="module")
def naflex_model():
    return tiny_naflex_model()


def _files(folder):
    rng = np.random.default_rng(1)
    paths = []
    for i, (height, width) in enumerate(SIZES):
        path = folder / f"image_{i}.png"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("budget", [16, 36])
def test_batched_predictions_equal_each_image_alone(naflex_model, tmp_path, budget):
    paths = _files(tmp_path)
    batched = keras_vit.predict_images(naflex_model, paths, batch_size=len(paths),
                                       max_tokens=budget)
    batched = [p.probabilities for p in batched]
    for path, probabilities in zip(paths, batched):
        alone = next(keras_vit.predict_images(naflex_model, [path], batch_size=1,
                                              max_tokens=budget)).probabilities
        np.testing.assert_allclose(probabilities, alone, rtol=0, atol=TOLERANCE)
        # and it is the model on the image's own grid, packed by hand
        height, width = np.asarray(Image.open(path)).shape[:2]
        rows, cols = sequence_grid(height, width, 16, budget)
        pixels = preprocess_input(load_image(path, (rows * 16, cols * 16)))
        logits = np.asarray(naflex_model(pack([pixels], 16, rows * cols)))[0]
        expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        np.testing.assert_allclose(probabilities, expected, rtol=0, atol=TOLERANCE)


def test_more_images_than_a_batch_run_through_one_compiled_call(naflex_model, tmp_path,
                                                                monkeypatch):
    """Packed batches have one shape, so predict_images traces the model once for them all
    (a graph, not a Python call per batch), with the results of the direct call."""
    paths = _files(tmp_path)
    direct = [p.probabilities for p in keras_vit.predict_images(
        naflex_model, paths, batch_size=len(paths), max_tokens=16)]  # one batch: a direct call
    first_block = naflex_model.get_layer("encoderblock_0")
    block_call, runs = type(first_block).call, []

    def counted(self, *args, **kwargs):
        runs.extend([self] if self is first_block else [])
        return block_call(self, *args, **kwargs)

    monkeypatch.setattr(type(first_block), "call", counted)
    compiled = [p.probabilities for p in keras_vit.predict_images(
        naflex_model, paths, batch_size=1, max_tokens=16)]  # four batches of one image
    assert len(runs) == 1  # traced once; a direct call per batch runs it four times
    np.testing.assert_allclose(compiled, direct, rtol=0, atol=TOLERANCE)


def test_images_are_packed_in_the_interpolation_of_the_models_record(naflex_model, tmp_path):
    """A NaFlex model carrying timm's record (bicubic, antialiased: its Hub folders') packs
    each image so: predict_images equals the model on naflex_inputs.packed_image with that
    record, and differs from the bilinear packing of a model without one."""
    from keras_vit.layer_names import EMBEDDING
    from keras_vit.preprocessing_record import Preprocessing
    from keras_vit.runtime.naflex_inputs import packed_image, stack_packed

    record = Preprocessing("crop", "bicubic", True, 0.9)
    path = _files(tmp_path)[1]  # 120 x 30: shrunk to its grid, where antialiasing shows
    plain = next(keras_vit.predict_images(naflex_model, [path], max_tokens=16)).probabilities
    naflex_model.get_layer(EMBEDDING).input_preprocessing = record.to_config()
    try:
        found = next(keras_vit.predict_images(naflex_model, [path], max_tokens=16)).probabilities
    finally:
        naflex_model.get_layer(EMBEDDING).input_preprocessing = None
    image = tf.constant(np.asarray(Image.open(path)), tf.float32)
    packed = stack_packed([{k: np.asarray(v) for k, v in packed_image(
        image, 16, 16, preprocess_input, record).items()}])
    logits = np.asarray(naflex_model(packed))[0]
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(found, expected, rtol=0, atol=TOLERANCE)
    assert np.abs(found - plain).max() > 1e-4


def test_the_budget_changes_what_the_model_sees(naflex_model, tmp_path):
    path = _files(tmp_path)[0]
    small, large = (next(keras_vit.predict_images(naflex_model, [path], max_tokens=budget))
                    .probabilities for budget in (16, 64))
    assert np.abs(small - large).max() > 1e-4


def test_max_tokens_is_refused_for_a_model_of_images(tmp_path):
    model = keras_vit.ViT("demo", classes=3)
    path = _files(tmp_path)[0]
    with pytest.raises(keras_vit.ArgumentError, match="max_tokens"):
        next(keras_vit.predict_images(model, [path], max_tokens=256))
    with pytest.raises(keras_vit.ArgumentError, match="max_tokens is a NaFlex model's"):
        keras_vit.export_saved_model(model, str(tmp_path / "sm"), max_tokens=256)
    assert not (tmp_path / "sm").exists()


def test_a_savedmodel_packs_each_image_as_predict_images_does(naflex_model, tmp_path):
    """serve_bytes packs files of mixed aspect ratios in the graph, each at its own grid for
    the export's budget, as predict_images does; serving_default packs a batch of one size."""
    paths = _files(tmp_path)
    expected = [p.probabilities for p in keras_vit.predict_images(
        naflex_model, paths, batch_size=len(paths), max_tokens=36)]
    written = keras_vit.export_saved_model(naflex_model, str(tmp_path / "sm"), max_tokens=36)
    loaded = tf.saved_model.load(written)
    files = tf.constant([open(path, "rb").read() for path in paths])
    found = loaded.signatures["serve_bytes"](image_bytes=files)["probabilities"].numpy()
    np.testing.assert_allclose(found, expected, rtol=0, atol=TOLERANCE)

    pixels = np.random.default_rng(3).uniform(0, 255, (2, 40, 90, 3)).astype(np.float32)
    logits = loaded.signatures["serving_default"](images=tf.constant(pixels))["logits"].numpy()
    rows, cols = sequence_grid(40, 90, 16, 36)  # the model's bilinear stretch (no record)
    resized = preprocess_input(tf.image.resize(pixels, (rows * 16, cols * 16)).numpy())
    direct = np.asarray(naflex_model(pack(list(resized), 16, 36)))
    np.testing.assert_allclose(logits, direct, rtol=0, atol=TOLERANCE * np.abs(direct).max())


def test_a_resize_is_refused_for_a_naflex_model_in_one_line(naflex_model, tmp_path):
    # stretch or crop need one size to resize to; NaFlex keeps each image's aspect ratio
    path = _files(tmp_path)[0]
    with pytest.raises(keras_vit.ArgumentError, match="resize='crop'.*NaFlex"):
        next(keras_vit.predict_images(naflex_model, [path], resize="crop"))


def test_the_packed_image_in_tf_data_is_the_numpy_packing(tmp_path):
    from keras_vit.runtime.naflex_inputs import packed_image

    image = tf.constant(np.random.default_rng(2).uniform(0, 255, (50, 70, 3)), tf.float32)
    packed = packed_image(image, 16, 30, preprocess_input)
    rows, cols = sequence_grid(50, 70, 16, 30)
    resized = preprocess_input(tf.image.resize(image, (rows * 16, cols * 16)).numpy())
    expected = pack([resized], 16, 30)
    np.testing.assert_array_equal(packed["grid"].numpy(), expected["grid"][0])
    np.testing.assert_allclose(packed["patches"].numpy(), expected["patches"][0], atol=1e-6)


def test_preprocessing_to_a_model_of_images_refuses_a_naflex_model_in_one_line(naflex_model):
    """`preprocess_input(pixels, model)` gives a model of images its input; a NaFlex model's
    is patches (predict_images packs them): refused in one line that says so. (Training, the
    one-size exports and analyze feed it patches: below, tests/training/test_naflex_training.py
    and tests/analysis/test_naflex_probe.py.)"""
    with pytest.raises(keras_vit.ArgumentError, match="is a NaFlex model: it takes each "
                                                      "image's patches"):
        preprocess_input(np.zeros((64, 64, 3), np.float32), naflex_model)


@pytest.mark.parametrize("format_name", ["tflite", "onnx", "openvino", "litert"])
def test_a_one_size_export_takes_the_stored_grids_images_as_patches(naflex_model, tmp_path,
                                                                   format_name):
    """TFLite, ONNX, OpenVINO and LiteRT files take images of one size: a NaFlex model's its
    stored grid's (64 x 64 here), cut into its patches inside the graph. Each file, in its own
    runtime, computes the model on the same images packed by hand (NumPy's `pack`), to a
    relative 1e-4 of the largest logit: float32 in another runtime's kernels, sums of at most
    a few hundred terms."""
    from keras_vit.export.quantized import tflite_logits
    from keras_vit.export.runtimes import RUNTIME_FORMATS, runtime_logits

    pixels = np.random.default_rng(2).uniform(0, 255, (3, 64, 64, 3)).astype(np.float32)
    expected = np.asarray(naflex_model(pack([preprocess_input(p) for p in pixels], 16, 16)))
    if format_name == "tflite":
        path = keras_vit.export_tflite(naflex_model, str(tmp_path / "m.tflite"))
        logits = tflite_logits(path, pixels)
    else:
        path = str(tmp_path / ("m" + RUNTIME_FORMATS[format_name][0]))
        getattr(keras_vit, f"export_{format_name}")(naflex_model, path)
        logits = runtime_logits(format_name, path, pixels)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(logits / scale, expected / scale, rtol=0, atol=1e-4)


def test_the_command_runs_a_saved_naflex_model_under_a_budget(naflex_model, tmp_path, cli):
    # A .keras copy loads with its two inputs, and `keras-vit predict --max-tokens` gives the
    # library's probabilities; so does the SavedModel `export --max-tokens` writes, through
    # `predict`; a TFLite export, which takes images of one size, is refused in one line.
    paths = _files(tmp_path)[:2]
    saved = str(tmp_path / "naflex.keras")
    naflex_model.save(saved)
    expected = [p.probabilities for p in keras_vit.predict_images(naflex_model, paths,
                                                                  max_tokens=16)]
    output = str(tmp_path / "predictions.csv")
    result = cli(["predict", *paths, "--model", saved, "--max-tokens", "16", "--top", "1",
                  "--output", output])
    assert result.returncode == 0, result.stderr
    with open(output, newline="") as f:
        rows = list(csv.reader(f))[1:]  # path, error, top1_label, top1_probability
    assert [row[0] for row in rows] == paths
    for row, probabilities in zip(rows, expected):
        assert row[2] == f"class {int(probabilities.argmax())}"
        np.testing.assert_allclose(float(row[3]), probabilities.max(), rtol=1e-5)  # 6 digits
    exported = cli(["export", "--model", saved, "--output", str(tmp_path / "export"),
                    "--max-tokens", "16", "--labels", "none"])
    assert exported.returncode == 0, exported.stderr
    served = str(tmp_path / "served.csv")
    result = cli(["predict", *paths, "--saved-model", str(tmp_path / "export"), "--top", "1",
                  "--output", served])
    assert result.returncode == 0, result.stderr
    with open(served, newline="") as f:
        for row, probabilities in zip(list(csv.reader(f))[1:], expected):
            assert row[2] == f"class {int(probabilities.argmax())}"
            np.testing.assert_allclose(float(row[3]), probabilities.max(), rtol=1e-5)
    # a TFLite file takes the stored grid's images (64 x 64), as their patches
    converted = cli(["export", "--model", saved, "--format", "tflite",
                     "--output", str(tmp_path / "m.tflite")])
    assert converted.returncode == 0, converted.stderr
    from keras_vit.export.quantized import litert_interpreter

    runner = litert_interpreter(str(tmp_path / "m.tflite")).get_signature_runner()
    assert runner.get_input_details()["images"]["shape"].tolist() == [1, 64, 64, 3]
