"""The token norms a row chooses (`Variant.norm`): LayerNorm, the paper's, or RMSNorm (AIMv2).

Both are Keras' own layers, so a `.keras` file of either loads without keras_vit. Keras'
`RMSNormalization` computes timm's `RmsNorm`, `x * rsqrt(mean(x ** 2) + epsilon) * scale`, in
float32 also under a bfloat16 policy (tests/layers/test_norms.py checks both against timm).
"""

import keras

from keras_vit.errors import ArgumentError

__all__ = ["NORMS", "token_norm"]

NORMS = ("layer", "rms")


def token_norm(kind, epsilon, name=None, dtype=None):
    """A norm over the features (the last axis) of `kind` ("layer": scale and bias, "rms":
    scale alone), named `name` (the official scope: "LayerNorm_0", "encoder_norm")."""
    if kind == "layer":
        return keras.layers.LayerNormalization(epsilon=epsilon, name=name, dtype=dtype)
    if kind == "rms":
        return keras.layers.RMSNormalization(epsilon=epsilon, name=name, dtype=dtype)
    raise ArgumentError(f"norm must be one of {', '.join(NORMS)}; got {kind!r}.")

