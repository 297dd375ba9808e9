"""PatchEncoder: cut an image into P x P patches and project each to width D; and
`resample_patch_embedding`, its kernel moved to another patch size."""

import numbers

import keras
import numpy as np
from keras import ops

from keras_vit.errors import ArgumentError
from keras_vit.layers.interpolation import RESIZE_METHODS, resize_matrix

__all__ = ["PatchEncoder", "resample_patch_embedding"]


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """A P x P, stride-P convolution flattened to a token sequence.

    Input `(batch, height, width, channels)`; output `(batch, (height // P) *
    (width // P), width)`, tokens in row-major grid order. The kernel is HWIO,
    the official `embedding/kernel` layout, so it loads without a transpose.

    `input_normalization`, ((mean,) * 3, (std,) * 3) or None for the official [-1, 1],
    records what the weights expect of their input (keras_vit.normalization), and
    `input_preprocessing` (a dict, keras_vit.preprocessing_record; None: the official resize)
    how their source resizes an image to the model's size; neither changes any computation.
    `use_bias=False` leaves the bias out (OpenAI CLIP's patch embedding).

    `flatten=False` returns the grid `(batch, rows, cols, width)` instead, whose shape tells
    `AddPositionEmbedding` the grid of an image whose size is only known at call time.
    `pad=True` first pads the bottom and right with zeros to a multiple of P, as timm's
    `dynamic_img_pad`; without it the last height % P rows (width % P columns) are not seen.
    """

    def __init__(self, hidden_size, patch_size, kernel_initializer="lecun_normal",
                 bias_initializer="zeros", input_normalization=None, use_bias=True, flatten=True, pad=False,
                 input_preprocessing=None, **kwargs):
        super().__init__(**kwargs)
        if hidden_size <= 0 or patch_size <= 0:
            raise ArgumentError(f"hidden_size and patch_size must be positive, got "
                                f"{hidden_size} and {patch_size}.")
        self.hidden_size = hidden_size
        self.patch_size = patch_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.use_bias = bool(use_bias)
        self.input_normalization = (None if input_normalization is None else
                                    [[float(v) for v in part] for part in input_normalization])
        self.flatten = bool(flatten)
        self.pad = bool(pad)
        self.input_preprocessing = None if input_preprocessing is None else dict(input_preprocessing)

    def build(self, input_shape):
        channels = input_shape[-1]
        p = self.patch_size
        self.kernel = self.add_weight(name="kernel", shape=(p, p, channels, self.hidden_size),
                                      initializer=self.kernel_initializer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.hidden_size,),
                                        initializer=self.bias_initializer)

    def call(self, images):
        if self.pad:
            p, shape = self.patch_size, ops.shape(images)
            images = ops.pad(images, [[0, 0], [0, (p - shape[1] % p) % p],
                                      [0, (p - shape[2] % p) % p], [0, 0]])
        x = ops.conv(images, ops.cast(self.kernel, images.dtype), strides=self.patch_size,
                     padding="valid")
        if self.bias is not None:
            x = x + ops.cast(self.bias, x.dtype)
        if not self.flatten:
            return x
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], self.hidden_size))

    def compute_output_shape(self, input_shape):
        h, w = input_shape[1], input_shape[2]
        p = self.patch_size
        if not self.flatten:
            rows, cols = ((None if s is None else -(-s // p) if self.pad else s // p)
                          for s in (h, w))
            return (input_shape[0], rows, cols, self.hidden_size)
        if self.pad:
            h, w = (None if s is None else -(-s // p) * p for s in (h, w))
        tokens = None if h is None or w is None else (h // self.patch_size) * (w // self.patch_size)
        return (input_shape[0], tokens, self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "patch_size": self.patch_size,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "input_normalization": self.input_normalization,
            "use_bias": self.use_bias,
            "flatten": self.flatten,
            "pad": self.pad,
            "input_preprocessing": self.input_preprocessing,
        }


def resample_patch_embedding(kernel, new_patch_size, method="bilinear"):
    """A patch-embedding kernel `(P, P, channels, width)` moved to `new_patch_size`.

    FlexiViT's pseudo-inverse resize: the kernel k' for which a patch resized to the new size
    by `method` gives what k gives on the original, <resize(x), k'> = <x, k>, in the
    least-squares sense: k' = pinv(R^T) k for the resize matrix R. By default "bilinear"
    (no antialiasing), the paper's and big_vision's `resample_patchemb`, which timm's FlexiViT
    models load with; "bicubic" is timm's `resample_patch_embed` defaults (torch's
    antialiased bicubic), "torch_bicubic" and "linear" the other resizes of
    `keras_vit.layers.interpolation`. `new_patch_size` is an int or (height, width). NumPy;
    returns an array of the kernel's dtype, the kernel itself when the size is unchanged.
    """
    kernel = np.asarray(kernel)
    if kernel.ndim != 4:
        raise ArgumentError(f"A patch-embedding kernel has shape (height, width, channels, "
                            f"width), got {kernel.shape}.")
    pair = new_patch_size if isinstance(new_patch_size, (tuple, list)) else (new_patch_size,) * 2
    if len(pair) != 2 or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Integral)
                             or s <= 0 for s in pair):
        raise ArgumentError(f"new_patch_size must be a positive int or (height, width) of ints, "
                            f"got {new_patch_size!r}.")
    if method not in RESIZE_METHODS:
        raise ArgumentError(f"method must be one of {', '.join(RESIZE_METHODS)}, got {method!r}.")
    old, new = kernel.shape[:2], tuple(int(s) for s in pair)
    if old == new:
        return kernel
    # R = rows (x) columns on row-major flattened patches, so pinv(R) = pinv(rows) (x) pinv(cols).
    rows, cols = (np.asarray(ops.convert_to_numpy(resize_matrix(o, n, method, "float64")))
                  for o, n in zip(old, new))
    inverse = np.kron(np.linalg.pinv(rows), np.linalg.pinv(cols))  # (old_total, new_total)
    flat = kernel.reshape(old[0] * old[1], -1).astype(np.float64)
    return (inverse.T @ flat).reshape(*new, *kernel.shape[2:]).astype(kernel.dtype)
