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
import re

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.timm import split_heads

__all__ = ["read_config", "transformers_to_official", "is_transformers_layout"]

_BLOCK = {
    "attention.attention.query": "q", "attention.q_proj": "q",
    "attention.attention.key": "k", "attention.k_proj": "k",
    "attention.attention.value": "v", "attention.v_proj": "v",
    "attention.output.dense": "o", "attention.o_proj": "o",
    "layernorm_before": "ln0", "layernorm_after": "ln2",
    "intermediate.dense": "fc1", "mlp.fc1": "fc1", "output.dense": "fc2", "mlp.fc2": "fc2",
}


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
    if config.get("model_type") != "vit":
        raise CheckpointError(f"{path} describes a {config.get('model_type')!r} model; keras_vit "
                              "reads transformers' plain 'vit' models (ViTModel, "
                              "ViTForImageClassification).")
    act = config.get("hidden_act", "gelu")
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"{path}: hidden_act {act!r} is not a GELU; keras_vit's ViT "
                              "computes GELU only.")
    return config


def transformers_to_official(sd, heads=None):
    out = {}
    for key, a in sd.items():
        name = key.removeprefix("vit.")
        m = re.fullmatch(r"(?:encoder\.layer|layers)\.(\d+)\.(.+)\.(weight|bias)", name)
        if m and m.group(2) in _BLOCK:
            _block(out, f"Transformer/encoderblock_{m.group(1)}", _BLOCK[m.group(2)],
                   m.group(3), a, heads)
        elif name == "embeddings.patch_embeddings.projection.weight":
            out["embedding/kernel"] = a.transpose(2, 3, 1, 0)
        elif name == "embeddings.patch_embeddings.projection.bias":
            out["embedding/bias"] = a
        elif name == "embeddings.cls_token":
            out["cls"] = a
        elif name == "embeddings.position_embeddings":
            out["Transformer/posembed_input/pos_embedding"] = a
        elif name in ("layernorm.weight", "layernorm.bias"):
            out["Transformer/encoder_norm/" + ("scale" if name.endswith("weight") else "bias")] = a
        elif name in ("pooler.dense.weight", "classifier.weight"):
            out[("pre_logits" if name.startswith("pooler") else "head") + "/kernel"] = a.T
        elif name in ("pooler.dense.bias", "classifier.bias"):
            out[("pre_logits" if name.startswith("pooler") else "head") + "/bias"] = a
        else:
            out["transformers:" + key] = a  # the strict loader names it as unexpected
    return out


def _block(out, b, part, kind, a, heads):
    mha = f"{b}/MultiHeadDotProductAttention_1"
    if part in ("ln0", "ln2"):
        out[f"{b}/LayerNorm_{part[2]}/{'scale' if kind == 'weight' else 'bias'}"] = a
    elif part in ("q", "k", "v"):
        name = {"q": "query", "k": "key", "v": "value"}[part]
        if kind == "weight":
            out[f"{mha}/{name}/kernel"] = split_heads(a.T, heads, axis=1)
        else:
            out[f"{mha}/{name}/bias"] = split_heads(a, heads, axis=0)
    elif part == "o":
        out[f"{mha}/out/{'kernel' if kind == 'weight' else 'bias'}"] = \
            split_heads(a.T, heads, axis=0) if kind == "weight" else a
    else:
        dense = f"{b}/MlpBlock_3/Dense_{int(part[2]) - 1}"
        out[f"{dense}/{'kernel' if kind == 'weight' else 'bias'}"] = a.T if kind == "weight" else a
