"""The one way from a name, a file or a run to a model: `build` an architecture by name, or
`load` whatever a user names (an architecture, a `.keras` file, a training run's folder, an
exported SavedModel folder).

Every caller that turns a user's model argument into a model comes here: the command line
(`keras_vit.cli.common.load_model`), streaming prediction and evaluation
(`keras_vit.runtime.runners.model_runner`), a distillation teacher
(`keras_vit.training.distillation.load_teacher`), a run started from an earlier run
(`keras_vit.training.transfer`), `compare`. Each checks first what only it refuses (the
command line names its flags, a teacher needs weights). So a `.keras` file is read by one
function, with one set of errors (tests/models/test_factory.py checks no second
`keras.saving.load_model` call site appears in the package).
"""

import os
import warnings
import zipfile

from keras_vit.errors import ArgumentError, CheckpointError

__all__ = ["build", "load", "keras_file", "load_keras", "load_serve_bytes", "is_saved_model",
           "quantized_layers", "RUN_FILE", "RUN_MODEL"]

# What a training run's folder holds (keras_vit/training/run.py writes both): its record, and
# the finished run's model.
RUN_FILE = "run.json"
RUN_MODEL = "model.keras"


def build(architecture, **kwargs):
    """A ViT (plain or hybrid, "demo" included) or a BiT, by any name the command line accepts
    ("B/16", "R50+B/16", "demo", "BiT-R50x1") or a `Variant` / `BiTVariant`; `kwargs` as
    `keras_vit.ViT` or `keras_vit.BiT` take them (the constructors check sizes against this
    machine's memory, `keras_vit.memory`)."""
    from keras_vit.models.bit import BiT
    from keras_vit.models.vit import ViT
    from keras_vit.variants import BiTVariant, get_architecture

    architecture = get_architecture(architecture)
    builder = BiT if isinstance(architecture, BiTVariant) else ViT
    return builder(architecture, **kwargs)


def is_saved_model(path):
    """Whether `path` is a folder (an exported SavedModel, or a base folder of versions)."""
    return isinstance(path, (str, os.PathLike)) and os.path.isdir(path)


def keras_file(spec):
    """The `.keras` file `spec` names: itself, or a training run folder's model.keras
    (`CheckpointError` while the run has not finished); None for anything else (a name, a
    catalogue tag, a checkpoint, a SavedModel folder)."""
    if not isinstance(spec, (str, os.PathLike)):
        return None
    path = os.fspath(spec)
    if path.endswith(".keras"):
        return path
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, RUN_FILE)):
        model = os.path.join(path, RUN_MODEL)
        if not os.path.isfile(model):
            raise CheckpointError(f"{path} is a run folder without {RUN_MODEL} (the run has not "
                                  "finished); finish it, or pass its best.keras.")
        return model
    return None


def load(spec, compile=True, **kwargs):
    """The model `spec` names: a Keras model (returned as it is), a `.keras` file or a training
    run's folder (its model.keras; `load_keras`), an exported SavedModel folder (its
    `serve_bytes` signature, `load_serve_bytes`), or an architecture name
    (`build(spec, **kwargs)`).

    `kwargs` (weights, image_size, classes, ...) apply to an architecture only: a saved
    model's are its own, and giving them raises `ArgumentError`.
    """
    import keras

    if isinstance(spec, keras.Model):
        _no_arguments(spec.name, kwargs)
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise ArgumentError(f"model must be a Keras model, an architecture name, a .keras file or "
                            f"a SavedModel folder, got {type(spec).__name__}.")
    path = os.fspath(spec)
    saved = keras_file(path)
    if saved is not None:
        _no_arguments(path, kwargs)
        return load_keras(saved, compile=compile)
    if is_saved_model(path):
        _no_arguments(path, kwargs)
        return load_serve_bytes(path)
    return build(path, **kwargs)


def _no_arguments(saved, kwargs):
    given = [name for name, value in kwargs.items() if value is not None]
    if given:
        raise ArgumentError(f"{saved} is a saved model; {', '.join(given)} cannot change it.")


def load_keras(path, compile=True):
    """The model in the `.keras` file `path`, with one set of errors: `ArgumentError` for a
    missing file, `CheckpointError` for a file that is not a `.keras` model keras_vit can load
    (not a zip, truncated, no config, an unknown class)."""
    import keras

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ArgumentError(f"No .keras file at {path}.")
    if not zipfile.is_zipfile(path):  # Keras would call it "File not found"
        raise CheckpointError(f"{path} is not a .keras file (a zip): truncated, or another kind "
                              "of file?")
    # A model.keras from `keras-vit train` names its optimizer (keras_vit's SGD or AdamW),
    # which `import keras_vit` registers (the command's load_model registers it itself:
    # under the command keras_vit loads on first use). The models know no training code.
    try:
        with warnings.catch_warnings():
            # A saved optimizer's state that Keras' fresh optimizer has not built yet (an int8
            # export of a run's model): a UserWarning per load, about state nothing here uses.
            warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
            return keras.saving.load_model(path, compile=compile)
    except (ValueError, KeyError, TypeError, AttributeError, OSError, zipfile.BadZipFile,
            EOFError) as error:
        # Keras' errors for a torn or foreign file (a truncated zip, no config.json, an
        # unknown class, a config of the wrong types); the first line says which.
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"{path} is not a .keras model keras_vit can load "
                              f"({type(error).__name__}: {reason}).") from error


def quantized_layers(model):
    """The names of `model`'s layers that Keras' `Model.quantize` has quantised (an int8
    `.keras` from `keras-vit export --quantize int8`): such a model runs, but cannot be
    quantised again, cast to bfloat16 nor trained."""
    return [layer.name for layer in model._flatten_layers(include_self=False)
            if getattr(layer, "quantization_mode", None) is not None]


def load_serve_bytes(folder):
    """The `serve_bytes` signature of the SavedModel in `folder` (a version folder, or a base
    folder of numbered versions: the highest)."""
    import tensorflow as tf

    if not os.path.isdir(folder):
        raise ArgumentError(f"No SavedModel folder at {folder}.")
    if not os.path.exists(os.path.join(folder, "saved_model.pb")):
        versions = [int(n) for n in os.listdir(folder)
                    if n.isdigit() and os.path.exists(os.path.join(folder, n, "saved_model.pb"))]
        if not versions:
            raise ArgumentError(f"{folder} holds no saved_model.pb, nor version folders with one.")
        folder = os.path.join(folder, str(max(versions)))
    signatures = tf.saved_model.load(folder).signatures
    if "serve_bytes" not in signatures:
        raise ArgumentError(f"{folder} has no serve_bytes signature (it has {sorted(signatures)}); "
                            "export it with keras_vit.export_saved_model.")
    return signatures["serve_bytes"]
