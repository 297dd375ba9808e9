"""Dataset sources: TFDS datasets, folders of class sub-folders, and digits.

`load_dataset(source)` returns the raw examples (`(image uint8 (H, W, C),
label int32)`, or for a folder `(encoded image bytes, label int32)`) of a
train and a held-out (test) split, and on request a validation split carved
from the training examples; `keras_vit.data.make_pipeline` turns one split
into batches. `DatasetSplits.split` records how the examples were split and a
fingerprint of each split's example ids, so two runs can show they used the
same examples.
"""

import dataclasses
import os
import socket
import unicodedata

import numpy as np
import tensorflow as tf

from keras_vit._support.progress import Progress
from keras_vit.data.image_files import load_batches, skip_failed
from keras_vit.data.splitting import (
    HELD_OUT,
    HELD_OUT_FRACTION,
    SPLIT_SEED,
    VALIDATION_FRACTION,
    check_fraction,
    held_out_split,
    split_fingerprint,
    split_record,
    validation_split,
)
from keras_vit.errors import DatasetError, DatasetUnavailableError, PathNotFoundError
from keras_vit.preprocessing import (
    IMAGE_EXTENSIONS,
    JPEG_EXTENSIONS,
    check_pixel_budget,
    checked_jpeg_shape,
    declared_image_size,
)

__all__ = ["DatasetSplits", "DatasetUnavailableError", "load_dataset", "load_digits",
           "load_image_folder", "load_tfds", "to_rgb", "split_fingerprint", "HELD_OUT_FRACTION",
           "SPLIT_SEED", "VALIDATION_FRACTION"]

CONNECT_TIMEOUT_S = 5.0
SCAN_PROGRESS_FILES = 5_000  # a folder with more files shows its scan's progress on stderr


@dataclasses.dataclass
class DatasetSplits:
    """A train and a held-out split of `(image uint8 (H, W, C), label int32)` examples.

    A folder's examples hold the image file's path instead of its pixels
    (`make_pipeline` reads and decodes them): a shuffle buffer or cache of photos
    then holds names, not full-resolution pixels, many times larger. A file that
    fails to read or decode while the pipeline runs is skipped and its path added
    to `skipped_files`.
    """

    train: tf.data.Dataset
    test: tf.data.Dataset
    class_names: list
    num_train: int
    num_test: int
    skipped_files: list = dataclasses.field(default_factory=list)  # unreadable images
    name: str = ""
    # Files of a folder dataset that are not images by their extension (notes.txt, .DS_Store).
    unsupported_files: list = dataclasses.field(default_factory=list)
    # Bytes of each split's examples as a cache holds them (a folder's: its files' sizes);
    # None when unknown.
    train_bytes: int | None = None
    test_bytes: int | None = None
    # Carved from the training examples when asked for (load_dataset's validation_fraction);
    # then `train` no longer holds them.
    validation: tf.data.Dataset | None = None
    num_validation: int = 0
    validation_bytes: int | None = None
    # How the examples were split: the test split's origin, the validation fraction and seed,
    # each split's size and fingerprint (split_fingerprint of its example ids).
    split: dict = dataclasses.field(default_factory=dict)
    # A folder's file paths by split ("train", "validation", "test"), for count_read.
    files: dict = dataclasses.field(default_factory=dict)

    @property
    def num_classes(self):
        return len(self.class_names)

    def count_read(self, name):
        """The examples of split `name` ("train", "validation", "test") less its files named
        in `skipped_files` so far (a file that failed to read or decode in the pipeline):
        what a model was trained or scored on."""
        total = {"train": self.num_train, "validation": self.num_validation,
                 "test": self.num_test}[name]
        failed = set(self.skipped_files)
        return total - sum(path in failed for path in self.files.get(name, ()))


def load_dataset(source, data_dir=None, validation_fraction=0.0, validation_seed=SPLIT_SEED):
    """`"digits"`, a folder of class sub-folders, or a TFDS name ("tf_flowers").

    `validation_fraction` > 0 carves a validation split of that share of the
    training examples, stratified by class and drawn with `validation_seed`;
    the test split is the same whatever the fraction and seed.
    """
    if not isinstance(source, str) or not source:
        raise DatasetError(f"dataset must be 'digits', a folder or a TFDS name, got {source!r}.")
    check_fraction(validation_fraction)
    carve = {"validation_fraction": validation_fraction, "validation_seed": validation_seed}
    if source == "digits":
        return load_digits(**carve)
    if os.path.isdir(source):
        return load_image_folder(source, **carve)
    _refuse_a_file(source)
    if os.sep in source or source.startswith("."):
        raise PathNotFoundError(f"Dataset folder {source!r} does not exist.")
    return load_tfds(source, data_dir=data_dir, **carve)


# What users zip or tar a folder of photos into; TFDS would read such a name as a dataset's.
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz",
                    ".gz", ".bz2", ".xz", ".7z", ".rar")


def _refuse_a_file(source):
    """A dataset is a folder: an archive (existing or not) or any other file is refused
    here, in one line, before TFDS reads its name as a dataset's."""
    if source.lower().endswith(ARCHIVE_SUFFIXES):
        raise DatasetError(f"Dataset {source!r} is an archive; archives are not read: extract "
                           "it first and give the folder of class sub-folders.")
    if os.path.exists(source):
        raise DatasetError(f"Dataset {source!r} is a file; give a folder of class sub-folders, "
                           "'digits' or a TFDS name.")


def load_digits(validation_fraction=0.0, validation_seed=SPLIT_SEED):
    """scikit-learn's 1,797 handwritten 8x8 digits as uint8 `(8, 8, 1)` images, 10 classes.

    Real data shipped inside scikit-learn, so it works offline. The held-out
    split is a fixed stratified 20% (360 images); an example's id is its
    index in scikit-learn's order.
    """
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    # Pixel values are 0..16; stretch them to the 0..255 of ordinary images.
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    labels = digits.target.astype(np.int32)
    train, test = held_out_split(labels)
    train, validation = validation_split(train, labels, validation_fraction, validation_seed,
                                          "digits")

    def split(indices):
        return tf.data.Dataset.from_tensor_slices((images[indices], labels[indices]))

    ids = {"train": train, "validation": validation, "test": test}
    return DatasetSplits(split(train), split(test), [str(i) for i in range(10)],
                         len(train), len(test), name="digits",
                         train_bytes=images[train].nbytes, test_bytes=images[test].nbytes,
                         validation=split(validation) if len(validation) else None,
                         num_validation=len(validation),
                         validation_bytes=images[validation].nbytes,
                         split=split_record(HELD_OUT, validation_fraction, validation_seed,
                                             ids))


def load_image_folder(root, validation_fraction=0.0, validation_seed=SPLIT_SEED):
    """A folder with one sub-folder of images per class (flower_photos layout).

    Images are the files with one of `keras_vit.preprocessing.IMAGE_EXTENSIONS`;
    an example's id is its path under `root` ("cats/01.png"), so a moved copy
    of the folder splits and fingerprints alike.

    Examples are `(file path, label)`: `make_pipeline` reads and decodes them
    after its shuffle. The scan reads each file's header only (its declared size,
    checked against the pixel budget), in parallel, so training starts at about
    the speed of listing the folder. Files whose header is not an image's or is
    over the budget, and files whose names are not valid UTF-8 (TensorFlow's file
    names are strings), are left out and listed in `skipped_files`; so is, while
    the pipeline reads it (training or held out), a file that fails to decode (a JPEG cut
    after its header) or was deleted after the scan (`DatasetSplits.count_read` then
    leaves it out of its split's count). Every
    other file (no image extension) is left out and listed in `unsupported_files`.
    """
    class_names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not class_names:
        raise DatasetError(f"{root!r} has no class sub-folders; expected root/<class>/<image>.")
    # A class name is a line of labels.txt (read by predict and export): refused here, before
    # training, rather than when the run writes that file at its end.
    unprintable = [name for name in class_names if not _is_utf8(name) or not name.isprintable()]
    if unprintable:
        raise DatasetError(f"Class folder {os.path.join(root, unprintable[0])!r} has a newline, "
                           "a control character or undecodable bytes in its name; rename it (a "
                           "class name becomes one line of labels.txt).")
    _refuse_unicode_twins(class_names, root)
    listed, listed_labels, skipped, unsupported = [], [], [], []
    for label, name in enumerate(class_names):
        folder = os.path.join(root, name)
        for file in sorted(os.listdir(folder)):
            path = os.path.join(folder, file)
            if not _is_utf8(path):
                skipped.append(_printable(path))
            elif not file.lower().endswith(IMAGE_EXTENSIONS) or not os.path.isfile(path):
                unsupported.append(path)
            else:
                listed.append(path)
                listed_labels.append(label)
    sizes = _scan_headers(listed, root)
    good = sizes >= 0
    skipped += [path for path, ok in zip(listed, good) if not ok]
    paths = np.asarray(listed, dtype=object)[good].astype(str) if listed else np.asarray([], str)
    labels = np.asarray(listed_labels, np.int32)[good]
    sizes = sizes[good]
    missing = [c for i, c in enumerate(class_names) if not np.any(labels == i)]
    if missing:
        raise DatasetError(f"No readable images for classes {missing} under {root!r} "
                           f"({len(skipped)} unreadable and {len(unsupported)} unsupported files "
                           "skipped).")
    _check_split_sizes(labels, class_names, root)
    train, test = held_out_split(labels)
    train, validation = validation_split(train, labels, validation_fraction, validation_seed,
                                          root)

    # Every file a JPEG by name and by header: the pipeline reads them the JPEG way.
    all_jpeg = all(path.lower().endswith(JPEG_EXTENSIONS) for path in paths)

    def split(indices, held_out):
        files = tf.data.Dataset.from_tensor_slices((paths[indices], labels[indices]))
        # A held-out file that fails is left out of the labels as well as the predictions.
        files = skip_failed(files, skipped) if held_out else files
        files.failed_files, files.jpeg_files = skipped, all_jpeg
        return files

    ids = {name: [os.path.relpath(path, root).replace(os.sep, "/") for path in paths[indices]]
           for name, indices in (("train", train), ("validation", validation), ("test", test))}
    return DatasetSplits(split(train, False), split(test, True), class_names, len(train), len(test),
                         skipped_files=skipped, name=os.path.basename(os.path.normpath(root)),
                         unsupported_files=unsupported, train_bytes=int(sizes[train].sum()),
                         test_bytes=int(sizes[test].sum()),
                         validation=split(validation, True) if len(validation) else None,
                         num_validation=len(validation),
                         validation_bytes=int(sizes[validation].sum()),
                         split=split_record(HELD_OUT, validation_fraction, validation_seed,
                                             ids),
                         files={name: paths[indices] for name, indices in
                                (("train", train), ("validation", validation), ("test", test))})


def _scan_headers(paths, root):
    """Each file's size in bytes, or -1 when its header is not an image's or declares more
    pixels than the budget: headers only, read in parallel by tf.data (a .jpg or .jpeg file
    through the JPEG-only check, which must then find a JPEG)."""
    def header(path, jpeg):
        data = tf.io.read_file(path)
        if jpeg:
            with tf.control_dependencies([checked_jpeg_shape(data)]):
                return tf.cast(tf.strings.length(data), tf.int64)
        data = check_pixel_budget(data)
        height, width = declared_image_size(data)
        check = tf.debugging.assert_positive(height * width, "not an image header")
        with tf.control_dependencies([check]):
            return tf.cast(tf.strings.length(data), tf.int64)

    sizes = np.full(len(paths), -1, np.int64)
    progress = Progress(f"scanning {root}", len(paths), every=SCAN_PROGRESS_FILES) \
        if len(paths) > SCAN_PROGRESS_FILES else None
    done = 0
    for jpeg in (True, False):
        chosen = [i for i, p in enumerate(paths) if p.lower().endswith(JPEG_EXTENSIONS) == jpeg]
        if not chosen:
            continue
        for index, size in load_batches([paths[i] for i in chosen],
                                        lambda path, jpeg=jpeg: header(path, jpeg), 512):
            sizes[chosen[index]] = -1 if size is None else size
            done += 1
            if progress and done % 512 == 0:
                progress.update(done)
    if progress:
        progress.update(done)
        progress.close()
    return sizes


def _check_split_sizes(labels, class_names, root):
    """The stratified held-out split needs two images of each class, and at least one image
    per class on each side; scikit-learn would name the classes by index."""
    counts = np.bincount(labels, minlength=len(class_names))
    few = [name for name, count in zip(class_names, counts) if count < 2]
    if few:
        raise DatasetError(f"Class folders with a single readable image under {root!r}: "
                           f"{', '.join(few[:5])}{' ...' if len(few) > 5 else ''}; each class "
                           "needs at least 2 (one to train on, one held out).")
    held_out = int(np.ceil(HELD_OUT_FRACTION * len(labels)))
    if held_out < len(class_names) or len(labels) - held_out < len(class_names):
        raise DatasetError(f"{root!r} has {len(labels)} readable images for {len(class_names)} "
                           f"classes: a {HELD_OUT_FRACTION:.0%} held-out split cannot hold one of "
                           "each; add images.")


def _refuse_unicode_twins(class_names, root):
    """Refuses two class folders whose names are one name in two Unicode forms ("café" as é or
    as e and a combining accent): equal after NFC normalisation, they print alike in labels.txt
    and every report, and a file system that normalises names (macOS) would merge them."""
    seen = {}
    for name in class_names:
        twin = seen.setdefault(unicodedata.normalize("NFC", name), name)
        if twin != name:
            raise DatasetError(f"Class folders {ascii(twin)} and {ascii(name)} under {root!r} are "
                               "one name in two Unicode forms (equal once NFC-normalised), which "
                               "labels.txt and reports cannot tell apart; rename one.")


def _is_utf8(path):
    try:
        path.encode("utf-8")  # os.listdir gives undecodable bytes as lone surrogates
        return True
    except UnicodeEncodeError:
        return False


def _printable(path):
    """A non-UTF-8 file name with its undecodable bytes escaped, fit for report.json."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def load_tfds(name, data_dir=None, validation_fraction=0.0, validation_seed=SPLIT_SEED):
    """A TFDS dataset; downloads it only when its servers are reachable.

    Uses the "test" split when there is one, else a fixed 20% of "train"
    (tf_flowers). Raises `DatasetUnavailableError` within seconds when the data
    is neither prepared in `data_dir` nor downloadable. An example's id is its
    TFDS split and index in it ("train/17"); a validation split reads the
    training labels once (images not decoded) to stratify.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise DatasetUnavailableError(f"Dataset {name!r} needs tensorflow-datasets: "
                                      "pip install tensorflow-datasets") from error
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.DatasetNotFoundError:
        from keras_vit._support.names import did_you_mean

        # Not TFDS' own message: it lists every one of its ~450 datasets.
        hint = did_you_mean(name, ["digits", *tfds.list_builders()])
        raise DatasetError(f"Unknown dataset {name!r}: not 'digits', not an existing folder, "
                           f"and not a TFDS name.{hint} TFDS' names: "
                           "https://www.tensorflow.org/datasets/catalog/overview") from None
    if not _is_prepared(builder):
        _prepare(builder, name)
    splits = builder.info.splits
    if "test" in splits:
        train_split, test_split = "train", "test"
    else:
        cut = round(100 * (1 - HELD_OUT_FRACTION))
        train_split, test_split = f"train[:{cut}%]", f"train[{cut}%:]"
    features = builder.info.features
    class_names = list(features["label"].names)

    def split(spec, keep=None):
        ds = builder.as_dataset(split=spec, as_supervised=True, shuffle_files=False)
        if keep is not None:  # the examples at these indices of `spec`, in order
            wanted = tf.constant(np.isin(np.arange(splits[spec].num_examples), keep))

            def is_wanted(i, example):
                return wanted[i]

            def example_alone(i, example):
                return example

            ds = ds.enumerate().filter(is_wanted).map(example_alone)
        return ds.map(lambda x, y: (to_rgb(x), tf.cast(y, tf.int32)),
                      num_parallel_calls=tf.data.AUTOTUNE)

    num_train, num_test = splits[train_split].num_examples, splits[test_split].num_examples
    # Ids: the base split's name and the example's index in it (train[80%:] starts after
    # train[:80%]'s examples).
    test_start = 0 if test_split == "test" else num_train
    ids = {"train": np.arange(num_train), "test": np.arange(num_test)}
    validation = ids["train"][:0]
    if validation_fraction:
        labels = _tfds_labels(builder, train_split)
        ids["train"], validation = validation_split(ids["train"], labels, validation_fraction,
                                                     validation_seed, name)
    ids = {"train": [f"train/{i}" for i in ids["train"]],
           "validation": [f"train/{i}" for i in validation],
           "test": [f"{test_split.split('[')[0]}/{test_start + i}" for i in ids["test"]]}
    shape = features["image"].shape  # (None, None, 3) for images of varying size: unknown
    # As cached: after to_rgb, which turns one grey channel into three.
    example = int(np.prod(shape[:-1])) * (3 if shape[-1] == 1 else shape[-1]) \
        if None not in shape else None
    num_kept = num_train - len(validation)
    return DatasetSplits(
        split(train_split, np.setdiff1d(np.arange(num_train), validation)
              if len(validation) else None),
        split(test_split), class_names, num_kept, num_test, name=name,
        train_bytes=example and example * num_kept, test_bytes=example and example * num_test,
        validation=split(train_split, validation) if len(validation) else None,
        num_validation=len(validation), validation_bytes=example and example * len(validation),
        split=split_record(f"TFDS {test_split!r}", validation_fraction, validation_seed, ids))


def _tfds_labels(builder, spec):
    """The labels of a TFDS split, in order, read without decoding its images."""
    import tensorflow_datasets as tfds

    ds = builder.as_dataset(split=spec, shuffle_files=False,
                            decoders={"image": tfds.decode.SkipDecoding()})
    batches = ds.map(lambda example: example["label"]).batch(4096).as_numpy_iterator()
    return np.concatenate(list(batches)).astype(np.int32)


def _is_prepared(builder):
    try:
        return tf.io.gfile.exists(os.path.join(builder.data_dir, "dataset_info.json"))
    except Exception:  # noqa: BLE001  (an unreadable data_dir is "not prepared")
        return False


def _prepare(builder, name):
    import tensorflow_datasets as tfds

    # data_dir_root is an etils PosixGPath, whose repr would reach the message: a plain str.
    manual_dir = os.path.join(os.fspath(builder.data_dir_root), "downloads", "manual")
    has_manual = os.path.isdir(manual_dir) and os.listdir(manual_dir)
    if not has_manual and not _internet_reachable():
        raise DatasetUnavailableError(
            f"Dataset {name!r} is not prepared under {os.fspath(builder.data_dir_root)!r} and its download "
            "servers cannot be reached. To use it offline, either (1) prepare it on a machine "
            f"with internet (python -c \"import tensorflow_datasets as tfds; tfds.load('{name}')\") "
            "and copy ~/tensorflow_datasets here (or pass --data-dir DIR / TFDS_DATA_DIR), "
            f"(2) put its downloaded archives in {manual_dir} (TFDS manual_dir), or "
            "(3) pass a local folder of class sub-folders: --dataset PATH.")
    config = tfds.download.DownloadConfig(manual_dir=manual_dir if has_manual else None)
    builder.download_and_prepare(download_config=config)


def _internet_reachable(hosts=(("storage.googleapis.com", 443), ("www.tensorflow.org", 443)),
                        timeout=CONNECT_TIMEOUT_S):
    """A quick TCP check, so offline machines fail fast instead of retrying for minutes."""
    for host, port in hosts:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def to_rgb(image):
    """`(H, W, 1)` grey images as `(H, W, 3)`; RGB images unchanged."""
    image = tf.convert_to_tensor(image)
    if image.shape[-1] == 1:
        image = tf.image.grayscale_to_rgb(image)
    return image
