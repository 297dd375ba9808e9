"""A config's description of an architecture -> the `Variant` it is.

Every format that reads a config (timm's, transformers', keras-hub's, open_clip's) describes
the model as a `Variant` and asks `match_or_name` for it: the row of VARIANTS or FAMILIES it
is under another name (google/vit-base-patch16-224 is ViT-B_16), else the description itself
named after its sizes, in one scheme (`sized_name`).
"""

import dataclasses

from keras_vit.variants import FAMILIES, VARIANTS

__all__ = ["match_or_name", "sized_name", "swiglu_mlp_dim"]


def match_or_name(variant, family=None, ignore=()):
    """The row of VARIANTS or FAMILIES (of `family` only, where given) that `variant` is, its
    fields in `ignore` aside (the row's own kept); else `variant` named `sized_name(variant)`."""
    for row in [*VARIANTS.values(), *FAMILIES.values()]:
        if family is not None and row.family != family:
            continue
        kept = {field: getattr(row, field) for field in ignore}
        if dataclasses.replace(variant, name=row.name, **kept) == row:
            return row
    return dataclasses.replace(variant, name=sized_name(variant))


def sized_name(variant):
    """A name after the sizes, for an architecture no table names: "DINOv2-384x12/14-reg4",
    "ViT-256x6/16", "R3-4-9+ViT-768x12" (a hybrid's patch is on the trunk's features)."""
    trunk = f"R{'-'.join(map(str, variant.resnet_stages))}+" if variant.is_hybrid else ""
    patch = "" if variant.is_hybrid else f"/{variant.patch_size}"
    registers = f"-reg{variant.register_tokens}" if variant.register_tokens else ""
    distilled = "-distilled" if variant.distilled else ""
    return f"{trunk}{variant.family}-{variant.width}x{variant.depth}{patch}{registers}{distilled}"


def swiglu_mlp_dim(hidden):
    """The packed width of DINOv2's SwiGLU for an MLP of `hidden` features (transformers' and
    keras-hub's): each half 2/3 of it, rounded up to a multiple of 8."""
    return 2 * ((int(hidden * 2 / 3) + 7) // 8 * 8)
