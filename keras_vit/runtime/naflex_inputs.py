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

__all__ = ["SEQUENCE_BUDGETS", "sequence_grid", "patchify", "pack", "packed_image",
           "stack_packed"]

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
    grid = tf.numpy_function(
        lambda h, w: np.asarray(sequence_grid(int(h), int(w), patch_size, max_tokens), np.int32),
        [shape[0], shape[1]], tf.int32, stateful=False)
    grid = tf.ensure_shape(grid, (2,))
    channels = image.shape[-1]
    pixels = to_input(stretch_to(image, (grid[0] * patch_size, grid[1] * patch_size),
                                 preprocessing or OFFICIAL_PREPROCESSING))
    patches = tf.reshape(pixels, (grid[0], patch_size, grid[1], patch_size, channels))
    patches = tf.reshape(tf.transpose(patches, (0, 2, 1, 3, 4)),
                         (-1, patch_size * patch_size * channels))
    patches = tf.pad(patches, [[0, max_tokens - tf.shape(patches)[0]], [0, 0]])
    return {PATCHES: tf.ensure_shape(patches, (max_tokens, patch_size * patch_size * channels)),
            GRID: grid}


def stack_packed(rows):
    """A list of `packed_image` results (as NumPy) -> one batch of the model's inputs."""
    return {key: np.stack([row[key] for row in rows]) for key in (PATCHES, GRID)}
