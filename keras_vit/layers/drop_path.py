"""DropPath: stochastic depth, a residual branch dropped for whole examples at a time."""

import keras
from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["DropPath"]


@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Zeroes a residual branch's output for a random `rate` of the examples while
    training, scaling the others by `1 / (1 - rate)`; the identity at inference.

    Stochastic depth (Huang et al. 2016) as timm's `DropPath` and big_vision's
    `DropPath` apply it to ViT blocks: one Bernoulli draw per example, shared by
    every token and feature (`keras.random.dropout` with a `(batch, 1, ..., 1)`
    noise shape). Keras 3 has no such layer (keras-hub has none either).
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ArgumentError(f"drop path rate must be in [0, 1), got {rate}.")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        # Nothing to build, as Keras' Dropout: built from the start, since a block whose
        # symbolic call is `compute_output_spec` never calls it before Model.quantize checks.
        self.built = True

    def call(self, x, training=None):
        if not training or not self.rate:
            return x
        noise_shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        return keras.random.dropout(x, self.rate, noise_shape=noise_shape,
                                    seed=self.seed_generator)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
