"""The two ways getting weights can fail: a file that does not fit, or no file at all."""

__all__ = ["CheckpointError", "WeightsUnavailableError"]


class CheckpointError(ValueError):
    """A checkpoint file that does not fit the model, or cannot be read."""


class WeightsUnavailableError(RuntimeError):
    """A checkpoint is not in the cache and could not be downloaded."""
