"""What a NaFlex model (SigLIP 2 NaFlex) takes: each image at the largest size of its own aspect
ratio whose patches fit a sequence budget, cut into patches, packed with padding.

`sequence_grid` is timm's rule (`timm.data.naflex_transforms.get_image_size_for_seq`): the
largest scale whose size, rounded up to whole patches per side, gives at most `max_tokens`
patches, found by the same bisection. `pack` lays out a batch as the model's inputs
(keras_vit/layers/naflex.py): {"patches": (batch, max_tokens, P * P * C), "grid": (batch, 2)}.
"""

import math

import numpy as np

from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError
from keras_vit.layer_names import GRID, PATCHES

__all__ = ["SEQUENCE_BUDGETS", "sequence_grid", "graph_sequence_grid", "patchify", "pack",
           "packed_image", "packed_pixels", "packed_image_files", "stack_packed",
           "batch_patches", "one_size_inputs"]

# The sequence lengths SigLIP 2 NaFlex was trained and evaluated at.
SEQUENCE_BUDGETS = (256, 576, 784, 1024)
_EPSILON = 1e-5  # timm's bisection stops when the bracket is narrower than this


def sequence_grid(height, width, patch_size, max_tokens):
    """(rows, cols) of patches for a `height` x `width` image under `max_tokens` patches,
    keeping its aspect ratio; the image is resized to (rows * P, cols * P) pixels."""
    height, width = positive_int(height, "height"), positive_int(width, "width")
    patch, budget = positive_int(patch_size, "patch_size"), positive_int(max_tokens, "max_tokens")

    def grid(ratio):  # whole patches per side, at least one
        return (max(math.ceil(height * ratio / patch), 1), max(math.ceil(width * ratio / patch), 1))

    low, high = _EPSILON / 10.0, 100.0
    while high - low >= _EPSILON:
        middle = (low + high) / 2.0
        rows, cols = grid(middle)
        if rows * cols <= budget:
            low = middle
        else:
            high = middle
    return grid(low)  # a scale this small always gives one patch: a grid always fits


def _bisection_steps():
    """How many halvings take sequence_grid's bracket below _EPSILON: 24, whatever the image
    (its width after 23 is 1.2e-5, after 24 6.0e-6, far from the bound for any rounding)."""
    steps, width = 0, 100.0 - _EPSILON / 10.0
    while width >= _EPSILON:
        steps, width = steps + 1, width / 2.0
    return steps


_BISECTION_STEPS = _bisection_steps()


def graph_sequence_grid(height, width, patch_size, max_tokens):
    """`sequence_grid` as TensorFlow ops on scalar `height` and `width` tensors, `(2,)` int32:
    the same float64 bisection step for step, so a SavedModel holds it (a Python function
    in the graph would not be saved) and tf.data runs it without Python."""
    import tensorflow as tf

    height, width = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
    patch, budget = float(patch_size), float(max_tokens)

    def grid(ratio):
        return (tf.maximum(tf.math.ceil(height * ratio / patch), 1.0),
                tf.maximum(tf.math.ceil(width * ratio / patch), 1.0))

    low = tf.constant(_EPSILON / 10.0, tf.float64)
    high = tf.constant(100.0, tf.float64)
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2.0
        rows, cols = grid(middle)
        fits = rows * cols <= budget
        low, high = tf.where(fits, middle, low), tf.where(fits, high, middle)
    return tf.cast(tf.stack(grid(low)), tf.int32)


def patchify(image, patch_size):
    """`(rows * P, cols * P, C)` -> `(rows * cols, P * P * C)`: patches in row-major order, each
    flattened as (row, column, channel), as timm's `batch_patchify` and transformers' Siglip2."""
    image = np.asarray(image)
    height, width, channels = image.shape
    if height % patch_size or width % patch_size:
        raise ArgumentError(f"A {height}x{width} image is not whole {patch_size}-pixel patches.")
    rows, cols = height // patch_size, width // patch_size
    patches = image.reshape(rows, patch_size, cols, patch_size, channels).transpose(0, 2, 1, 3, 4)
    return patches.reshape(rows * cols, patch_size * patch_size * channels)


def batch_patches(images, patch_size):
    """A `(batch, H, W, C)` tensor of images of one size, whole patches, already normalised ->
    the model's inputs, in the graph: each image's patches as `patchify` cuts them, none of
    them padding (the budget is the grid), and the grid. What `train` feeds a NaFlex model:
    its pipeline's batches are of one size, so packing needs no resize."""
    import tensorflow as tf

    height, width, channels = images.shape[1:]
    if height is None or width is None or height % patch_size or width % patch_size:
        raise ArgumentError(f"A {height}x{width} image is not whole {patch_size}-pixel patches.")
    rows, cols = height // patch_size, width // patch_size
    grid = tf.tile(tf.constant([[rows, cols]], tf.int32), (tf.shape(images)[0], 1))
    return {PATCHES: _graph_patchify(images, rows, cols, patch_size), GRID: grid}


def _graph_patchify(images, rows, cols, patch_size):
    """`patchify` of each image as TensorFlow ops: `(batch, rows * P, cols * P, C)` ->
    `(batch, rows * cols, P * P * C)`; `rows` and `cols` may be tensors."""
    import tensorflow as tf

    channels = images.shape[-1]
    patches = tf.reshape(images, (-1, rows, patch_size, cols, patch_size, channels))
    return tf.reshape(tf.transpose(patches, (0, 1, 3, 2, 4, 5)),
                      (-1, rows * cols, patch_size * patch_size * channels))


def one_size_inputs(model):
    """A function from a batch of normalised images of one size (a TensorFlow tensor) to what
    `model` takes: the images, or for a NaFlex model their patches and grid (`batch_patches`).
    What feeds a NaFlex model images of one size: train's batches, and the exports whose
    files take one size (TFLite, ONNX, OpenVINO, LiteRT) with their agreement checks."""
    from keras_vit.models.image_size import naflex_layout

    layout = naflex_layout(model)
    if layout is None:
        return lambda images: images
    return lambda images: batch_patches(images, layout[0])


def pack(images, patch_size, max_tokens):
    """Images already at their `sequence_grid` sizes -> the model's inputs: every image's
    patches then zeros up to `max_tokens`, and each image's (rows, cols)."""
    if not images:
        raise ArgumentError("pack needs at least one image.")
    patched = [patchify(image, patch_size) for image in images]
    longest = max(len(p) for p in patched)
    if longest > max_tokens:
        raise ArgumentError(f"An image has {longest} patches, more than max_tokens={max_tokens}.")
    patches = np.zeros((len(images), max_tokens, patched[0].shape[1]), np.float32)
    for i, p in enumerate(patched):
        patches[i, :len(p)] = p
    grid = np.asarray([(image.shape[0] // patch_size, image.shape[1] // patch_size)
                       for image in images], np.int32)
    return {PATCHES: patches, GRID: grid}


def packed_image(image, patch_size, max_tokens, to_input, preprocessing=None):
    """One decoded `(H, W, C)` image (a TensorFlow tensor, [0, 255]) -> {"patches" (max_tokens,
    P * P * C), "grid" (2,)}: resized whole to its `sequence_grid` in the interpolation of the
    model's `preprocessing` record (its source's: timm's bicubic, transformers' bilinear, both
    antialiased; keras_vit.preprocessing_record.stretch_to), or bilinear without antialiasing
    where it has none; normalised by `to_input`, cut into patches, padded with zeros."""
    import tensorflow as tf

    from keras_vit.preprocessing_record import OFFICIAL_PREPROCESSING, stretch_to

    shape = tf.shape(image)
    grid = graph_sequence_grid(shape[0], shape[1], patch_size, max_tokens)
    channels = image.shape[-1]
    pixels = to_input(stretch_to(image, (grid[0] * patch_size, grid[1] * patch_size),
                                 preprocessing or OFFICIAL_PREPROCESSING))
    patches = _graph_patchify(pixels[None], grid[0], grid[1], patch_size)[0]
    patches = tf.pad(patches, [[0, max_tokens - tf.shape(patches)[0]], [0, 0]])
    return {PATCHES: tf.ensure_shape(patches, (max_tokens, patch_size * patch_size * channels)),
            GRID: grid}


def packed_pixels(pixels, patch_size, max_tokens, to_input, preprocessing=None):
    """A `(batch, H, W, C)` tensor of pixels in [0, 255] -> the model's inputs, each image packed
    by `packed_image` (one batch of one size; their grids are equal), in the graph."""
    import tensorflow as tf

    return tf.map_fn(lambda image: packed_image(image, patch_size, max_tokens, to_input,
                                                preprocessing),
                     pixels, fn_output_signature=_packed_spec(patch_size, max_tokens,
                                                              pixels.shape[-1]))


def packed_image_files(image_bytes, patch_size, max_tokens, to_input, max_pixels,
                       preprocessing=None, channels=3):
    """A `(batch,)` string tensor of encoded images of any sizes -> the model's inputs, each
    decoded (keras_vit.preprocessing.decode_image, `max_pixels` checked before decoding) and
    packed at its own aspect ratio by `packed_image`, in the graph."""
    import tensorflow as tf

    from keras_vit.preprocessing import decode_image

    def one(data):
        image = decode_image(data, channels, max_pixels)
        return packed_image(tf.cast(image, tf.float32), patch_size, max_tokens, to_input,
                            preprocessing)

    return tf.map_fn(one, image_bytes,
                     fn_output_signature=_packed_spec(patch_size, max_tokens, channels))


def _packed_spec(patch_size, max_tokens, channels):
    import tensorflow as tf

    return {PATCHES: tf.TensorSpec((max_tokens, patch_size * patch_size * channels), tf.float32),
            GRID: tf.TensorSpec((2,), tf.int32)}


def stack_packed(rows):
    """A list of `packed_image` results (as NumPy) -> one batch of the model's inputs."""
    return {key: np.stack([row[key] for row in rows]) for key in (PATCHES, GRID)}
