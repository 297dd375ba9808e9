"""torch's antialiased bicubic resize along one axis, as a matrix built with keras.ops.

timm resizes with `F.interpolate(mode="bicubic", antialias=True, align_corners=False)`: the
patch-embedding pseudo-inverse (`resample_patch_embed`) and the position embedding at run time
(`resample_abs_pos_embed`, `dynamic_img_size=True`). With antialias, torch's kernel is Pillow's
(Keys cubic with a = -0.5, widened by the scale when shrinking, cut at the edges and
renormalised), not the a = -0.75, edge-clamped one of `antialias=False` nor TensorFlow's
`tf.image.resize(method="bicubic")`. A separable resize is then `rows @ x @ columns.T`.
"""

from keras import ops

__all__ = ["bicubic_resize_matrix"]

_A = -0.5  # Pillow's (and so torch's antialiased) cubic coefficient


def _cubic(x):
    x = ops.abs(x)
    near = ((_A + 2.0) * x - (_A + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * _A
    return ops.where(x < 1.0, near, ops.where(x < 2.0, far, ops.zeros_like(x)))


def bicubic_resize_matrix(size_in, size_out, dtype="float32"):
    """The `(size_out, size_in)` matrix of torch's antialiased bicubic resize of one axis
    (align_corners=False). `size_in` is an int; `size_out` an int or a scalar tensor (the
    grid of an image only known at call time)."""
    scale = ops.cast(size_in, dtype) / ops.cast(size_out, dtype)
    # Shrinking widens the kernel by the scale (the antialiasing); growing keeps it.
    stretch = ops.maximum(scale, ops.cast(1.0, dtype))
    centers = (ops.cast(ops.arange(size_out), dtype) + 0.5) * scale
    sources = ops.cast(ops.arange(size_in), dtype) + 0.5
    weights = _cubic((sources[None, :] - centers[:, None]) / stretch)
    # Taps past the edges are dropped and the rest renormalised, as Pillow and torch do.
    return weights / ops.sum(weights, axis=1, keepdims=True)
