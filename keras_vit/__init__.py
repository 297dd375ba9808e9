"""keras_vit: the Vision Transformer for Keras 3, exact to the official checkpoints."""

from keras_vit.checkpoints import (Checkpoint, WeightsUnavailableError, catalogue,
                                   pin_checksum)
from keras_vit.export import export_saved_model, export_tflite
from keras_vit.layers import (AddPositionEmbedding, BottleneckUnit, ClassToken, MlpBlock,
                              MultiHeadSelfAttention, PatchEncoder, ResNetStem, StdConv2D,
                              TransformerBlock, resize_position_embedding)
from keras_vit.models import (ViT, TokenPooling, ViT_B8, ViT_B16, ViT_B32, ViT_H14, ViT_L16,
                              ViT_L32, ViT_R26_B32, ViT_R26_S32, ViT_R50_B16, ViT_R50_L32,
                              ViT_R_Ti16, ViT_S16, ViT_S32, ViT_Ti16)
from keras_vit.resnet import ResNetV2, load_resnet_weights
from keras_vit.datasets import load_dataset, make_pipeline
from keras_vit.preprocessing import decode_predictions, imagenet_labels, preprocess_input
from keras_vit.training import RECIPES, Recipe, get_recipe, train
from keras_vit.variants import VARIANTS, Variant, get_variant, variant_names
from keras_vit.weight_mapping import CheckpointError, load_weights

__version__ = "0.1.0"

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
