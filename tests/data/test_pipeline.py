"""Input pipelines: digits split, preprocessing, folders with bad files, offline TFDS."""

import base64
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from keras_vit import data


def test_digits_split_is_fixed_and_stratified():
    first, second = data.load_digits(), data.load_digits()
    assert (first.num_train, first.num_test, first.num_classes) == (1437, 360, 10)
    labels = [y for _, y in first.test.as_numpy_iterator()]
    again = [y for _, y in second.test.as_numpy_iterator()]
    assert labels == again
    counts = np.bincount(labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20% of ~180 per class
    image, _ = next(first.train.as_numpy_iterator())
    assert image.shape == (8, 8, 1) and image.dtype == np.uint8 and image.max() > 200


def test_eval_pipeline_resizes_only():
    images = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 1), dtype=np.uint8)
    ds = tf.data.Dataset.from_tensor_slices((images, np.arange(3, dtype=np.int32)))
    batch, labels = next(iter(data.make_pipeline(ds, 16, 8, training=False)))
    assert batch.shape == (3, 16, 16, 3) and list(labels.numpy()) == [0, 1, 2]
    # Independent check: nearest-in-spirit reference, a 2x bilinear upsample keeps the mean.
    expected = images[..., 0].astype(np.float32) / 127.5 - 1.0
    got = batch.numpy()[..., 0]
    np.testing.assert_allclose(got.reshape(3, 8, 2, 8, 2).mean((2, 4)).mean(),
                               expected.mean(), atol=0.02)
    np.testing.assert_array_equal(batch.numpy()[..., 0], batch.numpy()[..., 2])  # gray->RGB
    assert batch.numpy().min() >= -1.0 and batch.numpy().max() <= 1.0


def test_inception_crop_area_and_aspect():
    image = tf.zeros((200, 200, 3), tf.uint8)
    areas, aspects = [], []
    for _ in range(200):
        crop = data.inception_crop(image, (0.05, 1.0))
        h, w = int(crop.shape[0]), int(crop.shape[1])
        areas.append(h * w / 200 ** 2)
        aspects.append(w / h)
    assert min(areas) >= 0.05 - 0.01 and max(areas) <= 1.0
    assert min(areas) < 0.3 and max(areas) > 0.7  # the whole range is sampled
    assert min(aspects) >= 0.7 and max(aspects) <= 1.4


def test_training_pipeline_batches_and_range():
    splits = data.load_digits()
    ds = data.make_pipeline(splits.train, 32, 16, training=True, seed=1)
    images, labels = next(iter(ds))
    assert images.shape == (16, 32, 32, 3) and labels.shape == (16,)
    assert float(tf.reduce_min(images)) >= -1.0 and float(tf.reduce_max(images)) <= 1.0


def write_folder(root, corrupt=True):
    """Two classes of tiny JPEG, PNG and grayscale PNG images, plus one corrupt file."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("cats", "dogs")):
        os.makedirs(os.path.join(root, name))
        for i in range(10):
            pixels = np.full((12, 10, 3), 40 + 160 * c, np.uint8) + rng.integers(0, 20, (12, 10, 3),
                                                                                 dtype=np.uint8)
            if i % 3 == 0:
                data = tf.io.encode_png(pixels[..., :1])  # grayscale
                ext = "png"
            elif i % 3 == 1:
                data = tf.io.encode_png(pixels)
                ext = "png"
            else:
                data = tf.io.encode_jpeg(pixels)
                ext = "jpg"
            tf.io.write_file(os.path.join(root, name, f"{i}.{ext}"), data)
    if corrupt:
        with open(os.path.join(root, "dogs", "broken.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 this is not a JPEG")
    with open(os.path.join(root, "dogs", "notes.txt"), "w") as f:
        f.write("not an image")


def test_folder_skips_and_counts_corrupt_files(tmp_path):
    write_folder(str(tmp_path))
    splits = data.load_image_folder(str(tmp_path))
    assert splits.class_names == ["cats", "dogs"]
    assert splits.num_train + splits.num_test == 20
    assert [os.path.basename(p) for p in splits.skipped_files] == ["broken.jpg"]
    assert [os.path.basename(p) for p in splits.unsupported_files] == ["notes.txt"]
    batch, _ = next(iter(data.make_pipeline(splits.test, 16, 4, training=False)))
    assert batch.shape == (4, 16, 16, 3)


def test_folder_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="no class sub-folders"):
        data.load_image_folder(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.load_dataset(str(tmp_path / "missing" / "folder"))


def test_tfds_offline_fails_fast_with_advice(tmp_path):
    if data.datasets._internet_reachable():
        pytest.skip("this machine is online; the offline path cannot be exercised")
    start = time.perf_counter()
    with pytest.raises(data.DatasetUnavailableError) as error:
        data.load_tfds("tf_flowers", data_dir=str(tmp_path))
    elapsed = time.perf_counter() - start
    # A hostile-input bound (tests/conftest.py TIME_BOUNDS): 3.5 s under load, 40 s over 10x.
    assert elapsed < 40, f"took {elapsed:.1f} s"
    message = str(error.value)
    for needed in ("'tf_flowers'", "manual", "--dataset PATH", "--data-dir"):
        assert needed in message


def test_unknown_tfds_name_is_named():
    with pytest.raises(ValueError, match="no_such_dataset_xyz"):
        data.load_dataset("no_such_dataset_xyz")


# --- hostile folders (issue 17) -----------------------------------------------------------

# A 1x1 lossy (RGB) WebP: TensorFlow has no WebP encoder to write one.
WEBP_1X1 = base64.b64decode("UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA")


def test_non_utf8_names_and_unsupported_files_are_skipped_and_counted(tmp_path):
    root = str(tmp_path)
    write_folder(root)
    cats = os.path.join(root, "cats")
    good = open(os.path.join(cats, "1.png"), "rb").read()
    with open(os.path.join(os.fsencode(cats), b"caf\xe9.png"), "wb") as f:  # Latin-1, not UTF-8
        f.write(good)
    with open(os.path.join(cats, ".DS_Store"), "wb") as f:
        f.write(b"\0\0\0\1Bud1")
    with open(os.path.join(cats, "5.webp"), "wb") as f:
        f.write(WEBP_1X1)
    splits = data.load_image_folder(root)
    assert splits.num_train + splits.num_test == 21  # 20 images and the WebP
    assert sorted(os.path.basename(p) for p in splits.skipped_files) == ["broken.jpg",
                                                                         "caf\\xe9.png"]
    assert sorted(os.path.basename(p) for p in splits.unsupported_files) == [".DS_Store",
                                                                             "notes.txt"]


def test_a_folder_split_holds_paths_and_counts_their_bytes(tmp_path):
    """The shuffle buffer and cache hold a folder's file names, not their decoded pixels."""
    write_folder(str(tmp_path), corrupt=False)
    splits = data.load_image_folder(str(tmp_path))
    files = [os.path.join(tmp_path, c, f) for c in ("cats", "dogs")
             for f in os.listdir(tmp_path / c) if not f.endswith(".txt")]
    assert splits.train_bytes + splits.test_bytes == sum(os.path.getsize(f) for f in files)
    held = [x.decode() for x, _ in splits.train.as_numpy_iterator()]
    held += [x.decode() for x, _ in splits.test.as_numpy_iterator()]
    assert sorted(held) == sorted(files)


def test_unknown_tfds_name_is_one_short_line():
    with pytest.raises(ValueError) as error:
        data.load_dataset("no_such_dataset_xyz")
    message = str(error.value)
    assert "\n" not in message and len(message) < 300, message
