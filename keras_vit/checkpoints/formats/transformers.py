"""Hugging Face transformers ViT (`ViTModel` / `ViTForImageClassification`) -> official layout.

A `save_pretrained` directory holds `config.json` and `model.safetensors` (or
shards and their index), and `preprocessor_config.json` where the image
processor was saved too (its mean/std is the model's normalisation). The
weights are torch Linear weights (out, in) with separate query/key/value; the
classifier is `classifier`; `ViTModel`'s tanh `pooler` is the official
`pre_logits` (the in21k files were converted that way). Both the released key
spelling (`vit.encoder.layer.N.attention.attention.query`) and transformers 5's
in-memory one (`vit.layers.N.attention.q_proj`) are read.
"""

import os
import re

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import (
    ArrayHeader,
    CheckpointFormat,
    CheckpointInfo,
    CheckpointReader,
    ShapeOnly,
    normalization_from,
)
from keras_vit.checkpoints.formats.config_values import check_config_values, check_object
from keras_vit.checkpoints.formats.timm import open_weights
from keras_vit.checkpoints.formats.torch_layout import from_torch, split_heads

__all__ = ["FORMAT", "read_config", "transformers_to_official", "processor_normalization",
           "TRANSFORMERS_COUNTS"]

_POS, _NORM = "Transformer/posembed_input/pos_embedding", "Transformer/encoder_norm"


def _recognises(source):
    weights = open_weights(source)
    return weights is not None and any(
        n.endswith("embeddings.patch_embeddings.projection.weight") for n in weights.shapes)


class TransformersReader(CheckpointReader):
    def __init__(self, source):
        super().__init__(source, FORMAT)
        self._config = read_config(source)
        self._weights = open_weights(source)

    def headers(self, heads=None):
        shapes = transformers_to_official(ShapeOnly.of(self._weights.shapes), heads)
        return {k: ArrayHeader(v.shape, np.dtype("float32")) for k, v in shapes.items()}

    def read(self, keys, heads=None):
        arrays = transformers_to_official(self._weights.read(), heads)
        return {k: arrays[k] for k in keys}

    def info(self):
        config = self._config
        return CheckpointInfo({k: h.shape for k, h in self.headers().items()},
                              format="transformers",
                              layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
                              approximate_gelu=config.get("hidden_act", "gelu") != "gelu",
                              heads=config.get("num_attention_heads"),
                              normalization=processor_normalization(self.source))


def processor_normalization(source):
    """The mean/std of the saved image processor (preprocessor_config.json) on pixels in
    [0, 1], or None where none was saved."""
    config = source.json("preprocessor_config.json")
    if config is None:
        return None
    path = os.path.join(source.folder, "preprocessor_config.json")
    check_object(path, config)
    # The processor computes (x * rescale_factor - mean) / std on x in [0, 255].
    rescale = config.get("rescale_factor", 1 / 255) if config.get("do_rescale", True) else 1.0
    mean, std = config.get("image_mean", 0.5), config.get("image_std", 0.5)
    if not config.get("do_normalize", True):
        mean, std = 0.0, 1.0
    mean, std = normalization_from(path, mean, std)
    if not isinstance(rescale, (int, float)) or isinstance(rescale, bool) or not rescale > 0:
        raise CheckpointError(f"{path}: rescale_factor {str(rescale)[:40]} is not a positive number.")
    to_unit = 255.0 * rescale  # the same map, on x / 255
    return (tuple(m / to_unit for m in mean), tuple(s / to_unit for s in std))


FORMAT = CheckpointFormat(
    name="transformers", description="transformers save_pretrained folder (config.json + "
                                     "model.safetensors or shards)",
    recognises=_recognises, open=TransformersReader, numerics=(False, 1e-12))


def read_config(source):
    """The folder's config.json, read once and checked to be a plain ViT's."""
    path = os.path.join(source.folder, "config.json")
    config = source.json("config.json")
    if config is None:
        raise CheckpointError(f"{source.path} holds transformers ViT weights; pass the directory "
                              "holding it and its config.json, which sets the numerics.")
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


_TRANSFORMERS_TOP = {
    "embeddings.patch_embeddings.projection.weight": "embedding/kernel",
    "embeddings.patch_embeddings.projection.bias": "embedding/bias",
    "embeddings.cls_token": "cls", "embeddings.position_embeddings": _POS,
    "layernorm.weight": f"{_NORM}/scale", "layernorm.bias": f"{_NORM}/bias",
    "pooler.dense.weight": "pre_logits/kernel", "pooler.dense.bias": "pre_logits/bias",
    "classifier.weight": "head/kernel", "classifier.bias": "head/bias",
}


_TRANSFORMERS_BLOCK = {
    "attention.attention.query": "q", "attention.q_proj": "q",
    "attention.attention.key": "k", "attention.k_proj": "k",
    "attention.attention.value": "v", "attention.v_proj": "v",
    "attention.output.dense": "o", "attention.o_proj": "o",
    "layernorm_before": "ln0", "layernorm_after": "ln2",
    "intermediate.dense": "fc1", "mlp.fc1": "fc1", "output.dense": "fc2", "mlp.fc2": "fc2",
}


def transformers_to_official(sd, heads=None):
    out = {}
    for key, a in sd.items():
        name = key.removeprefix("vit.")
        m = re.fullmatch(r"(?:encoder\.layer|layers)\.(\d+)\.(.+)\.(weight|bias)", name)
        if m and m.group(2) in _TRANSFORMERS_BLOCK:
            _transformers_block(out, f"Transformer/encoderblock_{m.group(1)}",
                                _TRANSFORMERS_BLOCK[m.group(2)], m.group(3), a, heads)
        elif name in _TRANSFORMERS_TOP:
            out[_TRANSFORMERS_TOP[name]] = from_torch(_TRANSFORMERS_TOP[name], a)
        else:
            out["transformers:" + key] = a  # the strict loader names it as unexpected
    return out


def _transformers_block(out, b, part, kind, a, heads):
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


