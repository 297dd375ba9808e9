"""keras_vit.predict_images and keras-vit predict: streaming, batched, one row per image."""

import csv
import json
import os

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.runtime import image_sources, inference
from tests.export.test_export import softmax, tiny_classifier

SIZE = 32  # tiny_classifier's input size


def write_images(folder, names, seed=0, size=SIZE):
    """PNGs at the model's size (no resize: the pixels seen are the ones written)."""
    rng = np.random.default_rng(seed)
    pixels = {}
    for name in names:
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pixels[path] = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels[path]).save(path)
    return pixels


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    model = tiny_classifier(seed=3)
    model.save(folder / "tiny.keras")
    return str(folder / "tiny.keras"), model


def expected_probabilities(model, pixels):
    """NumPy softmax of the model's logits on Pillow's pixels, scaled to [-1, 1] here."""
    logits = keras.ops.convert_to_numpy(model(pixels.astype(np.float32) / 127.5 - 1.0))
    return softmax(logits.astype(np.float64))


def test_image_files_reads_folders_globs_and_lists(tmp_path):
    write_images(str(tmp_path), ["a/2.png", "a/b/1.png", "a/0.png", "c/x.png"])
    (tmp_path / "a" / "notes.md").write_text("not an image: left out of a folder")
    listed = tmp_path / "list.txt"
    listed.write_text(f"{tmp_path}/c/x.png\n\n{tmp_path}/gone.png\n")
    found = inference.image_files([str(tmp_path / "a"), str(tmp_path / "c" / "*.png"),
                                   str(listed)])
    relative = [os.path.relpath(p, tmp_path) for p in found]
    assert relative == ["a/0.png", "a/2.png", "a/b/1.png", "c/x.png", "c/x.png", "gone.png"]
    with pytest.raises(keras_vit.ImageError, match="No such image file, folder or pattern"):
        inference.image_files([str(tmp_path / "missing*.png")])


def test_predict_folder_writes_a_row_per_image(model_file, tmp_path, cli):
    path, model = model_file
    pixels = write_images(str(tmp_path / "photos"), [f"{c}/{i}.png" for c in "ab" for i in range(5)])
    out = tmp_path / "preds.csv"
    result = cli(["predict", str(tmp_path / "photos"), "--model", path, "--output", str(out),
                  "--top", "3", "--batch-size", "4"])
    assert result.returncode == 0, result.stderr
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["path", "error", "top1_label", "top1_probability", "top2_label",
                       "top2_probability", "top3_label", "top3_probability"]
    assert [r[0] for r in rows[1:]] == sorted(pixels)
    expected = expected_probabilities(model, np.stack([pixels[r[0]] for r in rows[1:]]))
    for row, probabilities in zip(rows[1:], expected):
        best = np.argsort(-probabilities, kind="stable")[:3]
        assert row[1] == "" and row[2::2] == [f"class {i}" for i in best]
        # Written with 6 significant digits.
        np.testing.assert_allclose([float(x) for x in row[3::2]], probabilities[best], rtol=1e-5)
    # .jsonl: the same, a JSON object per line.
    out = tmp_path / "preds.jsonl"
    assert cli(["predict", str(tmp_path / "photos"), "--model", path, "--output",
                str(out)]).returncode == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["path"] for line in lines] == sorted(pixels) and len(lines[0]["labels"]) == 5


def test_predict_folder_walks_the_folder_once(model_file, tmp_path, cli, monkeypatch):
    """`keras-vit predict FOLDER` checks the sources first (a source naming nothing is the one
    line) and predicts on the files that check found: os.walk runs once per folder, not once
    for the check and again for the prediction. Counted, not timed."""
    path, _ = model_file
    write_images(str(tmp_path / "photos"), [f"{c}/{i}.png" for c in "ab" for i in range(3)])
    walks = []
    walk = os.walk

    def counting(top, *args, **kwargs):
        walks.append(os.fspath(top))
        return walk(top, *args, **kwargs)
    monkeypatch.setattr(image_sources.os, "walk", counting)
    out = tmp_path / "preds.csv"
    result = cli(["predict", str(tmp_path / "photos"), "--model", path, "--output", str(out)])
    assert result.returncode == 0, result.stderr
    assert walks == [str(tmp_path / "photos")]
    assert len(out.read_text().splitlines()) == 1 + 6
    # The library's own entry point: a list image_files made is used as it is.
    walks.clear()
    found = inference.image_files(str(tmp_path / "photos"))
    assert len(list(keras_vit.predict_images(path, found))) == 6
    assert walks == [str(tmp_path / "photos")]


def test_a_list_file_is_read_through_the_one_read_path(tmp_path, monkeypatch):
    """A .txt list of images is read by keras_vit._support.files (regular files only, a size
    cap), not a bare open()."""
    from keras_vit._support import files

    listed = tmp_path / "list.txt"
    listed.write_text("a.png\nb.png\n")
    reads = []
    read_file = files.read_file
    monkeypatch.setattr(image_sources, "read_file",
                        lambda p, *a, **k: reads.append(p) or read_file(p, *a, **k))
    assert inference.image_files(str(listed)) == ["a.png", "b.png"]
    assert reads == [str(listed)]


def test_a_bad_image_is_a_row_with_its_error_and_exit_1(model_file, tmp_path, cli):
    path, model = model_file
    pixels = write_images(str(tmp_path / "photos"), ["a.png", "c.png", "d.png"])
    (tmp_path / "photos" / "b.png").write_bytes(b"not an image at all")
    out = tmp_path / "preds.csv"
    result = cli(["predict", str(tmp_path / "photos"), "--model", path, "--output", str(out),
                  "--batch-size", "2"])
    assert result.returncode == 1
    bad = str(tmp_path / "photos" / "b.png")
    assert result.stderr.splitlines()[-1] == "keras-vit predict: 1 of 4 images could not be read."
    assert f"keras-vit predict: error: {bad} is not a JPEG, PNG, GIF, BMP or WebP image" \
        in result.stderr
    with open(out, newline="") as f:
        rows = {r["path"]: r for r in csv.DictReader(f)}
    assert list(rows) == sorted([*pixels, bad])
    assert "is not a JPEG, PNG" in rows[bad]["error"] and rows[bad]["top1_label"] == ""
    good = sorted(pixels)
    expected = expected_probabilities(model, np.stack([pixels[p] for p in good]))
    np.testing.assert_allclose([float(rows[p]["top1_probability"]) for p in good],
                               expected.max(-1), rtol=1e-5)


def test_saved_model_predicts_a_batch_per_call(tiny_saved_model, tmp_path, monkeypatch):
    """The suite's one SavedModel of `tiny_classifier()` (tests/conftest.py), against that
    model rebuilt here."""
    model, export = tiny_classifier(), tiny_saved_model
    pixels = write_images(str(tmp_path / "photos"), [f"{i}.png" for i in range(7)])
    calls = []
    from keras_vit.models import factory

    load = factory.load_serve_bytes

    def counting(folder):
        serve = load(folder)

        def call(image_bytes):
            calls.append(int(image_bytes.shape[0]))
            return serve(image_bytes=image_bytes)
        call.structured_outputs = serve.structured_outputs
        return call
    monkeypatch.setattr(factory, "load_serve_bytes", counting)

    results = list(keras_vit.predict_images(export, str(tmp_path / "photos"), batch_size=3))
    assert calls == [3, 3, 1]
    expected = expected_probabilities(model, np.stack([pixels[r.path] for r in results]))
    np.testing.assert_allclose([r.probabilities for r in results], expected, atol=1e-5)
    # A batch the signature refuses is retried image by image, naming the bad one.
    (tmp_path / "photos" / "7.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    calls.clear()
    results = list(keras_vit.predict_images(export, str(tmp_path / "photos"), batch_size=4))
    assert calls == [4, 4, 1, 1, 1, 1]
    assert [r.error is None for r in results] == [True] * 7 + [False]
    assert "7.png" in results[-1].error


def _peaks_mb(python, tmp_path, model, counts, fresh_each):
    """Peak RSS of `keras-vit predict` over folders of `counts` images: all in one fresh
    process, or each in a fresh process of its own."""
    folders = []
    for count in counts:
        folders.append(str(tmp_path / f"n{count}"))
        write_images(folders[-1], [f"{i // 500}/{i}.png" for i in range(count)], size=16)
    write_images(str(tmp_path / "warm"), [f"{i}.png" for i in range(20)], size=16)
    peaks = []
    for group in ([[f] for f in folders] if fresh_each else [folders]):
        result = python(["tests/scripts/predict_memory.py", str(tmp_path / "warm"), model,
                         str(tmp_path / "preds.csv"), *group], timeout=1200)
        assert result.returncode == 0, result.stderr[-3000:]
        peaks += json.loads(result.stdout.splitlines()[-1])["peak_mb"]
    with open(tmp_path / "preds.csv") as f:
        assert sum(1 for _ in f) == counts[-1] + 1  # a row per image, and the header
    print("peak MB", dict(zip(counts, peaks)))
    return peaks


def test_predict_memory_does_not_grow_with_the_images(python, tmp_path, model_file):
    """100 and then 600 images in one fresh process, the peak reset before each run (the
    slow test: 1,000 and 20,000, each in a fresh process)."""
    small, large = _peaks_mb(python, tmp_path, model_file[0], (100, 600), fresh_each=False)
    assert large <= 1.15 * small + 64, (small, large)


@pytest.mark.slow  # 21,000 images through two fresh processes: minutes on 2 cores
def test_predict_memory_at_20000_images(python, tmp_path, model_file):
    small, large = _peaks_mb(python, tmp_path, model_file[0], (1000, 20000), fresh_each=True)
    assert large <= 1.15 * small + 64, (small, large)


def test_a_folder_of_jpegs_including_a_misnamed_png(model_file, tmp_path):
    """All files named .jpg take the JPEG-only decode; one that is a PNG inside still predicts
    (read again through the general path), as the same pixels would."""
    _, model = model_file
    write_images(str(tmp_path), ["misnamed.png"])
    os.rename(tmp_path / "misnamed.png", tmp_path / "misnamed.jpg")
    rng = np.random.default_rng(1)
    for name in ("a.jpg", "b.jpg"):
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)).save(tmp_path / name)
    results = list(keras_vit.predict_images(model, str(tmp_path), batch_size=2, top=1))
    assert [os.path.basename(r.path) for r in results] == ["a.jpg", "b.jpg", "misnamed.jpg"]
    assert all(r.error is None for r in results)
    decoded = np.stack([np.asarray(Image.open(r.path).convert("RGB")) for r in results])
    expected = expected_probabilities(model, decoded)
    # Pillow's JPEG decode differs from TensorFlow's by a unit here and there: the PNG is exact.
    np.testing.assert_allclose(results[2].probabilities, expected[2], rtol=1e-5)
    np.testing.assert_allclose([r.probabilities for r in results[:2]], expected[:2], atol=0.02)
