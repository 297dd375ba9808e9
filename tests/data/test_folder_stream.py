"""A folder dataset is ready at the speed of listing, and a file that fails later is skipped
and named, never a stopped run."""

import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import data
from keras_vit.preprocessing import decode_image, decode_jpeg


def write_jpegs(root, count, size=(600, 800), classes=2, seed=0):
    """`count` noisy JPEGs (height, width = size) spread over `classes` sub-folders."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (size[0] // 8, size[1] // 8, 3), dtype=np.uint8)
    paths = []
    for i in range(count):
        folder = os.path.join(root, f"class{i % classes}")
        os.makedirs(folder, exist_ok=True)
        # Upsampled noise: a photo-like file size, cheap to make.
        pixels = np.kron(np.roll(base, i, axis=1), np.ones((8, 8, 1), np.uint8))
        path = os.path.join(folder, f"{i:05d}.jpg")
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(path)
    return paths


# TensorFlow's image decoders, as the tf.io and tf.image namespaces export them (keras_vit's
# decoders call them through these names).
DECODERS = ("decode_image", "decode_jpeg", "decode_and_crop_jpeg", "decode_png", "decode_gif",
            "decode_bmp", "decode_webp")


def _bytes_read():
    """Bytes this process has read through read(2) and its kin, every thread included
    (Linux's /proc/self/io `rchar`): TensorFlow's file reads count here."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def _count_decoders(monkeypatch):
    """Counts the calls to TensorFlow's image decoders (a tf.data map calls them when it builds
    its graph: a graph built without a call cannot decode)."""
    calls = []

    def counting(name, decoder):
        def counted(*args, **kwargs):
            calls.append(name)
            return decoder(*args, **kwargs)
        return counted

    for module in (tf.io, tf.image):
        for name in DECODERS:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, counting(name, getattr(module, name)))
    return calls


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts bytes through Linux's "
                    "/proc/self/io")
def test_a_folder_of_photos_is_ready_without_decoding_a_pixel(tmp_path, monkeypatch):
    """150 800 x 600 JPEGs: the scan reads each file once and decodes none; building the training
    pipeline reads no file. Work counted, not timed (how much sooner the folder is ready than a
    decode pass: `python -m benchmarks.folder_ready`, docs/performance.md). The slack allowed is
    less than one file: a second read of any file, or a read while building, fails."""
    warm = str(tmp_path / "warm")  # TensorFlow's and Python's first-use reads, once
    write_jpegs(warm, 20, size=(48, 64))
    data.make_pipeline(data.load_image_folder(warm).train, 224, 32, training=True)
    paths = write_jpegs(str(tmp_path / "photos"), 150)
    sizes = [os.path.getsize(p) for p in paths]
    calls = _count_decoders(monkeypatch)
    before = _bytes_read()
    splits = data.load_image_folder(str(tmp_path / "photos"))
    scanned = _bytes_read()
    assert splits.num_train + splits.num_test == len(paths) and not splits.skipped_files
    assert calls == [], calls
    assert sum(sizes) <= scanned - before < sum(sizes) + min(sizes), (scanned - before, sum(sizes))
    data.make_pipeline(splits.train, 224, 32, training=True)
    assert _bytes_read() - scanned < min(sizes)
    # The counter sees the decoders the pipeline uses: building it traces them.
    assert calls, "the pipeline's decoder was not counted: the count above proves nothing"


def test_files_deleted_or_broken_after_the_scan_are_skipped_and_named(tmp_path):
    root = str(tmp_path / "photos")
    paths = write_jpegs(root, 20, size=(48, 64))
    splits = data.load_image_folder(root)
    train = [p.decode() for p, _ in splits.train.as_numpy_iterator()]
    test = [p.decode() for p, _ in splits.test.as_numpy_iterator()]
    assert sorted(train + test) == sorted(paths)
    os.remove(train[0])
    os.remove(test[0])
    with open(train[1], "r+b") as f:  # the header survives, the image data does not
        f.truncate(400)
    # Training: two epochs' worth of batches, no error; the deleted file is named.
    batches = data.make_pipeline(splits.train, 32, 4, training=True, seed=0)
    seen = sum(len(labels) for _, labels in batches.take(2 * len(train) // 4))
    assert seen == 2 * len(train) // 4 * 4
    assert train[0] in splits.skipped_files
    # Held out: every failure named, and the labels read afterwards stay aligned.
    evaluated = data.make_pipeline(splits.test, 32, 4, training=False)
    predicted = sum(len(labels) for _, labels in evaluated)
    labels = [y for _, y in splits.test.as_numpy_iterator()]
    assert test[0] in splits.skipped_files
    assert predicted == len(labels) == len(test) - 1


def test_a_jpeg_decodes_the_same_through_the_jpeg_path(tmp_path):
    """The folder pipeline's JPEG-only path gives decode_image's pixels; a crop window decodes
    the same pixels but in its first and last columns, where libjpeg upsamples the chroma
    from the window's own edge (a training augmentation: no reason to decode it all)."""
    path, = write_jpegs(str(tmp_path), 1, size=(40, 56), classes=1)
    raw = tf.io.read_file(path)
    full = decode_image(raw).numpy()
    np.testing.assert_array_equal(decode_jpeg(raw).numpy(), full)
    window = decode_jpeg(raw, crop_window=lambda shape: ([8, 16], [24, 32])).numpy()
    np.testing.assert_array_equal(window[:, 1:-1], full[8:32, 17:47])
    assert np.abs(window.astype(int) - full[8:32, 16:48]).max() < 64
    # Pillow's libjpeg build rounds its IDCT and upsampling a little differently.
    assert np.abs(full.astype(int) - np.asarray(Image.open(path).convert("RGB"))).mean() < 2
    with pytest.raises(tf.errors.InvalidArgumentError, match="over the pixel budget of 100"):
        decode_jpeg(raw, max_pixels=100)
    # An EXIF orientation is treated alike by both (whatever decode_image does with it, the
    # JPEG path must do too: this fails the day one of them changes alone).
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    Image.open(path).save(tmp_path / "rotated.jpg", exif=exif, quality=90)
    rotated = tf.io.read_file(str(tmp_path / "rotated.jpg"))
    np.testing.assert_array_equal(decode_jpeg(rotated).numpy(), decode_image(rotated).numpy())


@pytest.mark.slow  # a training run; the pipeline itself is tested above by default
def test_a_training_run_reports_files_deleted_after_the_scan(tmp_path, monkeypatch):
    from keras_vit.training import run

    root = str(tmp_path / "photos")
    written = 24
    write_jpegs(root, written, size=(24, 32))
    gone = []

    def scan_then_delete(source, data_dir=None, **split):
        splits = data.load_dataset(source, data_dir=data_dir, **split)
        for split in (splits.train, splits.test):
            gone.append(next(split.as_numpy_iterator())[0].decode())
            os.remove(gone[-1])
        return splits
    monkeypatch.setattr(run, "load_dataset", scan_then_delete)
    report = run.train(root, model="demo", recipe="scratch", image_size=16, batch_size=4,
                       epochs=1, output=str(tmp_path / "run"), verbose=0)
    assert sorted(report["skipped_files"]["files"]) == sorted(gone)
    # The counts are of the images read, without the skipped files (docs/fine-tuning.md): the
    # test file deleted after the scan is in no class's support, nor in num_test.
    assert report["num_test"] == sum(report["per_class"][c]["support"] for c in report["class_names"])
    assert report["num_train"] + report["num_validation"] + report["num_test"] == written - len(gone)
