"""Models built from the variant tables: the ViT (plain and hybrid), the hybrids' ResNet trunk,
and BiT ResNetV2, the paper's CNN baseline; `build` and `load` (factory.py) turn a name or a
file into one. arguments.py holds the checks the constructors share; keras_vit/memory.py the
fits-in-memory check they run first (beside the errors: checkpoint configs run it too)."""

from keras_vit.models import bit as _bit
from keras_vit.models import vit as _vit
from keras_vit.models.bit import *  # noqa: F403  BiT and its named constructors (made from the table)
from keras_vit.models.factory import build, load  # noqa: F401  (keras_vit.models.build, as before)
from keras_vit.models.pretrained import from_pretrained
from keras_vit.models.resnet import ResNetV2
from keras_vit.models.vit import *  # noqa: F403  ViT and the named constructors (made from the table)

__all__ = [*_vit.__all__, "ResNetV2", *_bit.__all__, "from_pretrained"]


def __getattr__(name):  # names that moved in 0.2 (keras_vit/_lazy.py)
    from keras_vit._lazy import moved_name

    return moved_name(__name__, name)
