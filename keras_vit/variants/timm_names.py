"""timm's architecture names, and the official variant each one builds.

A timm state dict does not record its head count, and timm registers models whose heads
differ from the official variant of the same width (its vit_base_patch16_gap_224 has 16; the
official B/16-gap has 12). A timm Hub folder's config.json names its architecture; this table
turns that name into the variant, heads included (variants.timm_variant; test_timm_names.py
checks each row against timm's own registry).
"""

import re

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
    "deit_tiny_patch16": ("DeiT-Ti/16", None),
    "deit_small_patch16": ("DeiT-S/16", None),
    "deit_base_patch16": ("DeiT-B/16", None),
    "deit_tiny_distilled_patch16": ("DeiT-Ti/16-distilled", None),
    "deit_small_distilled_patch16": ("DeiT-S/16-distilled", None),
    "deit_base_distilled_patch16": ("DeiT-B/16-distilled", None),
    "deit3_small_patch16": ("DeiT3-S/16", None),
    "deit3_base_patch16": ("DeiT3-B/16", None),
    "deit3_large_patch16": ("DeiT3-L/16", None),
    "vit_small_patch14_dinov2": ("DINOv2-S/14", None),
    "vit_base_patch14_dinov2": ("DINOv2-B/14", None),
    "vit_large_patch14_dinov2": ("DINOv2-L/14", None),
    "vit_giant_patch14_dinov2": ("DINOv2-g/14", None),
    "vit_small_patch14_reg4_dinov2": ("DINOv2-S/14-reg4", None),
    "vit_base_patch14_reg4_dinov2": ("DINOv2-B/14-reg4", None),
    "vit_large_patch14_reg4_dinov2": ("DINOv2-L/14-reg4", None),
    "vit_giant_patch14_reg4_dinov2": ("DINOv2-g/14-reg4", None),
    "vit_base_patch16_siglip": ("SigLIP-B/16", None),
    "vit_so400m_patch14_siglip": ("SigLIP-So400m/14", None),
    "vit_base_patch32_clip_quickgelu": ("CLIP-B/32", None),
    "vit_base_patch16_clip_quickgelu": ("CLIP-B/16", None),
    "vit_large_patch14_clip_quickgelu": ("CLIP-L/14", None),
    "flexivit_small": ("FlexiViT-S/16", None),
    "flexivit_base": ("FlexiViT-B/16", None),
    "flexivit_large": ("FlexiViT-L/16", None),
    "vit_base_patch16_gap": ("ViT-B_16-gap-norep", 16),
    "vit_tiny_r_s16_p8": ("R+ViT-Ti_16", None),
    "vit_small_r26_s32": ("R26+ViT-S_32", None),
    "vit_base_r26_s32": ("R26+ViT-B_32", None),
    "vit_base_r50_s16": ("R50+ViT-B_16", None),
    "vit_large_r50_s32": ("R50+ViT-L_32", None),
}
# The resolutions timm registers the same architecture at (SigLIP's 256, 378 and 512 among
# them); the pretrained file's position grid gives the size it is built at.
_SUFFIX = re.compile(r"_(?:224|256|378|384|512)$")


def timm_row(architecture):
    """(official variant name, heads or None) of timm's `architecture`
    ("vit_base_patch16_224", with or without a ".pretrained_tag"), or None when the table does
    not know it (variants.timm_variant turns it into the `Variant`)."""
    base = _SUFFIX.sub("", architecture.split(".", 1)[0])
    return TIMM_ARCHITECTURES.get(base)
