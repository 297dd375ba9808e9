"""BiT ResNetV2, the paper's CNN baseline: its own table of six sizes."""

import dataclasses
import re

from keras_vit.errors import ArgumentError, ArgumentTypeError

__all__ = ["BiTVariant", "BIT_VARIANTS", "BIT_UNITS", "bit_constructor_names",
           "get_bit_variant", "is_bit_name"]

# --- BiT ResNetV2, the paper's CNN baseline ------------------------------------------------------
# Kolesnikov et al., "Big Transfer (BiT)": a pre-activation ResNetV2 of depth 50, 101 or 152 and
# width factor 1 to 4. Its own table, not rows of VARIANTS: a BiT has no transformer, so none of
# Variant's geometry (width, heads, patch) applies, and ViT() must never be handed one.
BIT_UNITS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


@dataclasses.dataclass(frozen=True)
class BiTVariant:
    """One BiT ResNetV2: depth (50, 101, 152) and width factor (1 to 4)."""

    name: str  # "BiT-R50x1"
    depth: int
    width: int

    @property
    def units(self):
        """Bottleneck units per stage: (3, 4, 6, 3) for R50."""
        return BIT_UNITS[self.depth]

    @property
    def short_name(self):
        return self.name.removeprefix("BiT-")  # "R50x1"

    @property
    def constructor_name(self):
        return f"BiT_{self.short_name}"  # "BiT_R50x1"

    @property
    def channels(self):
        """Channels of the features the head reads: 4 * 64 * width * 8 = 2048 * width."""
        return 2048 * self.width


BIT_VARIANTS = {v.name: v for v in (BiTVariant(f"BiT-R{depth}x{width}", depth, width)
                                    for depth, width in ((50, 1), (50, 3), (101, 1), (101, 3),
                                                         (152, 2), (152, 4)))}
_BIT_KEY = re.compile(r"r(\d+)x(\d+)")


def _bit_key(name):
    """"BiT-R50x1", "R50x1", "bit_r50x1", timm's "resnetv2_50x1_bit" -> "r50x1"."""
    key = re.sub(r"\s+", "", name.strip().lower()).split(".", 1)[0]
    key = key.removeprefix("bit-").removeprefix("bit_")
    if (m := re.fullmatch(r"resnetv2_(\d+x\d+)_bit", key)):
        key = "r" + m.group(1)
    return key


_BIT_BY_KEY = {_bit_key(v.name): v for v in BIT_VARIANTS.values()}


def bit_constructor_names():
    """The BiT constructors' names ("BiT_R50x1", ...), in table order."""
    return [v.constructor_name for v in BIT_VARIANTS.values()]


def get_bit_variant(name):
    """The `BiTVariant` for "BiT-R50x1", "R50x1" or timm's "resnetv2_50x1_bit"."""
    if isinstance(name, BiTVariant):
        return name
    if not isinstance(name, str):
        raise ArgumentTypeError(f"A BiT name must be a string, got {type(name).__name__}.")
    variant = _BIT_BY_KEY.get(_bit_key(name))
    if variant is None:
        from keras_vit._support.names import did_you_mean

        known = ", ".join(f'"{v.short_name}"' for v in BIT_VARIANTS.values())
        hint = did_you_mean(name, [*BIT_VARIANTS, *(v.short_name for v in BIT_VARIANTS.values())])
        raise ArgumentError(f"Unknown BiT model {name!r}.{hint} Known: {known} "
                            '(or "BiT-R50x1" and so on).')
    return variant


def is_bit_name(name):
    """Whether `name` spells a BiT ("BiT-R50x1", "R50x1", timm's "resnetv2_50x1_bit")."""
    return bool(_BIT_KEY.fullmatch(_bit_key(name)))
