"""Names to architectures: every spelling keras_vit accepts ("ViT-B_16", "B/16", "demo",
"DINOv2-S/14-reg4", timm's "vit_base_patch16_224", "BiT-R50x1") to its `Variant` or
`BiTVariant`."""

import dataclasses
import re

from keras_vit.errors import ArgumentError, ArgumentTypeError
from keras_vit.variants.bit import BiTVariant, get_bit_variant, is_bit_name
from keras_vit.variants.table import DEMO_VARIANT, FAMILIES, VARIANTS, Variant
from keras_vit.variants.timm_names import timm_row

__all__ = ["get_variant", "variant_names", "constructor_names", "get_architecture",
           "table_variant", "timm_variant"]


def _canonical_key(name):
    """Reduce every accepted spelling to one comparable form, e.g. "r50+b/16"."""
    key = name.strip().lower().replace("vit-", "").replace("vit_", "")
    key = key.replace("_", "/").replace("-norep", "")
    key = re.sub(r"\s+", "", key)
    return key


_BY_KEY = {**{_canonical_key(v.name): v for v in [*VARIANTS.values(), *FAMILIES.values()]},
           "demo": DEMO_VARIANT, _canonical_key(DEMO_VARIANT.name): DEMO_VARIANT}


def variant_names():
    """Official names of every architecture, in table order."""
    return list(VARIANTS)


def constructor_names():
    """The named constructors' names ("ViT_Ti16", ..., "DeiT_Ti16", ...), in table order."""
    return [v.constructor_name for v in [*VARIANTS.values(), *FAMILIES.values()]
            if v.constructor_name]


def get_variant(name):
    """Returns the `Variant` for an official or short name ("ViT-B_16", "B/16"), a timm
    architecture name ("vit_base_patch16_224"), or "demo"."""
    if isinstance(name, Variant):
        return name
    if not isinstance(name, str):
        raise ArgumentTypeError(f"A variant name must be a string, got {type(name).__name__}.")
    variant = _BY_KEY.get(_canonical_key(name))
    if variant is None:
        variant = timm_variant(name)  # timm's names: "vit_base_patch16_224"
    if variant is None:
        from keras_vit._support.names import did_you_mean

        every = [*VARIANTS.values(), *FAMILIES.values()]
        # The paper's variants by name; the families by where they are listed, so the line
        # stays a line.
        known = ", ".join(f'"{v.short_name}"' for v in VARIANTS.values())
        hint = did_you_mean(name, [v.short_name for v in every] + list(VARIANTS))
        if is_bit_name(name):
            raise ArgumentError(f"{name!r} is a BiT ResNet, not a ViT: build it with "
                                f"keras_vit.BiT({name!r}).")
        raise ArgumentError(f"Unknown ViT variant {name!r}.{hint} Known variants: {known} "
                            '(official spellings such as "ViT-B_16" work too), and the '
                            'families of keras_vit.FAMILIES ("DeiT-S/16", "DINOv2-S/14-reg4", ...).')
    return variant




def timm_variant(architecture):
    """The `Variant` timm's `architecture` ("vit_base_patch16_224", with or without a
    ".pretrained_tag") builds, or None when timm_names.py's table does not know it."""
    row = timm_row(architecture)
    if row is None:
        return None
    official, heads = row
    variant = VARIANTS.get(official) or FAMILIES[official]
    if heads is None:
        return variant
    return dataclasses.replace(variant, heads=heads, name=architecture.split(".", 1)[0])


def table_variant(variant):
    """The row of `VARIANTS` or `FAMILIES` that `variant` is under another name (a config's
    description of ViT-B_16 is ViT-B_16), else `variant` itself."""
    for row in [*VARIANTS.values(), *FAMILIES.values()]:
        if dataclasses.replace(variant, name=row.name) == row:
            return row
    return variant


def get_architecture(name):
    """A `Variant` (ViT) or a `BiTVariant`, from any name the command line accepts:
    "B/16", "demo", "BiT-R50x1" (or "R50x1"), timm's names."""
    if isinstance(name, (Variant, BiTVariant)):
        return name
    if isinstance(name, str) and (name.strip().lower().startswith("bit") or is_bit_name(name)):
        return get_bit_variant(name)
    return get_variant(name)
