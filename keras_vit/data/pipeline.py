"""tf.data pipelines: raw `(image, label)` examples into batches a ViT trains on.

`make_pipeline` turns one split of `keras_vit.data.load_dataset` into batches of
`(images float32 (batch, size, size, 3) in [-1, 1], labels int32 (batch,))`
with the official preprocessing (`keras_vit.preprocessing`).
"""

import random

import tensorflow as tf

from keras_vit.data.datasets import to_rgb
from keras_vit.data.image_files import graph_function, load_files, record_failures
from keras_vit.errors import ArgumentError
from keras_vit.normalization import normalize_pixels
from keras_vit.preprocessing import (
    check_pixel_budget,
    decode_image,
    decode_jpeg,
    preprocess_input,
    resize_image,
)

__all__ = ["make_pipeline", "inception_crop", "decode_and_crop"]


def inception_crop(image, area_range=(0.05, 1.0), seed=None):
    """A random crop covering `area_range` of the image, aspect 3/4..4/3, as Inception.

    `(H, W, C) -> (h, w, C)`; resize afterwards.
    """
    begin, size = _crop_window(tf.shape(image), area_range, seed)
    return tf.slice(image, begin, size)


def _crop_window(shape, area_range, seed=None):
    """`seed`: an int (TensorFlow's stateful op), or a tensor of shape (2,) (its stateless op:
    the training pipeline's per-example seeds)."""
    sample = (tf.image.stateless_sample_distorted_bounding_box if isinstance(seed, tf.Tensor)
              else tf.image.sample_distorted_bounding_box)
    begin, size, _ = sample(
        shape, bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        min_object_covered=0.0, aspect_ratio_range=(0.75, 1.33), area_range=area_range,
        max_attempts=10, use_image_if_no_bounding_boxes=True, seed=seed)
    return begin, size


def decode_and_crop(data, area_range, seed=None):
    """Encoded image bytes -> an inception crop of its uint8 RGB pixels, as
    `inception_crop(decode_image(data))`; a JPEG decodes only the crop window.

    Decoding a JPEG's window (libjpeg skips the rows and blocks outside it) is
    what lets the training pipeline keep up: the crop covers about half of the
    image on average. The pixel budget is checked first, as `decode_image` does.
    """
    data = check_pixel_budget(data)

    def jpeg():
        begin, size = _crop_window(tf.io.extract_jpeg_shape(data), area_range, seed)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.image.decode_and_crop_jpeg(data, window, channels=3)

    is_jpeg = tf.equal(tf.strings.substr(data, 0, 3), b"\xff\xd8\xff")
    return tf.cond(is_jpeg, jpeg, lambda: inception_crop(decode_image(data), area_range, seed))


def make_pipeline(dataset, image_size, batch_size, training, crop_area=(0.05, 1.0), flip=True,
                  shuffle_buffer=10_000, cache=False, repeat=None, seed=None, normalization=None,
                  augmentation=None, num_classes=None):
    """Batches of `(images float32 (batch, size, size, 3) in [-1, 1], labels int32 (batch,))`.

    `num_classes`: labels come one-hot, float32 (batch, num_classes), as MixUp and
    CutMix need. `augmentation`: an `Augmentation` (keras_vit/data/augreg.py) the
    training pipeline applies after its crop and flip: RandAugment on each image,
    MixUp or CutMix on each batch (these need `num_classes`).

    `normalization`: the mean/std the model's weights expect instead of [-1, 1]
    (`keras_vit.normalization.input_normalization(model)`); None: [-1, 1].

    Training: shuffle, inception crop (`crop_area`, None to skip), resize,
    random left-right flip (`flip`), [-1, 1]; repeated, whole batches only.
    Every random draw of the training pipeline (shuffle, crop, flip, augmentation) comes
    from `seed` (None: Python's `random`, which `keras.utils.set_random_seed` seeds) and
    the example's place in the stream, through stateless ops: the same seed gives the same
    batches, however tf.data schedules its parallel maps.
    Eval: resize straight to `image_size` (no centre crop), [-1, 1], in order.
    Examples holding file paths (a folder's) are read and decoded after the
    shuffle and the cache, which thus hold names rather than pixels, in parallel;
    a file that fails to read or decode (gone since the scan, or a JPEG whose data
    is cut after an intact header), in training as in a held-out split, is skipped
    and its path added to the dataset's `failed_files` list
    (`DatasetSplits.skipped_files`, which `DatasetSplits.count_read` subtracts).
    `batch_size` is the global batch: a tf.distribute strategy splits it
    across replicas.
    """
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    # What a folder's split carries (keras_vit/data/datasets.py), read before the
    # transformations below: the list its failed files go to, and whether all are JPEGs.
    failed = getattr(dataset, "failed_files", None)
    failed = [] if failed is None else failed
    jpeg_files = getattr(dataset, "jpeg_files", False)
    if cache:
        dataset = dataset.cache()
    repeat = training if repeat is None else repeat
    if training and seed is None:
        seed = random.randrange(2**31)
    augmenter = None
    if training and augmentation is not None and augmentation.active:
        from keras_vit.data.augment_layers import Augmenter

        if augmentation.mixes and num_classes is None:
            raise ArgumentError("MixUp and CutMix mix labels: give make_pipeline num_classes.")
        augmenter = Augmenter(augmentation)
    if training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    if training:  # (x, y) -> (x, y, the example's own seed)
        base = tf.constant(seed, tf.int64)
        dataset = dataset.enumerate().map(lambda i, example: (*example, tf.stack([base, i])))

    files = dataset.element_spec[0].dtype == tf.string  # a folder's paths
    crop = training and crop_area is not None

    def seeds(seed):  # the example's crop, flip and augmentation seeds
        return tf.unstack(tf.random.experimental.stateless_split(seed, 3))

    def load(path, label=None, seed=None):  # a folder's file, decoded (and cropped) where it is read
        data = tf.io.read_file(path)
        crop_seed = None if seed is None else seeds(seed)[0]
        if jpeg_files:
            window = (lambda shape: _crop_window(shape, crop_area, crop_seed)) if crop else None
            return decode_jpeg(data, crop_window=window)
        return decode_and_crop(data, crop_area, crop_seed) if crop else decode_image(data)

    def preprocess(image, label, *seed):
        crop_seed, flip_seed, augment_seed = seeds(seed[0]) if seed else (None, None, None)
        image = to_rgb(image)
        if crop and not files:
            image = inception_crop(image, crop_area, crop_seed)
        image = resize_image(image, size)
        if training and flip:
            image = tf.image.stateless_random_flip_left_right(image, flip_seed)
        if augmenter is not None:
            image = augmenter.image(tf.ensure_shape(image, (*size, 3)), augment_seed)
        image = tf.clip_by_value(image, 0.0, 255.0)
        image = (preprocess_input(image) if normalization is None
                 else normalize_pixels(image, normalization))
        image = tf.ensure_shape(image, (*size, 3))
        return image, label

    if files:  # every failure skipped and named, none stopping the run; the order kept
        dataset = record_failures(load_files(dataset, load), failed)
    dataset = dataset.map(graph_function(preprocess), num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=training)
    if num_classes is not None:
        dataset = dataset.map(lambda images, labels: (images, tf.one_hot(labels, num_classes)))
    if augmenter is not None and augmentation.mixes:
        # A batch's seed: the run's and minus its number (examples' are plus theirs).
        dataset = dataset.enumerate().map(
            lambda i, batch: augmenter.batch(*batch, tf.stack([base, -1 - i])),
            num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()
    # Examples are in memory or already decoded: shard by element, not by file.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)
