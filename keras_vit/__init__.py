"""keras_vit: the Vision Transformer for Keras 3, exact to the official checkpoints.

Importing it loads the core: variants, layers, models, checkpoints, image
preprocessing and labels (under the `keras-vit` command: on first use, so
that `keras-vit --help` imports no TensorFlow). Training, datasets and export
are loaded on first use of one of their names (`keras_vit.train`, `keras_vit.load_dataset`,
`keras_vit.export_saved_model`, ...), so importing keras_vit pulls in no
training code, tf.distribute work-around or plotting library.
"""

import importlib
import os
import sys

from keras_vit import _renamed, _tf_log


def _started_as_command():
    """Whether Python runs the `keras-vit` script, whose parser needs none of the core.

    Then the core loads on first use (`__getattr__`), and `keras-vit --help` returns
    without importing Keras or TensorFlow; each sub-command imports what it runs.
    """
    main = sys.modules.get("__main__")
    script = os.path.basename(getattr(main, "__file__", None) or "")
    return script in ("keras-vit", "keras-vit.exe", "keras-vit-script.py")


# The core: what building a model, loading weights and classifying an image need.
_CORE_MODULES = ("keras_vit.errors", "keras_vit.variants", "keras_vit.layers", "keras_vit.models",
                 "keras_vit.checkpoints", "keras_vit.preprocessing", "keras_vit.labels")

if not _started_as_command():
    # `python -m keras_vit.cli` imports the core, and with it TensorFlow, here: quiet its
    # C++ start-up log first (the keras-vit script does it in cli.main, after parsing).
    _tf_log.quiet_for_command_line()
    from keras_vit.checkpoints import (
        Checkpoint,
        catalogue,
        load_resnet_weights,
        load_weights,
        pin_checksum,
        save_npz,
        save_safetensors,
    )
    from keras_vit.errors import (
        ArgumentError,
        ArgumentTypeError,
        CheckpointError,
        CommandError,
        DatasetError,
        DatasetUnavailableError,
        ImageError,
        KerasViTError,
        RunConflictError,
        WeightsUnavailableError,
    )
    from keras_vit.labels import decode_predictions, imagenet_labels
    from keras_vit.layers import (
        AddPositionEmbedding,
        BottleneckUnit,
        ClassToken,
        MlpBlock,
        MultiHeadSelfAttention,
        PatchEncoder,
        ResNetTrunk,
        StdConv2D,
        TokenPooling,
        TransformerBlock,
        resize_position_embedding,
    )
    from keras_vit.models import (
        ResNetV2,
        ViT,
        ViT_B8,
        ViT_B16,
        ViT_B32,
        ViT_H14,
        ViT_L16,
        ViT_L32,
        ViT_R26_B32,
        ViT_R26_S32,
        ViT_R50_B16,
        ViT_R50_L32,
        ViT_R_Ti16,
        ViT_S16,
        ViT_S32,
        ViT_Ti16,
    )
    from keras_vit.preprocessing import preprocess_input
    from keras_vit.variants import VARIANTS, Variant, get_variant, variant_names

__version__ = "0.2.0.dev0"

# Public names whose modules load on first use: name -> module.
_LAZY = {
    "export_saved_model": "keras_vit.export",
    "export_tflite": "keras_vit.export",
    "train": "keras_vit.training",
    "Recipe": "keras_vit.training",
    "RECIPES": "keras_vit.training",
    "get_recipe": "keras_vit.training",
    "load_dataset": "keras_vit.data",
    "make_pipeline": "keras_vit.data",
}
_SUBPACKAGES = ("analysis", "cli", "data", "export", "training")
_MISSING = object()

__all__ = [
    # models
    "ViT", "ViT_Ti16", "ViT_S16", "ViT_S32", "ViT_B8", "ViT_B16", "ViT_B32", "ViT_L16",
    "ViT_L32", "ViT_H14", "ViT_R_Ti16", "ViT_R26_S32", "ViT_R26_B32", "ViT_R50_B16",
    "ViT_R50_L32", "ResNetV2",
    # layers
    "PatchEncoder", "ClassToken", "AddPositionEmbedding", "resize_position_embedding",
    "MultiHeadSelfAttention", "MlpBlock", "TransformerBlock", "TokenPooling",
    "StdConv2D", "BottleneckUnit", "ResNetTrunk",
    # variants and weights
    "VARIANTS", "Variant", "get_variant", "variant_names", "Checkpoint", "catalogue",
    "pin_checksum", "load_weights", "load_resnet_weights", "save_npz", "save_safetensors",
    # errors: one family (keras_vit/errors.py)
    "KerasViTError", "ArgumentError", "ArgumentTypeError", "CheckpointError",
    "WeightsUnavailableError", "ImageError", "DatasetError", "DatasetUnavailableError",
    "RunConflictError", "CommandError",
    # pre- and post-processing
    "preprocess_input", "decode_predictions", "imagenet_labels",
    # export
    "export_saved_model", "export_tflite",
    # training
    "train", "Recipe", "RECIPES", "get_recipe", "load_dataset", "make_pipeline",
]


def __getattr__(name):
    if name in __all__ and name not in _LAZY:  # a core name, under the keras-vit command
        for module in _CORE_MODULES:
            value = getattr(importlib.import_module(module), name, _MISSING)
            if value is not _MISSING:
                globals()[name] = value
                return value
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"keras_vit.{name}")
    return _renamed.moved_name(__name__, name)  # a 0.1 name, or AttributeError


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_SUBPACKAGES))


_renamed.install()
