"""keras_vit: the Vision Transformer for Keras 3, exact to the official checkpoints.

Importing it loads the core: variants, layers, models, checkpoints, image
preprocessing, labels, and the optimizers a train-made `.keras` file names (so
`keras.saving.load_model` reads one right after `import keras_vit`). Under the
`keras-vit` command the core loads on first use, so that `keras-vit --help`
imports no TensorFlow. Training, datasets and export are loaded on first use of
one of their names (`keras_vit.train`, `keras_vit.load_dataset`,
`keras_vit.export_saved_model`, ...), so importing keras_vit pulls in no
training code, tf.distribute work-around or plotting library.

Every public name is in one table below, {name: its module}; `__all__`,
`dir(keras_vit)` and the loading on first use (keras_vit/_lazy.py) come from it.
The named constructors (ViT_Ti16, ..., BiT_R50x1, ...) come from the variant
tables (keras_vit/variants/), the errors from keras_vit/errors.py.
"""

import importlib

from keras_vit import _lazy, errors, variants
from keras_vit._support.tf_log import running_the_command

__version__ = "0.2.0.dev0"

# The core: what building a model, loading weights and classifying an image need.
_CORE = {
    **dict.fromkeys(["ViT", "from_pretrained", *variants.constructor_names(), "ResNetV2", "BiT",
                     *variants.bit_constructor_names()], "keras_vit.models"),
    **dict.fromkeys(["PatchEncoder", "resample_patch_embedding", "ClassToken", "PrefixTokens",
                     "AddPositionEmbedding", "resize_position_embedding", "MultiHeadSelfAttention",
                     "MlpBlock", "LayerScale", "TransformerBlock", "TokenPooling", "MAPHead",
                     "StdConv2D", "BottleneckUnit", "ResNetTrunk", "PreActBottleneckUnit", "DropPath"],
                    "keras_vit.layers"),
    **dict.fromkeys(["VARIANTS", "FAMILIES", "Variant", "get_variant", "variant_names", "BIT_VARIANTS",
                     "BiTVariant"], "keras_vit.variants"),
    **dict.fromkeys(["Checkpoint", "catalogue", "list_models", "pin_checksum", "load_weights",
                     "load_resnet_weights", "save_npz", "save_safetensors"],
                    "keras_vit.checkpoints"),
    **dict.fromkeys(errors.__all__, "keras_vit.errors"),
    "preprocess_input": "keras_vit.preprocessing",
    "decode_predictions": "keras_vit.labels",
    "imagenet_labels": "keras_vit.labels",
}
# Loaded on first use, always.
_ON_FIRST_USE = {
    **dict.fromkeys(["export_saved_model", "export_tflite"], "keras_vit.export.saved_model"),
    "save_pretrained": "keras_vit.export.pretrained_folder",
    "push_to_hub": "keras_vit.export.hub_push",
    **dict.fromkeys(["export_onnx", "export_openvino", "export_litert"], "keras_vit.export.runtimes"),
    **dict.fromkeys(["train", "TrainSettings", "Recipe", "RECIPES", "get_recipe"], "keras_vit.training"),
    **dict.fromkeys(["load_dataset", "make_pipeline"], "keras_vit.data"),
    **dict.fromkeys(["predict_images", "ImagePrediction"], "keras_vit.runtime.inference"),
    "evaluate": "keras_vit.runtime.evaluation",
    **dict.fromkeys(["enable_lora", "merge_lora"], "keras_vit.lora"),
}
_SUBMODULES = ("analysis", "atomic", "checkpoints", "cli", "data", "errors", "export", "labels",
               "layer_names", "layers", "lora", "memory", "models", "normalization",
               "preprocessing", "preprocessing_record", "reports", "runtime", "training",
               "variants")

__getattr__, __dir__, __all__ = _lazy.attach(__name__, {**_CORE, **_ON_FIRST_USE}, _SUBMODULES)

if not running_the_command():  # the command's sub-commands import what they run
    _lazy.load(__name__, _CORE)
    # A train-made .keras file names keras_vit's SGD or AdamW: register them, without the
    # rest of keras_vit.training (its __init__ loads its names on first use).
    importlib.import_module("keras_vit.training.optimizers")

_lazy.install_renamed()
