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

import math
import os

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import config_values as checks
from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import (
    CheckpointFormat,
    CheckpointInfo,
    RowTableReader,
    normalization_from,
)
from keras_vit.checkpoints.formats.config_variant import match_or_name
from keras_vit.checkpoints.formats.preprocess_configs import processor_preprocessing
from keras_vit.checkpoints.formats.rows import CONV, KeyRow, to_official
from keras_vit.checkpoints.formats.timm import open_weights
from keras_vit.variants import Variant

__all__ = ["FORMAT", "TRANSFORMERS_ROWS", "read_config", "transformers_to_official",
           "processor_normalization", "TRANSFORMERS_FIELDS"]


def _recognises(source):
    weights = open_weights(source)
    return weights is not None and any(
        n.endswith("embeddings.patch_embeddings.projection.weight") for n in weights.shapes)


class TransformersReader(RowTableReader):
    def __init__(self, source):
        config = read_config(source)
        super().__init__(source, FORMAT, open_weights(source), transformers_to_official)
        self._config = config

    def info(self):
        return folder_info(self, self._config, vit_config_variant(self._config))


# transformers' tanh GELUs (hidden_act); "gelu" is erf.
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")


def folder_info(reader, config, variant, **fields):
    """The `CheckpointInfo` of a transformers folder: the headers' shapes, the config's
    numerics and heads (transformers' defaults where absent), the saved processor's mean/std."""
    return CheckpointInfo(reader.shapes(), format=reader.format.name,
                          layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
                          approximate_gelu=config.get("hidden_act", "gelu") in TANH_GELU,
                          heads=config.get("num_attention_heads"),
                          normalization=processor_normalization(reader.source), variant=variant,
                          preprocessing=_processor_preprocessing(reader.source), **fields)


def _processor_preprocessing(source):
    """How the saved image processor resizes (preprocessor_config.json), or None."""
    config = source.json("preprocessor_config.json")
    if config is None:
        return None
    path = os.path.join(source.folder, "preprocessor_config.json")
    return processor_preprocessing(path, checks.check_object(path, config))


def folder_config(source, weights, model_type, refusal):
    """(path, config) of the folder's config.json, read once, where it names `model_type`;
    else a one-line refusal (`weights`: what the folder's weights are; `refusal`: what follows
    the model type it names instead)."""
    path = os.path.join(source.folder, "config.json")
    config = source.json("config.json")
    if config is None:
        raise CheckpointError(f"{source.path} holds transformers {weights} weights; pass the "
                              "directory holding it and its config.json, which sets the numerics.")
    checks.check_object(path, config)
    if config.get("model_type") != model_type:
        raise CheckpointError(f"{path} describes a {config.get('model_type')!r} model{refusal}")
    return path, config


def vit_config_variant(config):
    """The `Variant` a checked ViT config.json describes (transformers' ViTConfig defaults
    where a field is absent): the table's row where it is one (ViT-B_16 for
    google/vit-base-patch16-224), else one named after its sizes."""
    variant = Variant("", width=config.get("hidden_size", 768),
                      depth=config.get("num_hidden_layers", 12),
                      mlp_dim=config.get("intermediate_size", 3072),
                      heads=config.get("num_attention_heads", 12),
                      patch_size=config.get("patch_size", 16),
                      image_size=config.get("image_size", 224))
    return match_or_name(variant, ignore=("image_size",))


def processor_normalization(source):
    """The mean/std of the saved image processor (preprocessor_config.json) on pixels in
    [0, 1], or None where none was saved."""
    config = source.json("preprocessor_config.json")
    if config is None:
        return None
    path = os.path.join(source.folder, "preprocessor_config.json")
    checks.check_object(path, config)
    # The processor computes (x * rescale_factor - mean) / std on x in [0, 255].
    rescale = config.get("rescale_factor", 1 / 255) if config.get("do_rescale", True) else 1.0
    mean, std = config.get("image_mean", 0.5), config.get("image_std", 0.5)
    if not config.get("do_normalize", True):
        mean, std = 0.0, 1.0
    if not isinstance(rescale, (int, float)) or isinstance(rescale, bool) \
            or not 0 < rescale < math.inf:
        raise CheckpointError(f"{path}: rescale_factor {str(rescale)[:40]} is not a finite "
                              "positive number.")
    return normalization_from(path, mean, std, per_unit=255.0 * rescale)  # the map on x / 255


FORMAT = CheckpointFormat(
    name="transformers", description="transformers save_pretrained folder (config.json + "
                                     "model.safetensors, shards or pytorch_model.bin)",
    recognises=_recognises, open=TransformersReader, numerics=(False, 1e-12),
    # ViTModel's interpolate_pos_encoding: torch's bicubic, no antialiasing.
    position_resize="torch_bicubic", pickled=True)


def read_config(source):
    """The folder's config.json, read once and checked to be a plain ViT's."""
    path, config = folder_config(source, "ViT", "vit", "; keras_vit reads transformers' plain "
                                 "'vit' models (ViTModel, ViTForImageClassification).")
    act = config.get("hidden_act", "gelu")
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"{path}: hidden_act {act!r} is not a GELU; keras_vit's ViT "
                              "computes GELU only.")
    # A plain ViT's architecture is the model's (its shapes are checked against the weights');
    # its config's numbers are checked all the same, null left to transformers' default.
    checks.check_fields(path, config, {field: checks.optional(check)
                                for field, check in TRANSFORMERS_FIELDS.items()})
    return config


# The numbers keras_vit reads from a transformers ViT config.json (ViTHybrid's too), checked for
# type and range before anything is built.
TRANSFORMERS_FIELDS = {
    "hidden_size": checks.WIDTH, "num_hidden_layers": checks.LAYERS,
    "num_attention_heads": checks.HEADS, "intermediate_size": checks.WIDTH,
    "image_size": checks.PIXELS, "patch_size": checks.PIXELS,
    "num_channels": checks.WIDTH, "layer_norm_eps": checks.epsilon,
}


def _block_rows(layer, names, read_only=False):
    """The rows of one encoder block, `layer` its key prefix; `names` transformers' names of
    query, key, value, output projection, MLP in and MLP out (as released, or transformers
    5's)."""
    return (*g.attention(layer, names[:4], read_only=read_only),
            *g.dense(layer + names[4], g.MLP_IN, read_only=read_only),
            *g.dense(layer + names[5], g.MLP_OUT, read_only=read_only),
            *g.norm(layer + "layernorm_before", g.NORM1, read_only=read_only),
            *g.norm(layer + "layernorm_after", g.NORM2, read_only=read_only))


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
    *g.dense("embeddings.patch_embeddings.projection", g.PATCH, CONV),
    KeyRow("embeddings.cls_token", g.CLS),
    KeyRow("embeddings.position_embeddings", g.POSITIONS),
    *_block_rows("encoder.layer.{i}.", _RELEASED_NAMES),
    # transformers 5's in-memory names: read, never written (its norms are named as released).
    *_block_rows("layers.{i}.", _V5_NAMES, read_only=True),
    *g.norm("layernorm", g.ENCODER_NORM),
    # ViTModel's tanh pooler is the official pre_logits (the in21k files were converted so).
    *g.dense("pooler.dense", g.PRE_LOGITS),
    *g.dense("classifier", g.HEAD),
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
