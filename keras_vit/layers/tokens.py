"""ClassToken, PrefixTokens, AddPositionEmbedding, and the position-embedding resize."""

import keras
import numpy as np
from keras import ops

from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError
from keras_vit.layers.interpolation import RESIZE_METHODS, resize_matrix

__all__ = ["ClassToken", "PrefixTokens", "AddPositionEmbedding", "resize_position_embedding",
           "POSITION_RESIZES"]

# How a source's own code moves a position embedding to another grid (a checkpoint format
# records which: `CheckpointFormat.position_resize`, and the model keeps it in its
# `AddPositionEmbedding`'s config for the run-time resize). The matrix resizes of
# `keras_vit.layers.interpolation`: "linear" is the official `interpolate_posembed` (scipy's
# corner-aligned zoom, order 1); "bicubic" is timm's `resample_abs_pos_embed` (torch's
# antialiased bicubic), which timm applies to every file it loads at another size, DINOv2's
# 518-pixel ones among them, and at run time; "bilinear" (torch's, no antialiasing) is how timm
# loads FlexiViT files; "torch_bicubic" (no antialiasing) is transformers'
# `interpolate_pos_encoding`. "keras_bicubic" (and "keras_bicubic_antialias") is
# `keras.ops.image.resize(interpolation="bicubic")`, which keras-hub's DINOv2 applies when built
# at another size than its position embedding's (`DINOV2Embedding._interpolate_position_
# embeddings`): the same call, so the same values (TensorFlow's bicubic is not torch's).
POSITION_RESIZES = RESIZE_METHODS


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends one learned token: `(batch, n, D) -> (batch, n + 1, D)`."""

    def build(self, input_shape):
        self.cls = self.add_weight(name="cls", shape=(1, 1, input_shape[-1]),
                                   initializer="zeros")

    def call(self, tokens):
        cls = ops.cast(self.cls, tokens.dtype)
        cls = ops.broadcast_to(cls, (ops.shape(tokens)[0], 1, ops.shape(tokens)[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        n = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], n, input_shape[2])


@keras.saving.register_keras_serializable(package="keras_vit")
class PrefixTokens(keras.layers.Layer):
    """Prepends `num_tokens` learned tokens: `(batch, n, D) -> (batch, n + num_tokens, D)`.

    The class token's generalisation, for DeiT's distillation token (one) and DINOv2's
    register tokens (four). The tokens `(1, num_tokens, D)` start at zero, as timm's
    `dist_token` and `reg_token` are laid out; a model prepends these first, then its
    class token, so that the class token comes first (timm's order).
    """

    def __init__(self, num_tokens=1, **kwargs):
        super().__init__(**kwargs)
        self.num_tokens = positive_int(num_tokens, "num_tokens")

    def build(self, input_shape):
        self.tokens = self.add_weight(name="tokens", shape=(1, self.num_tokens, input_shape[-1]),
                                      initializer="zeros")

    def call(self, tokens):
        prefix = ops.cast(self.tokens, tokens.dtype)
        prefix = ops.broadcast_to(prefix, (ops.shape(tokens)[0], self.num_tokens,
                                           ops.shape(tokens)[-1]))
        return ops.concatenate([prefix, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        n = None if input_shape[1] is None else input_shape[1] + self.num_tokens
        return (input_shape[0], n, input_shape[2])

    def get_config(self):
        return {**super().get_config(), "num_tokens": self.num_tokens}


@keras.saving.register_keras_serializable(package="keras_vit")
class AddPositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding per position: prefix tokens, then a grid.

    `grid_size` is the (rows, columns) patch grid the embedding is laid out for;
    `num_prefix_tokens` is 1 with a class token and 0 without. The embedding has
    shape `(1, num_prefix_tokens + rows * columns, D)` - the official
    `pos_embedding`. To move learned values to another grid, pass them through
    `resize_position_embedding`, as checkpoint loading does.

    `dynamic_grid=True` takes images of any size: called as `layer(tokens, grid=patches)`,
    with `patches` the `(batch, rows, cols, D)` grid the tokens were flattened from, it
    resizes the stored grid to (rows, cols) inside the call by `resize` (one of
    `POSITION_RESIZES`: the resize of the library the weights came from, which loading sets;
    "bicubic", timm's `dynamic_img_size`, by default); the prefix tokens' embedding is kept.
    The stored grid is returned unchanged when the sizes agree.
    """

    def __init__(self, grid_size, num_prefix_tokens=1, initializer=None, dynamic_grid=False,
                 resize="bicubic", **kwargs):
        super().__init__(**kwargs)
        self.grid_size = _pair(grid_size, "grid_size")
        self.resize = _method(resize)
        if num_prefix_tokens < 0:
            raise ArgumentError(f"num_prefix_tokens must be >= 0, got {num_prefix_tokens}.")
        self.num_prefix_tokens = num_prefix_tokens
        self.dynamic_grid = bool(dynamic_grid)
        # The official initialiser: normal with stddev 0.02.
        self.initializer = keras.initializers.get(
            initializer or keras.initializers.RandomNormal(stddev=0.02))

    @property
    def num_positions(self):
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def build(self, input_shape):
        if input_shape[1] is not None and input_shape[1] != self.num_positions:
            raise ArgumentError(
                f"AddPositionEmbedding is laid out for {self.num_prefix_tokens} prefix token(s) "
                f"and a {self.grid_size[0]}x{self.grid_size[1]} grid ({self.num_positions} "
                f"tokens) but receives {input_shape[1]} tokens.")
        self.pos_embedding = self.add_weight(
            name="pos_embedding", shape=(1, self.num_positions, input_shape[-1]),
            initializer=self.initializer)

    def call(self, tokens, grid=None):
        if not self.dynamic_grid:
            return tokens + ops.cast(self.pos_embedding, tokens.dtype)
        if grid is None:
            raise ArgumentError("AddPositionEmbedding(dynamic_grid=True) needs the patch grid: "
                                "call it as layer(tokens, grid=patches).")
        shape = ops.shape(grid)
        return tokens + ops.cast(self._resized(shape[1], shape[2]), tokens.dtype)

    def _resized(self, rows, cols):
        """The embedding for a rows x cols grid, resized by `self.resize`."""
        embedding = ops.cast(self.pos_embedding, "float32")
        prefix, stored = embedding[:, :self.num_prefix_tokens], embedding[0, self.num_prefix_tokens:]
        stored = ops.reshape(stored, (*self.grid_size, -1))
        resized = ops.einsum("ih,jw,hwd->ijd",
                             resize_matrix(self.grid_size[0], rows, self.resize),
                             resize_matrix(self.grid_size[1], cols, self.resize), stored)
        resized = ops.reshape(resized, (1, rows * cols, ops.shape(stored)[-1]))
        return ops.concatenate([prefix, resized], axis=1)

    def compute_output_spec(self, tokens, grid=None):
        # The sum has the tokens' shape; tracing the resize would need the grid's size.
        return keras.KerasTensor(tokens.shape, dtype=tokens.dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "grid_size": list(self.grid_size),
            "num_prefix_tokens": self.num_prefix_tokens,
            "initializer": keras.initializers.serialize(self.initializer),
            "dynamic_grid": self.dynamic_grid,
            "resize": self.resize,
        }


def resize_position_embedding(pos_embedding, old_grid, new_grid, num_prefix_tokens=1,
                              method="linear"):
    """Resizes a `(1, prefix + h * w, D)` position embedding to another grid.

    Prefix (class, register) tokens are kept as they are; the grid part is resized with
    separate row and column factors, so rectangular grids work. `method="linear"` is the
    official `interpolate_posembed`: corner-aligned bilinear interpolation, equal to
    `scipy.ndimage.zoom(order=1)`. `method="bicubic"` is timm's `resample_abs_pos_embed`
    (torch's antialiased bicubic), "bilinear" timm's FlexiViT loading (torch's bilinear, no
    antialiasing), "torch_bicubic" transformers' `interpolate_pos_encoding` (torch's bicubic,
    no antialiasing). `method="keras_bicubic"` (or "keras_bicubic_antialias") is keras-hub's
    DINOv2 resize, `keras.ops.image.resize` on TensorFlow. Returns a new NumPy array of the
    input's dtype.
    """
    pos_embedding = np.asarray(pos_embedding)
    old_grid, new_grid = _pair(old_grid, "old_grid"), _pair(new_grid, "new_grid")
    method = _method(method)
    if pos_embedding.ndim != 3 or pos_embedding.shape[0] != 1:
        raise ArgumentError(f"A position embedding has shape (1, tokens, D), got {pos_embedding.shape}.")
    expected = num_prefix_tokens + old_grid[0] * old_grid[1]
    if pos_embedding.shape[1] != expected:
        raise ArgumentError(
            f"A {old_grid[0]}x{old_grid[1]} grid with {num_prefix_tokens} prefix token(s) needs "
            f"{expected} positions, but the embedding has {pos_embedding.shape[1]}.")
    prefix = pos_embedding[:, :num_prefix_tokens]
    grid = pos_embedding[0, num_prefix_tokens:].reshape(*old_grid, -1)
    if old_grid != new_grid:
        rows, cols = (np.asarray(ops.convert_to_numpy(resize_matrix(old, new, method, "float64")))
                      for old, new in zip(old_grid, new_grid))  # (new, old) each
        # Computed in float64 so the result matches scipy's zoom (and torch) to rounding.
        grid = np.einsum("ih,jw,hwd->ijd", rows, cols, grid.astype(np.float64))
    grid = grid.reshape(1, new_grid[0] * new_grid[1], -1).astype(pos_embedding.dtype)
    return np.concatenate([prefix, grid], axis=1)


def _method(method):
    if method not in POSITION_RESIZES:
        raise ArgumentError(f"method must be one of {', '.join(POSITION_RESIZES)}, got {method!r}.")
    return method


def _pair(value, what):
    if isinstance(value, int):
        value = (value, value)
    value = tuple(int(v) for v in value)
    if len(value) != 2 or min(value) <= 0:
        raise ArgumentError(f"{what} must be a positive int or (rows, columns), got {value}.")
    return value
