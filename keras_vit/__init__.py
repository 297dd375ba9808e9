"""keras_vit: the Vision Transformer for Keras 3, exact to the official checkpoints.

Importing it loads the core: variants, layers, models, checkpoints, image
preprocessing and labels. Training, datasets and export are loaded on first
use of one of their names (`keras_vit.train`, `keras_vit.load_dataset`,
`keras_vit.export_saved_model`, ...), so importing keras_vit pulls in no
training code, tf.distribute work-around or plotting library.
"""

import importlib

# _tf_log first, before anything imports Keras (_renamed does not): running as `keras-vit`,
# it quiets TensorFlow's C++ start-up log (keras_vit/_tf_log.py); as a library, nothing.
from keras_vit import _renamed, _tf_log  # noqa: F401
from keras_vit.checkpoints import (
    Checkpoint,
    CheckpointError,
    WeightsUnavailableError,
    catalogue,
    load_resnet_weights,
    load_weights,
    pin_checksum,
)
from keras_vit.labels import decode_predictions, imagenet_labels
from keras_vit.layers import (
    AddPositionEmbedding,
    BottleneckUnit,
    ClassToken,
    MlpBlock,
    MultiHeadSelfAttention,
    PatchEncoder,
    ResNetStem,
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

__all__ = [
    # models
    "ViT", "ViT_Ti16", "ViT_S16", "ViT_S32", "ViT_B8", "ViT_B16", "ViT_B32", "ViT_L16",
    "ViT_L32", "ViT_H14", "ViT_R_Ti16", "ViT_R26_S32", "ViT_R26_B32", "ViT_R50_B16",
    "ViT_R50_L32", "ResNetV2",
    # layers
    "PatchEncoder", "ClassToken", "AddPositionEmbedding", "resize_position_embedding",
    "MultiHeadSelfAttention", "MlpBlock", "TransformerBlock", "TokenPooling",
    "StdConv2D", "BottleneckUnit", "ResNetStem",
    # variants and weights
    "VARIANTS", "Variant", "get_variant", "variant_names", "Checkpoint", "catalogue",
    "pin_checksum", "load_weights", "load_resnet_weights", "CheckpointError", "WeightsUnavailableError",
    # pre- and post-processing
    "preprocess_input", "decode_predictions", "imagenet_labels",
    # export
    "export_saved_model", "export_tflite",
    # training
    "train", "Recipe", "RECIPES", "get_recipe", "load_dataset", "make_pipeline",
]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"keras_vit.{name}")
    raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBPACKAGES))


_renamed.install()
