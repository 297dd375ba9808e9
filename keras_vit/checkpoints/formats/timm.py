"""timm's VisionTransformer state dicts (safetensors): recognising them.

timm stores torch Linear weights (out, in), a fused `qkv` (3D, D), `cls_token`,
`pos_embed`, `patch_embed.proj` (D, C, p, p), `norm` and `head`; no pre_logits.
The key translation both ways is `layout.timm_to_official` / `layout.official_to_timm`.
"""

import json
import os

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.config_values import check_object
from keras_vit.variants import timm_variant

__all__ = ["is_timm_layout", "heads_from_config"]


def is_timm_layout(names):
    return "patch_embed.proj.weight" in names or "patch_embed.backbone.stem.conv.weight" in names


def heads_from_config(directory):
    """The attention heads of the architecture a timm folder's config.json names, or None
    where the folder has no config.json or the architecture is not in variants.py's timm table."""
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            config = check_object(path, json.load(f))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable config.json ({error}).") from error
    architecture = config.get("architecture")
    if not isinstance(architecture, str):
        return None
    variant = timm_variant(architecture)
    return variant.heads if variant is not None else None
