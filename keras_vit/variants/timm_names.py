"""timm's architecture names, and the official variant each one builds.

A timm state dict does not record its head count, and timm registers models whose heads
differ from the official variant of the same width (its vit_base_patch16_gap_224 has 16; the
official B/16-gap has 12). A timm Hub folder's config.json names its architecture; this table
turns that name into the variant, heads included (variants.timm_variant; test_timm_names.py
checks each row against timm's own registry).
"""

import re

from keras_vit.variants.table import FAMILY_TIMM_NAMES

__all__ = ["TIMM_ARCHITECTURES", "timm_row"]

# timm architecture (resolution suffix and pretrained tag removed) -> (official variant,
# heads where timm's differ from the official variant's, else None).
TIMM_ARCHITECTURES = {
    "vit_tiny_patch16": ("ViT-Ti_16", None),
    "vit_small_patch16": ("ViT-S_16", None),
    "vit_small_patch32": ("ViT-S_32", None),
    "vit_base_patch8": ("ViT-B_8", None),
    "vit_base_patch16": ("ViT-B_16", None),
    "vit_base_patch32": ("ViT-B_32", None),
    "vit_large_patch16": ("ViT-L_16", None),
    "vit_large_patch32": ("ViT-L_32", None),
    "vit_huge_patch14": ("ViT-H_14", None),
    "vit_base_patch16_gap": ("ViT-B_16-gap-norep", 16),
    "vit_tiny_r_s16_p8": ("R+ViT-Ti_16", None),
    "vit_small_r26_s32": ("R26+ViT-S_32", None),
    "vit_base_r26_s32": ("R26+ViT-B_32", None),
    "vit_base_r50_s16": ("R50+ViT-B_16", None),
    "vit_large_r50_s32": ("R50+ViT-L_32", None),
    # The families' rows carry their timm names (table.py).
    **{timm: (row, None) for timm, row in FAMILY_TIMM_NAMES.items()},
}
# timm registers an architecture at each resolution it was trained at under one rule, its
# base name and "_<pixels>" (SigLIP's 256, 378 and 512, EVA-02's 336 and 448 among them): the
# rule, not a list, so a resolution timm adds needs no edit here; the pretrained file's
# position grid gives the size it is built at. No base name ends in "_<digits>".
_SUFFIX = re.compile(r"_\d+$")


def timm_row(architecture):
    """(official variant name, heads or None) of timm's `architecture`
    ("vit_base_patch16_224", with or without a ".pretrained_tag"), or None when the table does
    not know it (variants.timm_variant turns it into the `Variant`)."""
    base = _SUFFIX.sub("", architecture.split(".", 1)[0])
    return TIMM_ARCHITECTURES.get(base)
