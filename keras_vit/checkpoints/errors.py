"""The two ways getting weights can fail; both live in keras_vit.errors with the rest of the family."""

from keras_vit.errors import CheckpointError, WeightsUnavailableError

__all__ = ["CheckpointError", "WeightsUnavailableError"]
