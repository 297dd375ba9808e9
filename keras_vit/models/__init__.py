"""Models built from the variant table: the ViT (plain and hybrid) and the hybrids' ResNet trunk."""

from keras_vit.models import vit as _vit
from keras_vit.models.resnet import ResNetV2
from keras_vit.models.vit import *  # noqa: F403  ViT and the named constructors (made from the table)

__all__ = [*_vit.__all__, "ResNetV2"]


def __getattr__(name):  # names that moved in 0.2 (keras_vit/_renamed.py)
    from keras_vit._renamed import moved_name

    return moved_name(__name__, name)
