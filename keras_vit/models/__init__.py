"""Models built from the variant tables: the ViT (plain and hybrid), the hybrids' ResNet trunk,
and BiT ResNetV2, the paper's CNN baseline."""

from keras_vit.models import bit as _bit
from keras_vit.models import vit as _vit
from keras_vit.models.bit import *  # noqa: F403  BiT and its named constructors (made from the table)
from keras_vit.models.resnet import ResNetV2
from keras_vit.models.vit import *  # noqa: F403  ViT and the named constructors (made from the table)

__all__ = [*_vit.__all__, "ResNetV2", *_bit.__all__]


def build(architecture, **kwargs):
    """A ViT or a BiT, by any name the command line accepts ("B/16", "demo", "BiT-R50x1")
    or a `Variant` / `BiTVariant`; `kwargs` as `ViT` or `BiT` take them."""
    from keras_vit.variants import BiTVariant, get_architecture

    architecture = get_architecture(architecture)
    builder = BiT if isinstance(architecture, BiTVariant) else ViT  # noqa: F405
    return builder(architecture, **kwargs)


def __getattr__(name):  # names that moved in 0.2 (keras_vit/_lazy.py)
    from keras_vit._lazy import moved_name

    return moved_name(__name__, name)
