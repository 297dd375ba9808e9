"""PatchEncoder: cut an image into P x P patches and project each to width D."""

import keras
from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["PatchEncoder"]


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """A P x P, stride-P convolution flattened to a token sequence.

    Input `(batch, height, width, channels)`; output `(batch, (height // P) *
    (width // P), width)`, tokens in row-major grid order. The kernel is HWIO,
    the official `embedding/kernel` layout, so it loads without a transpose.

    `input_normalization`, ((mean,) * 3, (std,) * 3) or None for the official [-1, 1],
    records what the weights expect of their input (keras_vit.normalization); it changes
    no computation. `use_bias=False` leaves the bias out (OpenAI CLIP's patch embedding).
    """

    def __init__(self, hidden_size, patch_size, kernel_initializer="lecun_normal",
                 bias_initializer="zeros", input_normalization=None, use_bias=True, **kwargs):
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
        x = ops.conv(images, ops.cast(self.kernel, images.dtype), strides=self.patch_size,
                     padding="valid")
        if self.bias is not None:
            x = x + ops.cast(self.bias, x.dtype)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], self.hidden_size))

    def compute_output_shape(self, input_shape):
        h, w = input_shape[1], input_shape[2]
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
        }
