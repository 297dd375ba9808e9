"""What every keras-hub preset folder holds, whatever its model: its JSON files, the
preprocessor's normalisation and resize, and keras-hub itself, which reads the preset's weights.
`keras_hub.py` (ViT) and `keras_hub_families.py` (SigLIP, CLIP, DINOv2) read their presets with these.
"""

import os

from keras_vit._support.json_files import read_json
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import channel_values, normalization_from
from keras_vit.checkpoints.formats.config_values import check_object
from keras_vit.checkpoints.formats.preprocess_configs import keras_hub_preprocessing

__all__ = ["preset_normalization", "preset_preprocessing", "read_preset_json", "import_keras_hub",
           "check_stored_shapes"]

WEIGHTS_FILE = "model.weights.h5"  # save_to_preset's weights, unsharded


def _image_converter(directory):
    """(path, the preprocessor's image converter config), or (path, None) where no
    preprocessor was saved."""
    path = os.path.join(directory, "preprocessor.json")
    if not os.path.exists(path):
        return path, None
    preprocessor = check_object(path, read_preset_json(path))
    config = check_object(f'{path} (its "config")', preprocessor.get("config") or {})
    converter = config.get("image_converter") or {}
    converter = check_object(f'{path} (its "image_converter")', converter)
    return path, check_object(f'{path} (its "image_converter" config)',
                              converter.get("config") or {})


def preset_preprocessing(directory):
    """How the preprocessor's image converter resizes (a `Preprocessing` record), or None
    where no preprocessor was saved."""
    path, converter = _image_converter(directory)
    return None if converter is None else keras_hub_preprocessing(path, converter)


def preset_normalization(directory):
    """The preprocessor's image converter as mean/std on pixels in [0, 1] (it computes
    x * scale + offset on x in [0, 255]), or None where no preprocessor was saved."""
    path, converter = _image_converter(directory)
    if converter is None:
        return None
    scale, offset = converter.get("scale"), converter.get("offset")
    if scale is None:
        return None
    scale = channel_values(path, "scale", scale)
    offset = channel_values(path, "offset", 0.0 if offset is None else offset)
    if min(scale) <= 0:
        raise CheckpointError(f"{path}: the image converter's scale {scale} is not positive.")
    std = tuple(1.0 / (255.0 * s) for s in scale)
    mean = tuple(-o * s for o, s in zip(offset, std))
    return normalization_from(path, mean, std)


def read_preset_json(path):
    try:
        return read_json(path, "a JSON file", CheckpointError)
    except OSError as error:
        raise CheckpointError(f"{path} is not a readable JSON file ({error}).") from error


def import_keras_hub(directory):
    """keras_hub, which reads its own presets; an ImportError saying how to install it."""
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(f"Reading the keras-hub preset {directory} needs keras-hub: "
                          "pip install keras-hub.") from error
    return keras_hub


def check_stored_shapes(directory, preset, depth_at):
    """Refuses, in one line and before keras-hub builds the preset's model, a config.json that
    does not describe the weights in model.weights.h5 (an edited width, head count, depth,
    register count, position grid or image shape). keras-hub builds the config's model at
    depths 1 and 2 only (a block's variables are their difference), and the shapes of every
    variable the full depth would hold are compared with the file's datasets: a config of
    256 layers is refused without building them. `depth_at(config)`: the (mutable) dict of
    the preset's config that holds "num_layers"."""
    import collections
    import copy

    weights = os.path.join(directory, WEIGHTS_FILE)
    if not os.path.isfile(weights):  # sharded, or none: keras-hub's own load says what
        return
    import h5py
    import keras

    import_keras_hub(directory)  # registers the classes the config names
    stored = collections.Counter()
    try:
        with h5py.File(weights, "r") as file:
            file.visititems(lambda name, item: stored.update([tuple(item.shape)])
                            if isinstance(item, h5py.Dataset) else None)
    except OSError as error:
        raise CheckpointError(f"{weights} is not a readable HDF5 weights file ({error}).") from error

    def shapes(depth):
        config = copy.deepcopy(preset)
        depth_at(config)["num_layers"] = depth
        try:
            model = keras.saving.deserialize_keras_object(config)
        except Exception as error:  # keras-hub's own checks of its config (any kind)
            reason = " ".join(str(error).split())[:200]
            raise CheckpointError(f"{directory}: keras-hub cannot build its config.json "
                                  f"({type(error).__name__}: {reason}).") from error
        return collections.Counter(tuple(v.shape) for v in model.weights)

    depth = depth_at(preset)["num_layers"]
    first = shapes(1)
    block = shapes(2) - first
    expected = first + collections.Counter({s: n * (depth - 1) for s, n in block.items()})
    if expected != stored:
        def listed(counter):
            return ", ".join(f"{n} x {s}" for s, n in sorted(counter.items())[:3]) or "nothing"
        raise CheckpointError(
            f"{directory}: config.json does not describe {WEIGHTS_FILE} (edited?): the "
            f"config's model has {listed(expected - stored)} that the file lacks, the file "
            f"{listed(stored - expected)} that the config lacks.")
