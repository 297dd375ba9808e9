"""NaFlex's token input (SigLIP 2 NaFlex): patches of each image at its own (rows, cols) grid,
packed into a fixed number of tokens, the rest padding.

A batch is `patches` `(batch, tokens, P * P * C)`, each image's patches in row-major order
and flattened as (row, column, channel) within the patch (timm's `batch_patchify`,
transformers' Siglip2 image processor), then zeros; and `grid` `(batch, 2)`, each image's
(rows, cols). Token `t` of an image is a patch exactly when `t < rows * cols`
(`PatchValidity`, 1 or 0); the attention and the MAP head never attend to the others.
"""

import keras
import numpy as np
from keras import ops

from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError
from keras_vit.layers.interpolation import antialiased_weights

__all__ = ["NaFlexPatchEmbedding", "NaFlexPositionEmbedding", "PatchValidity", "masked_scores"]


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexPatchEmbedding(keras.layers.Layer):
    """`(batch, tokens, P * P * C) -> (batch, tokens, D)`: one Dense on each flattened patch.

    The kernel is kept as a patch convolution's, `(P, P, C, D)` (the official
    `embedding/kernel`): a stride-P convolution and this Dense compute the same function,
    so one set of weights serves both, and the checkpoint layout is the plain ViT's.
    `input_preprocessing`, as `PatchEncoder`'s, records how the weights' source resizes an
    image (here: to its grid before packing); it changes nothing the layer computes.
    """

    def __init__(self, width, patch_size, channels=3, input_preprocessing=None, **kwargs):
        super().__init__(**kwargs)
        self.width = positive_int(width, "width")
        self.patch_size = positive_int(patch_size, "patch_size")
        self.channels = positive_int(channels, "channels")
        self.input_preprocessing = None if input_preprocessing is None else \
            dict(input_preprocessing)

    def build(self, input_shape):
        p, c = self.patch_size, self.channels
        if input_shape[-1] is not None and input_shape[-1] != p * p * c:
            raise ArgumentError(f"NaFlexPatchEmbedding takes {p}x{p}x{c} = {p * p * c} values a "
                                f"patch, got {input_shape[-1]}.")
        self.kernel = self.add_weight(name="kernel", shape=(p, p, c, self.width),
                                      initializer="glorot_uniform")
        self.bias = self.add_weight(name="bias", shape=(self.width,), initializer="zeros")

    def call(self, patches):
        kernel = ops.reshape(ops.cast(self.kernel, patches.dtype), (-1, self.width))
        return ops.add(ops.matmul(patches, kernel), ops.cast(self.bias, patches.dtype))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.width)

    def get_config(self):
        return {**super().get_config(), "width": self.width, "patch_size": self.patch_size,
                "channels": self.channels, "input_preprocessing": self.input_preprocessing}


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchValidity(keras.layers.Layer):
    """`(tokens (batch, n, D), grid (batch, 2)) -> (batch, n)`: 1 where token `t` is a patch
    (`t < rows * cols`), 0 for padding; `grid` None: every token a patch."""

    def call(self, tokens, grid=None):
        if grid is None:
            return ops.ones_like(tokens[..., 0])
        index = ops.arange(ops.shape(tokens)[1], dtype="int32")[None, :]
        count = ops.prod(ops.cast(grid, "int32"), axis=-1)
        return ops.cast(index < count[:, None], self.compute_dtype)

    def compute_output_spec(self, tokens, grid=None):
        return keras.KerasTensor(tokens.shape[:2], dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexPositionEmbedding(keras.layers.Layer):
    """`(tokens (batch, n, D), grid (batch, 2)) -> (batch, n, D)`: each image's patches plus
    the stored square position grid resized to that image's (rows, cols).

    The resize is torch's bilinear with antialiasing (`F.interpolate(mode="bilinear",
    antialias=True, align_corners=False)`), as timm's NaFlexEmbeds and transformers'
    Siglip2VisionEmbeddings call it: a triangle filter widened by the scale when shrinking,
    its weights renormalised at the borders. Computed per token from its image's grid, so a
    batch of different grids is one call. Padding tokens get no position (zeros);
    `grid` None: every image at the stored grid. The weight is the official `pos_embedding`,
    `(1, rows * cols, D)` of `grid_size`.
    """

    def __init__(self, grid_size, initializer=None, **kwargs):
        super().__init__(**kwargs)
        rows, cols = (grid_size, grid_size) if isinstance(grid_size, int) else grid_size
        self.grid_size = (positive_int(rows, "grid_size"), positive_int(cols, "grid_size"))
        self.initializer = keras.initializers.get(
            initializer or keras.initializers.RandomNormal(stddev=0.02))
        # What the checkpoint loader reads and sets on a position embedding (loader.py).
        self.num_prefix_tokens = 0
        self.resize = "bilinear_antialias"

    def build(self, input_shape):
        self.pos_embedding = self.add_weight(
            name="pos_embedding", shape=(1, self.grid_size[0] * self.grid_size[1], input_shape[-1]),
            initializer=self.initializer)

    def call(self, tokens, grid=None):
        if grid is None:
            grid = ops.broadcast_to(ops.convert_to_tensor(self.grid_size, "int32")[None],
                                    (ops.shape(tokens)[0], 2))
        grid = ops.cast(grid, "int32")
        rows, cols = grid[:, :1], grid[:, 1:]  # (batch, 1) each
        index = ops.arange(ops.shape(tokens)[1], dtype="int32")[None, :]
        row_weights = _antialiased_bilinear(index // ops.maximum(cols, 1), rows, self.grid_size[0])
        col_weights = _antialiased_bilinear(index % ops.maximum(cols, 1), cols, self.grid_size[1])
        valid = ops.cast(index < rows * cols, "float32")[..., None, None]
        weights = row_weights[..., :, None] * col_weights[..., None, :] * valid  # (b, n, h, w)
        weights = ops.reshape(weights, (ops.shape(tokens)[0], ops.shape(tokens)[1], -1))
        positions = ops.matmul(weights, ops.cast(self.pos_embedding[0], "float32"))
        return tokens + ops.cast(positions, tokens.dtype)

    def compute_output_spec(self, tokens, grid=None):
        return keras.KerasTensor(tokens.shape, dtype=tokens.dtype)

    def get_config(self):
        return {**super().get_config(), "grid_size": list(self.grid_size),
                "initializer": keras.initializers.serialize(self.initializer)}


def _antialiased_bilinear(position, size, stored):
    """Weights `(batch, n, stored)` of output `position` (batch, n) on a `size` (batch, 1)
    long axis from a `stored`-long one: torch's antialiased bilinear, per image."""
    scale = stored / ops.cast(ops.maximum(size, 1), "float32")
    centre = scale * (ops.cast(position, "float32") + 0.5) - 0.5
    return antialiased_weights(centre, scale, stored, "tent")


def masked_scores(scores, valid):
    """float32 `scores` `(batch, heads, queries, keys)` with the keys not `valid` `(batch, keys)`
    (1 or 0) set to float32's lowest, so the softmax gives them no weight (timm's additive
    NaFlex mask, transformers' padding mask); `valid` None: the scores as they are. The
    attention (on its explicit path) and the MAP head apply it."""
    if valid is None:
        return scores
    valid = ops.cast(valid, "bool")[:, None, None, :]
    return ops.where(valid, scores, float(np.finfo(np.float32).min))
