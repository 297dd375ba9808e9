"""RotaryPositionEmbedding: 2-D rotary position embedding of queries and keys (DINOv3, EVA-02).

Each head's features are rotated by angles that grow with the token's row and column, so the
attention's scores depend on the tokens' relative positions. Half of each head's frequencies
follow the row, half the column (timm's axial RoPE). The two styles differ where timm's
modules do:

- "dinov3" (`RotaryEmbeddingDinoV3`): coordinates at the patch centres, scaled to [-1, 1]
  per axis; angle `2 pi x / T^(k / n)`, T = 100; the "rotate half" layout (feature j pairs
  with j + head_dim / 2).
- "eva" (`RotaryEmbeddingCat`, EVA-02): coordinates are the patch indices, scaled onto the
  trained grid (`reference_grid`: index * reference / rows); angle `x / T^(k / n)`,
  T = 10000; the interleaved layout (feature 2j pairs with 2j + 1).

n = head_dim / 4 frequencies per axis, k = 0 .. n - 1. The prefix tokens (class, registers)
come first and are not rotated. Two options of timm's grid (`_build_grid`), which the
Perception Encoder sets: `grid_offset` is added to each patch index before the style's scaling
(PE: 1), and `grid_indexing="xy"` gives the first n frequencies to the column, the next to the
row (timm's default "ij": row first).
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["RotaryPositionEmbedding", "ROPE_STYLES", "GRID_INDEXINGS"]

# style -> (temperature, coordinates, feature layout), as timm builds each.
ROPE_STYLES = {"dinov3": (100.0, "centred", "half"), "eva": (10000.0, "index", "interleaved")}
# Which axis takes the first half of the frequencies: "ij" the row, "xy" the column (torch's
# meshgrid indexing, as timm names it).
GRID_INDEXINGS = ("ij", "xy")


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryPositionEmbedding(keras.layers.Layer):
    """Rotates `(batch, tokens, heads, head_dim)` queries or keys by their patch's position.

    `call(x, grid_shape=None)`: `grid_shape` is the patch grid's (rows, columns), Python ints
    or scalar tensors; None takes a square grid from the token count. The first
    `num_prefix_tokens` tokens pass unchanged. The angles are computed in float32 whatever
    the policy, as timm computes them; the rotation is cast back to the input's dtype.
    `grid_offset` (patches, added to each index) and `grid_indexing` ("ij" or "xy") are
    timm's grid options of the same names.
    """

    def __init__(self, style="dinov3", num_prefix_tokens=0, reference_grid=None, grid_offset=0.0,
                 grid_indexing="ij", **kwargs):
        super().__init__(**kwargs)
        if style not in ROPE_STYLES:
            raise ArgumentError(f"RoPE style must be one of {sorted(ROPE_STYLES)}; got {style!r}.")
        if reference_grid is not None and style != "eva":
            raise ArgumentError("reference_grid rescales EVA's index coordinates; the "
                                f"{style!r} style normalises its own.")
        if grid_indexing not in GRID_INDEXINGS:
            raise ArgumentError(f"RoPE grid_indexing must be one of {', '.join(GRID_INDEXINGS)}; "
                                f"got {grid_indexing!r}.")
        if isinstance(grid_offset, bool) or not isinstance(grid_offset, (int, float)) \
                or not math.isfinite(grid_offset):
            raise ArgumentError(f"RoPE grid_offset must be a finite number; got {grid_offset!r}.")
        self.style = style
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.reference_grid = None if reference_grid is None else int(reference_grid)
        self.grid_offset = float(grid_offset)
        self.grid_indexing = grid_indexing

    def build(self, input_shape):
        head_dim = input_shape[-1]
        if head_dim is None or head_dim % 4:
            raise ArgumentError(f"2-D RoPE needs a head width divisible by 4; got {head_dim}.")
        temperature, _, _ = ROPE_STYLES[self.style]
        count = head_dim // 4
        # float32 as timm: T ** (k / n) with k / n rounded to float32 first.
        exponents = np.arange(count, dtype=np.float32) / np.float32(count)
        powers = np.float32(temperature) ** exponents
        if self.style == "dinov3":  # angle = (2 pi x) / period
            self._inverse = None
            self._periods = powers.astype(np.float32)
        else:  # angle = x * band
            self._inverse = (np.float32(1.0) / powers).astype(np.float32)
            self._periods = None

    def _axis_angles(self, size):
        """(size, n) float32 angles of one axis of `size` patches."""
        index = ops.cast(ops.arange(size), "float32") + self.grid_offset
        length = ops.cast(size, "float32")
        if self.style == "dinov3":
            coordinate = 2.0 * ((index + 0.5) / length) - 1.0
            return (2.0 * math.pi * coordinate[:, None]) / ops.convert_to_tensor(self._periods)[None]
        if self.reference_grid is not None:  # EVA: the grid stretched onto the trained one
            index = index / length * float(self.reference_grid)
        return index[:, None] * ops.convert_to_tensor(self._inverse)[None]

    def sin_cos(self, rows, cols):
        """(sin, cos), each `(rows * cols, head_dim)` float32, in the style's layout."""
        row, col = self._axis_angles(rows), self._axis_angles(cols)
        count = row.shape[-1]
        row = ops.broadcast_to(row[:, None, :], (rows, cols, count))
        col = ops.broadcast_to(col[None, :, :], (rows, cols, count))
        first, second = (row, col) if self.grid_indexing == "ij" else (col, row)
        angles = ops.reshape(ops.concatenate([first, second], axis=-1), (-1, 2 * count))
        sin, cos = ops.sin(angles), ops.cos(angles)
        if ROPE_STYLES[self.style][2] == "half":
            return ops.concatenate([sin, sin], axis=-1), ops.concatenate([cos, cos], axis=-1)
        return _interleave(sin), _interleave(cos)

    def call(self, x, grid_shape=None):
        prefix = self.num_prefix_tokens
        if grid_shape is None:
            patches = ops.shape(x)[1] - prefix
            side = patches if isinstance(patches, int) else ops.cast(patches, "float32")
            side = math.isqrt(side) if isinstance(side, int) else \
                ops.cast(ops.round(ops.sqrt(side)), "int32")
            grid_shape = (side, side)
        sin, cos = self.sin_cos(*grid_shape)
        sin, cos = sin[:, None, :], cos[:, None, :]  # over the heads
        patches = ops.cast(x[:, prefix:], "float32")
        rotated = patches * cos + self._rotate(patches) * sin
        rotated = ops.cast(rotated, x.dtype)
        return ops.concatenate([x[:, :prefix], rotated], axis=1) if prefix else rotated

    def _rotate(self, x):
        """The partner of each feature, negated where the rotation subtracts it."""
        if ROPE_STYLES[self.style][2] == "half":  # [x1, x2] -> [-x2, x1]
            first, second = ops.split(x, 2, axis=-1)
            return ops.concatenate([-second, first], axis=-1)
        shape = ops.shape(x)
        pairs = ops.reshape(x, (*shape[:-1], x.shape[-1] // 2, 2))  # [x0 x1 x2 x3] -> [-x1 x0 -x3 x2]
        return ops.reshape(ops.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "style": self.style,
                "num_prefix_tokens": self.num_prefix_tokens, "reference_grid": self.reference_grid,
                "grid_offset": self.grid_offset, "grid_indexing": self.grid_indexing}


def _interleave(x):
    """(n, k) -> (n, 2k): each column twice in a row, as torch's repeat_interleave(2, -1)."""
    return ops.reshape(ops.stack([x, x], axis=-1), (ops.shape(x)[0], 2 * x.shape[-1]))
