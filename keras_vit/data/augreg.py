"""AugReg's augmentation settings ("How to train your ViT", arXiv 2106.10270), as data.

The names `keras-vit train --augment` takes and what each means; plain data that
`--help` quotes without starting TensorFlow. The Keras layers that apply them
are keras_vit/data/augment_layers.py's.
"""

import dataclasses

from keras_vit._support.checks import real_in
from keras_vit.errors import ArgumentError

__all__ = ["AUGREG", "Augmentation", "get_augmentation", "parse_randaugment",
           "RANDAUGMENT_MAX_MAGNITUDE", "RANDAUGMENT_MAX_LAYERS", "MAX_MIX_ALPHA"]

# The AugReg settings by their paper names: (RandAugment (layers, magnitude) or None, MixUp
# alpha). From big_vision's configs/vit_i1k.py (RANDAUG_DEF and MIXUP_DEF), the code of the
# paper's ImageNet-1k runs; the paper's Fig. 4 names the same seven settings. As big_vision
# notes, light1 is "not nothing": RandAugment with magnitude 0 still equalises and
# auto-contrasts.
AUGREG = {
    "none": (None, 0.0),
    "light1": ((2, 0), 0.0),
    "light2": ((2, 10), 0.2),
    "medium1": ((2, 15), 0.2),
    "medium2": ((2, 15), 0.5),
    "strong1": ((2, 20), 0.5),
    "strong2": ((2, 20), 0.8),
}
# Keras' RandAugment takes a strength `factor` in [0, 1]; big_vision's magnitudes (AutoAugment's
# scale, whose _MAX_LEVEL is 10 but which AugReg and EfficientNet run up to 20 and 28) map to
# factor = magnitude / 30. The operations are Keras' own, so strong settings are alike in
# strength, not pixel for pixel big_vision's.
RANDAUGMENT_MAX_MAGNITUDE = 30
# Keras' RandAugment draws each of its N layers from its 11 operations; AugReg and timm use 2.
# More layers than operations only repeats them, at a cost per image that grows with N.
RANDAUGMENT_MAX_LAYERS = 11
# MixUp and CutMix draw their mix from Beta(alpha, alpha). Its spread is 1 / (2 sqrt(2 alpha + 1)):
# at 100 every mix is within a few percent of half and half (AugReg's largest is 0.8, timm's 1);
# past float32's range the sampler returns NaN, and the run learns nothing.
MAX_MIX_ALPHA = 100


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """What the training pipeline adds to its crop and flip."""

    randaugment: tuple | None = None  # (layers, magnitude)
    mixup: float = 0.0  # MixUp's Beta(alpha, alpha); 0: off
    cutmix: float = 0.0  # CutMix's Beta(alpha, alpha); 0: off

    @property
    def mixes(self):
        return bool(self.mixup or self.cutmix)

    @property
    def active(self):
        return self.randaugment is not None or self.mixes


def get_augmentation(augment="none", mixup=None, cutmix=None, randaugment=None):
    """`augment`'s AugReg setting, with any of `mixup`, `cutmix`, `randaugment` given instead."""
    if augment not in AUGREG:
        from keras_vit._support.names import did_you_mean

        raise ArgumentError(f"Unknown augment setting {augment!r}.{did_you_mean(augment, AUGREG)} "
                            f"Choose one of {list(AUGREG)}.")
    named_randaugment, named_mixup = AUGREG[augment]
    randaugment = named_randaugment if randaugment is None else parse_randaugment(randaugment)
    mixup = named_mixup if mixup is None else mixup
    cutmix = 0.0 if cutmix is None else cutmix
    mixup, cutmix = (real_in(alpha, name, 0, MAX_MIX_ALPHA,
                             what=f"an alpha >= 0 (0: off) and <= {MAX_MIX_ALPHA}")
                     for name, alpha in (("mixup", mixup), ("cutmix", cutmix)))
    return Augmentation(randaugment, mixup, cutmix)


def parse_randaugment(value):
    """"N,M" or (N, M) -> (layers N >= 0, magnitude 0 <= M <= 30); "none" or None -> None."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        layers, magnitude = (int(str(part).strip()) for part in parts)
    except ValueError:
        raise ArgumentError(f"randaugment must be N,M (layers, magnitude), e.g. 2,15; got "
                            f"{value!r}.") from None
    if not 1 <= layers <= RANDAUGMENT_MAX_LAYERS or not 0 <= magnitude <= RANDAUGMENT_MAX_MAGNITUDE:
        raise ArgumentError(f"randaugment N,M needs N >= 1 layers (at most {RANDAUGMENT_MAX_LAYERS}) "
                            f"and a magnitude M in 0 to {RANDAUGMENT_MAX_MAGNITUDE}, got {value!r}.")
    return (layers, magnitude)
