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

import dataclasses
import os

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import (
    ArrayHeader,
    CheckpointFormat,
    CheckpointInfo,
    CheckpointReader,
    normalization_from,
    shape_stand_ins,
)
from keras_vit.checkpoints.formats.config_values import (
    MAX_HEADS,
    MAX_LAYERS,
    MAX_PIXELS,
    MAX_WIDTH,
    check_fields,
    check_object,
    count,
    epsilon,
    optional,
)
from keras_vit.checkpoints.formats.rows import (
    CONV,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    LINEAR,
    KeyRow,
    from_official,
    to_official,
)
from keras_vit.checkpoints.formats.timm import open_weights
from keras_vit.checkpoints.layout import (
    CLS_KEY,
    EMBEDDING_BIAS,
    EMBEDDING_KERNEL,
    ENCODER_NORM_BIAS,
    ENCODER_NORM_SCALE,
    HEAD_BIAS_KEY,
    HEAD_KERNEL_KEY,
    KEY_BIAS,
    KEY_KERNEL,
    LN0_BIAS,
    LN0_SCALE,
    LN2_BIAS,
    LN2_SCALE,
    MLP0_BIAS,
    MLP0_KERNEL,
    MLP1_BIAS,
    MLP1_KERNEL,
    OUT_BIAS,
    OUT_KERNEL,
    POS_EMBED_KEY,
    PRE_LOGITS_BIAS_KEY,
    PRE_LOGITS_KERNEL_KEY,
    QUERY_BIAS,
    QUERY_KERNEL,
    VALUE_BIAS,
    VALUE_KERNEL,
)
from keras_vit.variants import Variant, table_variant

__all__ = ["FORMAT", "TRANSFORMERS_ROWS", "read_config", "transformers_to_official",
           "official_to_transformers", "processor_normalization",
           "TRANSFORMERS_FIELDS"]


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
        shapes = transformers_to_official(shape_stand_ins(self._weights.shapes), heads)
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
                              normalization=processor_normalization(self.source),
                              variant=vit_config_variant(config))


def vit_config_variant(config):
    """The `Variant` a checked ViT config.json describes (transformers' ViTConfig defaults
    where a field is absent): the table's row where it is one (ViT-B_16 for
    google/vit-base-patch16-224), else one named after its sizes."""
    width, depth = config.get("hidden_size", 768), config.get("num_hidden_layers", 12)
    variant = Variant(f"ViT-{width}x{depth}_{config.get('patch_size', 16)}", width=width,
                      depth=depth, mlp_dim=config.get("intermediate_size", 3072),
                      heads=config.get("num_attention_heads", 12),
                      patch_size=config.get("patch_size", 16),
                      image_size=config.get("image_size", 224))
    found = table_variant(dataclasses.replace(variant, image_size=224))
    return found if found.name != variant.name else variant


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
    # A plain ViT's architecture is the model's (its shapes are checked against the weights');
    # its config's numbers are checked all the same, null left to transformers' default.
    check_fields(path, config, {field: optional(check)
                                for field, check in TRANSFORMERS_FIELDS.items()})
    return config


# The numbers keras_vit reads from a transformers ViT config.json (ViTHybrid's too), checked for
# type and range before anything is built.
TRANSFORMERS_FIELDS = {
    "hidden_size": count(MAX_WIDTH), "num_hidden_layers": count(MAX_LAYERS),
    "num_attention_heads": count(MAX_HEADS), "intermediate_size": count(MAX_WIDTH),
    "image_size": count(MAX_PIXELS), "patch_size": count(MAX_PIXELS),
    "num_channels": count(MAX_WIDTH), "layer_norm_eps": epsilon,
}


def _block_rows(layer, names, read_only=False):
    """The rows of one encoder block, `layer` its key prefix; `names` maps each official
    part to transformers' name of it (the released names, or transformers 5's)."""
    parts = ((names[0], QUERY_KERNEL, QUERY_BIAS, HEADS_IN),
             (names[1], KEY_KERNEL, KEY_BIAS, HEADS_IN),
             (names[2], VALUE_KERNEL, VALUE_BIAS, HEADS_IN),
             (names[3], OUT_KERNEL, OUT_BIAS, HEADS_OUT),
             (names[4], MLP0_KERNEL, MLP0_BIAS, LINEAR),
             (names[5], MLP1_KERNEL, MLP1_BIAS, LINEAR))
    rows = []
    for name, kernel, bias, transform in parts:
        rows += [KeyRow(f"{layer}.{name}.weight", kernel, transform, read_only),
                 KeyRow(f"{layer}.{name}.bias", bias, HEADS_BIAS if transform is HEADS_IN else None,
                        read_only)]
    for name, scale, bias in (("layernorm_before", LN0_SCALE, LN0_BIAS),
                              ("layernorm_after", LN2_SCALE, LN2_BIAS)):
        rows += [KeyRow(f"{layer}.{name}.weight", scale, read_only=read_only),
                 KeyRow(f"{layer}.{name}.bias", bias, read_only=read_only)]
    return rows


# query, key, value, output projection, MLP in, MLP out: as released (and written), then as
# transformers 5 names them in memory.
_RELEASED_NAMES = ("attention.attention.query", "attention.attention.key",
                   "attention.attention.value", "attention.output.dense", "intermediate.dense",
                   "output.dense")
_V5_NAMES = ("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj",
             "mlp.fc1", "mlp.fc2")

# transformers' ViT, row by row (formats/rows.py), keys without the classifier model's "vit."
# prefix (`transformers_to_official` removes it).
TRANSFORMERS_ROWS = (
    KeyRow("embeddings.patch_embeddings.projection.weight", EMBEDDING_KERNEL, CONV),
    KeyRow("embeddings.patch_embeddings.projection.bias", EMBEDDING_BIAS),
    KeyRow("embeddings.cls_token", CLS_KEY),
    KeyRow("embeddings.position_embeddings", POS_EMBED_KEY),
    *_block_rows("encoder.layer.{i}", _RELEASED_NAMES),
    # transformers 5's in-memory names: read, never written (its norms are named as released).
    *_block_rows("layers.{i}", _V5_NAMES, read_only=True),
    KeyRow("layernorm.weight", ENCODER_NORM_SCALE),
    KeyRow("layernorm.bias", ENCODER_NORM_BIAS),
    # ViTModel's tanh pooler is the official pre_logits (the in21k files were converted so).
    KeyRow("pooler.dense.weight", PRE_LOGITS_KERNEL_KEY, LINEAR),
    KeyRow("pooler.dense.bias", PRE_LOGITS_BIAS_KEY),
    KeyRow("classifier.weight", HEAD_KERNEL_KEY, LINEAR),
    KeyRow("classifier.bias", HEAD_BIAS_KEY),
)


def transformers_to_official(sd, heads=None):
    """transformers ViT arrays -> official-key arrays, attention split into `heads` heads.
    Keys it does not know pass through (prefixed "transformers:"), for the strict loader."""
    stripped = {key.removeprefix("vit."): key for key in sd}
    out = to_official(TRANSFORMERS_ROWS, {k: sd[key] for k, key in stripped.items()}, heads,
                      unknown_prefix="transformers:")
    # An unknown key is named as stored, "vit." included.
    return {(f"transformers:{stripped[k[len('transformers:'):]]}"
             if k.startswith("transformers:") else k): v for k, v in out.items()}


def official_to_transformers(arrays):
    """Official-key arrays -> transformers ViT keys (as `ViTModel` stores them, and its
    classifier's `classifier`)."""
    return from_official(TRANSFORMERS_ROWS, arrays, "transformers")
