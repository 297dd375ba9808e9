"""Hugging Face transformers ViT (`ViTModel` / `ViTForImageClassification`) -> official layout.

A `save_pretrained` directory holds `config.json` and `model.safetensors`. The
weights are torch Linear weights (out, in) with separate query/key/value; the
classifier is `classifier`; `ViTModel`'s tanh `pooler` is the official
`pre_logits` (the in21k files were converted that way). Both the released key
spelling (`vit.encoder.layer.N.attention.attention.query`) and transformers 5's
in-memory one (`vit.layers.N.attention.q_proj`) are read.
"""

import json
import os

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.config_values import check_config_values, check_object

__all__ = ["read_config", "is_transformers_layout"]

def is_transformers_layout(names):
    return any(n.endswith("embeddings.patch_embeddings.projection.weight") for n in names)


def read_config(directory):
    """The directory's config.json, checked to be a plain ViT's."""
    path = os.path.join(directory, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable config.json ({error}).") from error
    check_object(path, config)
    if config.get("model_type") != "vit":
        raise CheckpointError(f"{path} describes a {config.get('model_type')!r} model; keras_vit "
                              "reads transformers' plain 'vit' models (ViTModel, "
                              "ViTForImageClassification).")
    act = config.get("hidden_act", "gelu")
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"{path}: hidden_act {act!r} is not a GELU; keras_vit's ViT "
                              "computes GELU only.")
    check_config_values(path, config, counts=TRANSFORMERS_COUNTS, epsilons=("layer_norm_eps",))
    return config


TRANSFORMERS_COUNTS = ("hidden_size", "num_hidden_layers", "num_attention_heads",
                       "intermediate_size", "image_size", "patch_size", "num_channels")
