"""Models built from the variant table: the ViT (plain and hybrid) and the hybrids' ResNet trunk."""

from keras_vit.models.resnet import ResNetV2
from keras_vit.models.vit import (
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

__all__ = ["ViT", "ViT_Ti16", "ViT_S16", "ViT_S32", "ViT_B8", "ViT_B16", "ViT_B32", "ViT_L16",
           "ViT_L32", "ViT_H14", "ViT_R_Ti16", "ViT_R26_S32", "ViT_R26_B32", "ViT_R50_B16",
           "ViT_R50_L32", "ResNetV2"]


def __getattr__(name):  # names that moved in 0.2 (keras_vit/_renamed.py)
    from keras_vit._renamed import moved_name

    return moved_name(__name__, name)
