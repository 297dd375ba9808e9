"""The resizes the sources apply to learned grids, each as a matrix built with keras.ops.

A separable resize of a grid is `rows @ x @ columns.T`, one `(size_out, size_in)` matrix per
axis; `resize_matrix(size_in, size_out, method)` builds it for each library's resize:

- "linear": the official `interpolate_posembed`, scipy's corner-aligned zoom of order 1
  (vit_jax, big_vision's `resample_posemb`).
- "bilinear": torch's `F.interpolate(mode="bilinear", antialias=False, align_corners=False)`,
  which is also `tf.image.resize(method="bilinear")` and jax's "linear" without antialiasing:
  half-pixel centres, the edges clamped. big_vision's FlexiViT `resample_patchemb` and timm's
  FlexiViT loading resize with it.
- "bicubic": torch's bicubic with `antialias=True` (timm's `resample_abs_pos_embed` and
  `resample_patch_embed` defaults, transformers' DINOv2 with registers). torch's kernel is then
  Pillow's: Keys cubic with a = -0.5, widened by the scale when shrinking, cut at the edges and
  renormalised.
- "torch_bicubic": torch's bicubic without antialiasing (transformers' ViT, DeiT, DINOv2,
  SigLIP and CLIP `interpolate_pos_encoding`): Keys cubic with a = -0.75 on four taps, the tap
  indices clamped to the edges.
- "keras_bicubic": `keras.ops.image.resize(interpolation="bicubic")` on TensorFlow (keras-hub's
  DINOv2 resize), TensorFlow's ResizeBicubic: Keys cubic with a = -0.5 on four taps, read from
  a table at 1/1024 steps of the offset, taps past the edges dropped and the rest renormalised.
  "keras_bicubic_antialias" (`antialias=True`, TensorFlow's scale_and_translate) is the same
  kernel as torch's antialiased one, so the "bicubic" matrix.
"""

from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["RESIZE_METHODS", "resize_matrix", "bicubic_resize_matrix"]

RESIZE_METHODS = ("linear", "bilinear", "bicubic", "torch_bicubic", "keras_bicubic",
                  "keras_bicubic_antialias")
_TF_CUBIC_TABLE = 1024  # TensorFlow's ResizeBicubic reads its weights from a table this fine


def _keys_cubic(x, a):
    x = ops.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return ops.where(x < 1.0, near, ops.where(x < 2.0, far, ops.zeros_like(x)))


def _tent(x):
    return ops.maximum(1.0 - ops.abs(x), 0.0)


def antialiased_weights(centre, scale, size_in, kernel, dtype="float32"):
    """Weights `(..., size_in)` of outputs at source coordinates `centre` (any shape, torch's
    align_corners=False) of a resize by `scale` (input over output size, broadcastable to
    `centre`) with torch's antialiased `kernel`, "cubic" (Keys, a=-0.5) or "tent" (bilinear).
    Shrinking widens the kernel by the scale (the antialiasing); growing keeps it. Taps past
    the edges are dropped and the rest renormalised, as Pillow and torch do; an output with no
    tap inside (past a NaFlex image's grid) gets all zeros."""
    sources = ops.cast(ops.arange(size_in), dtype)
    stretch = ops.maximum(ops.cast(scale, dtype), ops.cast(1.0, dtype))
    if len(ops.shape(stretch)):
        stretch = stretch[..., None]
    distance = (sources - ops.cast(centre, dtype)[..., None]) / stretch
    weights = _keys_cubic(distance, -0.5) if kernel == "cubic" else _tent(distance)
    total = ops.sum(weights, axis=-1, keepdims=True)
    return weights / ops.where(total != 0, total, ops.ones_like(total))


def resize_matrix(size_in, size_out, method="bicubic", dtype="float32"):
    """The `(size_out, size_in)` matrix of `method`'s resize of one axis (`RESIZE_METHODS`).
    `size_in` is an int; `size_out` an int or a scalar tensor (the grid of an image only known
    at call time)."""
    if method not in RESIZE_METHODS:
        raise ArgumentError(f"method must be one of {', '.join(RESIZE_METHODS)}, got {method!r}.")
    n_in, n_out = ops.cast(size_in, dtype), ops.cast(size_out, dtype)
    outputs = ops.cast(ops.arange(size_out), dtype)
    sources = ops.cast(ops.arange(size_in), dtype)
    if method == "linear":
        # Output i samples (n_in - 1) / (n_out - 1) * i; one output samples the first input.
        position = outputs * (n_in - 1.0) / ops.maximum(n_out - 1.0, 1.0)
        return _tent(sources[None, :] - position[:, None])
    scale = n_in / n_out
    centre = (outputs + 0.5) * scale - 0.5  # torch's align_corners=False source coordinate
    if method == "bilinear":
        centre = ops.clip(centre, 0.0, n_in - 1.0)
        return _tent(sources[None, :] - centre[:, None])
    if method in ("bicubic", "keras_bicubic_antialias"):
        return antialiased_weights(centre, scale, size_in, "cubic", dtype)
    # Four taps around floor(centre). torch clamps each index into the axis, so an edge input
    # collects the weights of the taps past it; TensorFlow drops those taps and renormalises.
    floor = ops.floor(centre)
    offset = centre - floor
    if method == "keras_bicubic":
        offset = ops.round(offset * _TF_CUBIC_TABLE) / _TF_CUBIC_TABLE
    matrix = 0.0
    for tap in (-1, 0, 1, 2):
        index = floor + tap
        weight = _keys_cubic(offset - tap, -0.75 if method == "torch_bicubic" else -0.5)
        if method == "keras_bicubic":
            weight = ops.where((index >= 0) & (index < n_in), weight, ops.zeros_like(weight))
        index = ops.cast(ops.clip(index, 0, size_in - 1), "int32")
        matrix = matrix + ops.one_hot(index, size_in, dtype=dtype) * weight[:, None]
    if method == "keras_bicubic":
        matrix = matrix / ops.sum(matrix, axis=1, keepdims=True)
    return matrix


def bicubic_resize_matrix(size_in, size_out, dtype="float32"):
    """`resize_matrix(..., "bicubic")`: torch's antialiased bicubic, what timm resizes with."""
    return resize_matrix(size_in, size_out, "bicubic", dtype)
