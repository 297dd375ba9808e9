"""The format tables run backwards: official-key arrays -> a library's keys, for the tests
that write a library's files (or check that reading inverts writing). keras_vit itself writes
the official .npz and timm's layout only (save_npz, save_safetensors)."""

import numpy as np

from keras_vit.checkpoints.formats.big_vision import BIG_VISION_ROWS
from keras_vit.checkpoints.formats.dinov2 import DINOV2_ROWS, MASK_TOKEN
from keras_vit.checkpoints.formats.keras_hub import KERAS_HUB_ROWS
from keras_vit.checkpoints.formats.open_clip import OPEN_CLIP_ROWS
from keras_vit.checkpoints.formats.rows import from_official
from keras_vit.checkpoints.formats.transformers import TRANSFORMERS_ROWS
from keras_vit.checkpoints.formats.transformers_families import FAMILY_SOURCES
from keras_vit.checkpoints.formats.transformers_hybrid import HYBRID_ROWS


def _unfold_class_position(arrays, token, positions):
    """The inverse of rows.fold_class_position: the class token keeps its position, written
    as zero in front of the position embedding."""
    arrays[positions] = np.concatenate([np.zeros_like(arrays[token]), arrays[positions]], axis=1)
    return arrays


def official_to_dinov2(arrays):
    """Official-key arrays -> DINOv2's release keys (the SwiGLU written as fc1/fc2, which timm
    reads too); with registers, the class token's position is written as zero and the token
    keeps it. The mask token, which timm and keras_vit recognise the layout by, is zero."""
    out = from_official(DINOV2_ROWS, arrays, "DINOv2")
    out[MASK_TOKEN] = np.zeros((1, out["patch_embed.proj.weight"].shape[0]), np.float32)
    if "register_tokens" in out:
        _unfold_class_position(out, "cls_token", "pos_embed")
    return out


def official_to_transformers(arrays):
    """Official-key arrays -> transformers ViT keys (as `ViTModel` stores them, and its
    classifier's `classifier`)."""
    return from_official(TRANSFORMERS_ROWS, arrays, "transformers")


def official_to_vit_hybrid(arrays):
    """Official-key arrays -> ViTHybrid keys (as `ViTHybridModel` stores them)."""
    return from_official(HYBRID_ROWS, arrays, "transformers ViTHybrid")


def official_to_family(model_type, arrays):
    """Official-key arrays -> the model type's transformers keys."""
    out = from_official(FAMILY_SOURCES[model_type].rows, arrays, f"transformers {model_type}")
    if model_type == "dinov2_with_registers":
        _unfold_class_position(out, "embeddings.cls_token", "embeddings.position_embeddings")
    return out


def official_to_open_clip(arrays):
    """Official-key arrays (a CLIP model's) -> open_clip's image-tower keys."""
    return from_official(OPEN_CLIP_ROWS, arrays, "open_clip")


def official_to_keras_hub(arrays):
    """Official-key arrays -> keras-hub ViT variable paths (a backbone, and its classifier's
    pre_logits and head)."""
    return from_official(KERAS_HUB_ROWS, arrays, "keras-hub")


def official_to_big_vision(arrays):
    """Official-key arrays -> the image tower's keys (without `params/img/`), block by block."""
    return from_official(BIG_VISION_ROWS, arrays, "big_vision")
