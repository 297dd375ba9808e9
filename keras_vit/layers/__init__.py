"""keras_vit's Keras layers: one concept per file, all `keras.ops`, all serializable."""

from keras_vit.layers.attention_pooling import MAPHead
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.patching import PatchEncoder, resample_patch_embedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.resnet import BottleneckUnit, PreActBottleneckUnit, ResNetTrunk, StdConv2D
from keras_vit.layers.tokens import (
    AddPositionEmbedding,
    ClassToken,
    PrefixTokens,
    resize_position_embedding,
)
from keras_vit.layers.transformer import LayerScale, MlpBlock, MultiHeadSelfAttention, TransformerBlock

__all__ = [
    "PatchEncoder",
    "resample_patch_embedding",
    "ClassToken",
    "PrefixTokens",
    "AddPositionEmbedding",
    "resize_position_embedding",
    "MultiHeadSelfAttention",
    "MlpBlock",
    "LayerScale",
    "TransformerBlock",
    "TokenPooling",
    "DropPath",
    "MAPHead",
    "StdConv2D",
    "BottleneckUnit",
    "ResNetTrunk",
    "PreActBottleneckUnit",
]


def __getattr__(name):  # names that changed in 0.2 (keras_vit/_lazy.py)
    from keras_vit._lazy import moved_name

    return moved_name(__name__, name)
