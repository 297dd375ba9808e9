"""TokenPooling: the encoder's token sequence reduced to one feature vector."""

import keras
from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["TokenPooling"]


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """`(batch, n, D) -> (batch, D)`: the class token, or the mean or maximum of the patch tokens.

    "max" is the `pooling="max"` of keras.applications (per feature, over the patches);
    no official checkpoint was trained with it, so it is for feature extraction.
    "distillation" is the second token, DeiT's distillation token.
    """

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if mode not in ("token", "gap", "max", "distillation"):
            raise ArgumentError(f'mode must be "token", "gap", "max" or "distillation", got {mode!r}.')
        if mode == "token" and num_prefix_tokens < 1:
            raise ArgumentError('mode="token" needs a class token (num_prefix_tokens >= 1).')
        if mode == "distillation" and num_prefix_tokens < 2:
            raise ArgumentError('mode="distillation" needs a class and a distillation token '
                                '(num_prefix_tokens >= 2).')
        self.mode = mode
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, tokens):
        if self.mode == "token":
            return tokens[:, 0]
        if self.mode == "distillation":
            return tokens[:, 1]
        if self.mode == "max":
            return ops.max(tokens[:, self.num_prefix_tokens:], axis=1)
        return ops.mean(tokens[:, self.num_prefix_tokens:], axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode,
                "num_prefix_tokens": self.num_prefix_tokens}
