"""The errors keras_vit raises on purpose: one family under `KerasViTError`.

Each one also refines the builtin it has always been (a `CheckpointError` is a
`ValueError`, a `WeightsUnavailableError` a `RuntimeError`), so code written as
`except ValueError` keeps working, and `except keras_vit.KerasViTError` catches
every problem keras_vit itself reports. The command line prints a member of this
family as one line and exits 2; any other exception is a bug and keeps its
traceback (keras_vit/cli/common.py).
"""

__all__ = [
    "KerasViTError",
    "ArgumentError",
    "ArgumentTypeError",
    "SizeError",
    "KerasVersionError",
    "CheckpointError",
    "WeightsUnavailableError",
    "ImageError",
    "DatasetError",
    "DatasetUnavailableError",
    "DeviceUnavailableError",
    "RunConflictError",
    "CommandError",
    "PathError",
    "PathNotFoundError",
    "PathExistsError",
    "OutOfMemoryError",
    "TrainingDivergedError",
]


class KerasViTError(Exception):
    """The base of every error keras_vit raises on purpose."""


class ArgumentError(KerasViTError, ValueError):
    """An argument no keras_vit function can honour: an unknown variant, an impossible size."""


class ArgumentTypeError(KerasViTError, TypeError):
    """An argument of the wrong type (a variant given as a number)."""


class SizeError(ArgumentError):
    """A size that cannot fit in this machine's memory; `parameter` names the argument at fault
    (the command line spells it as its flag)."""

    def __init__(self, message, parameter=None):
        super().__init__(message)
        self.parameter = parameter


class KerasVersionError(KerasViTError, RuntimeError):
    """A Keras release outside the range a work-around on private Keras code was checked on."""


class CheckpointError(KerasViTError, ValueError):
    """A checkpoint file that does not fit the model, or cannot be read."""


class WeightsUnavailableError(KerasViTError, RuntimeError):
    """A checkpoint is not in the cache and could not be downloaded."""


class ImageError(KerasViTError, ValueError):
    """A file that is not an image keras_vit can decode, or one over the pixel budget."""


class DatasetError(KerasViTError, ValueError):
    """A dataset that cannot be used as given: no classes, too few images, bad labels."""


class DatasetUnavailableError(KerasViTError, RuntimeError):
    """A named dataset that is not on this machine and could not be downloaded."""


class DeviceUnavailableError(KerasViTError, RuntimeError):
    """A placement this machine cannot give: a TPU strategy where no TPU resolves."""


class RunConflictError(KerasViTError, ValueError):
    """An output folder holding another run, or a run that cannot go on as asked."""


class CommandError(KerasViTError):
    """A problem with a command's input that no library function raised."""


class PathError(KerasViTError, OSError):
    """A file or folder the caller named that cannot be used as asked (an output folder not writable)."""


class PathNotFoundError(PathError, FileNotFoundError):
    """A file or folder the caller named that does not exist."""


class PathExistsError(PathError, FileExistsError):
    """A file or folder keras_vit was asked to create that exists already."""


class OutOfMemoryError(KerasViTError, MemoryError):
    """Memory ran out in a step that no batch or image size governs (drawing a figure, writing
    a report); the message names the step."""


class TrainingDivergedError(KerasViTError, ArithmeticError):
    """A training run whose loss became NaN or infinite: stopped there, not finished."""
