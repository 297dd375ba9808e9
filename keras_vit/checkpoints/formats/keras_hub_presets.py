"""What every keras-hub preset folder holds, whatever its model: its JSON files, the
preprocessor's normalisation, and keras-hub itself, which reads the preset's weights.
`keras_hub.py` (ViT) and `keras_hub_families.py` (SigLIP, CLIP, DINOv2) read their presets with these.
"""

import os

from keras_vit._support.json_files import read_json
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import channel_values, normalization_from
from keras_vit.checkpoints.formats.config_values import check_object

__all__ = ["preset_normalization", "read_preset_json", "import_keras_hub"]


def preset_normalization(directory):
    """The preprocessor's image converter as mean/std on pixels in [0, 1] (it computes
    x * scale + offset on x in [0, 255]), or None where no preprocessor was saved."""
    path = os.path.join(directory, "preprocessor.json")
    if not os.path.exists(path):
        return None
    preprocessor = check_object(path, read_preset_json(path))
    converter = (preprocessor.get("config") or {}).get("image_converter") or {}
    converter = converter.get("config", {}) if isinstance(converter, dict) else {}
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
