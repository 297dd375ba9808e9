"""transformers `save_pretrained` folders of the families (keras_vit/variants.py FAMILIES).

One row table per transformers model type, chosen by config.json's `model_type`:

    deit                   DeiTModel, DeiTForImageClassificationWithTeacher (distilled DeiT:
                           transformers' DeiT always has the distillation token),
                           DeiTForImageClassification (its one classifier, on the class
                           token, read as twice itself beside a zero distillation head)
    dinov2                 Dinov2Model (SwiGLU for the giant: use_swiglu_ffn)
    dinov2_with_registers  Dinov2WithRegistersModel
    siglip_vision_model    SiglipVisionModel (the MAP head: `head.*`)
    clip_vision_model      CLIPVisionModel, CLIPVisionModelWithProjection (the projection is
                           the head, a Dense without bias)

The config sets the numerics (hidden_act: "gelu" is erf, "gelu_pytorch_tanh" tanh,
"quick_gelu" CLIP's; layer_norm_eps) and the architecture (`family_variant`: a row of
FAMILIES where the config describes one, else one named after its sizes);
preprocessor_config.json, where saved, the normalisation. Two arrays have no row of their
own: DINOv2-with-registers' position embedding covers the class token, which the family row
does not embed (the class token's position is folded into the token, exactly: the model adds
it to that token alone), and CLIP's projection has no bias (a zero bias is read, and only a
zero bias written).
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
    shape_stand_ins,
)
from keras_vit.checkpoints.formats.config_values import (
    MAX_HEADS,
    MAX_LAYERS,
    MAX_PIXELS,
    MAX_WIDTH,
    check_architecture,
    check_fields,
    check_object,
    count,
    epsilon,
    flag,
    number,
    optional,
    string,
)
from keras_vit.checkpoints.formats.rows import (
    ADD_BATCH_AXIS,
    CONV,
    FUSED_QKV,
    FUSED_QKV_BIAS,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    LINEAR,
    KeyRow,
    Transform,
    from_official,
    to_official,
)
from keras_vit.checkpoints.formats.rows import (
    COPY as _COPY,
)
from keras_vit.checkpoints.formats.timm import open_weights
from keras_vit.checkpoints.formats.transformers import processor_normalization
from keras_vit.checkpoints.layout import (
    CLS_KEY,
    DIST_TOKEN_KEY,
    EMBEDDING_BIAS,
    EMBEDDING_KERNEL,
    ENCODER_NORM_BIAS,
    ENCODER_NORM_SCALE,
    HEAD_BIAS_KEY,
    HEAD_DIST_BIAS_KEY,
    HEAD_DIST_KERNEL_KEY,
    HEAD_KERNEL_KEY,
    KEY_BIAS,
    KEY_KERNEL,
    LN0_BIAS,
    LN0_SCALE,
    LN2_BIAS,
    LN2_SCALE,
    LS1_SCALE,
    LS3_SCALE,
    MAP_KEY_BIAS,
    MAP_KEY_KERNEL,
    MAP_LN_BIAS,
    MAP_LN_SCALE,
    MAP_MLP0_BIAS,
    MAP_MLP0_KERNEL,
    MAP_MLP1_BIAS,
    MAP_MLP1_KERNEL,
    MAP_OUT_BIAS,
    MAP_OUT_KERNEL,
    MAP_PROBE,
    MAP_QUERY_BIAS,
    MAP_QUERY_KERNEL,
    MAP_VALUE_BIAS,
    MAP_VALUE_KERNEL,
    MLP0_BIAS,
    MLP0_KERNEL,
    MLP1_BIAS,
    MLP1_KERNEL,
    OUT_BIAS,
    OUT_KERNEL,
    POS_EMBED_KEY,
    PRE_LOGITS_BIAS_KEY,
    PRE_LOGITS_KERNEL_KEY,
    PRE_NORM_BIAS,
    PRE_NORM_SCALE,
    QUERY_BIAS,
    QUERY_KERNEL,
    REG_TOKEN_KEY,
    VALUE_BIAS,
    VALUE_KERNEL,
)
from keras_vit.errors import ArgumentError
from keras_vit.variants import FAMILIES

__all__ = ["FORMAT", "FAMILY_SOURCES", "family_to_official", "official_to_family",
           "family_variant", "model_type_of"]


# CLIP's class embedding (D,) <-> the official class token (1, 1, D).
_TOKEN_VECTOR = Transform("token_vector", lambda a, heads: a.reshape(1, 1, -1) if a.ndim == 1 else a,
                          lambda a: a.reshape(-1))


def _pairs(prefix, parts):
    """Rows of (name, official weight, official bias, weight transform) -> weight and bias rows."""
    rows = []
    for name, weight, bias, transform in parts:
        rows.append(KeyRow(f"{prefix}{name}.weight", weight, transform))
        if bias is not None:
            rows.append(KeyRow(f"{prefix}{name}.bias", bias,
                               HEADS_BIAS if transform is HEADS_IN else None))
    return tuple(rows)


_ATTENTION = ((QUERY_KERNEL, QUERY_BIAS, HEADS_IN), (KEY_KERNEL, KEY_BIAS, HEADS_IN),
              (VALUE_KERNEL, VALUE_BIAS, HEADS_IN), (OUT_KERNEL, OUT_BIAS, HEADS_OUT))


def _named(names, parts):
    return tuple((name, *part) for name, part in zip(names, parts))


# ViT-style blocks as transformers' DeiT and DINOv2 save them.
_VIT_ATTENTION = _named(("attention.attention.query", "attention.attention.key",
                         "attention.attention.value", "attention.output.dense"), _ATTENTION)
# CLIP- and SigLIP-style blocks (self_attn, layer_norm1/2, mlp.fc1/2).
_CLIP_BLOCK = _pairs("encoder.layers.{i}.", (
    *_named(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"),
            _ATTENTION),
    ("layer_norm1", LN0_SCALE, LN0_BIAS, None), ("layer_norm2", LN2_SCALE, LN2_BIAS, None),
    ("mlp.fc1", MLP0_KERNEL, MLP0_BIAS, LINEAR), ("mlp.fc2", MLP1_KERNEL, MLP1_BIAS, LINEAR)))
_PATCH_TOKENS = (
    KeyRow("embeddings.patch_embeddings.projection.weight", EMBEDDING_KERNEL, CONV),
    KeyRow("embeddings.patch_embeddings.projection.bias", EMBEDDING_BIAS),
    KeyRow("embeddings.cls_token", CLS_KEY),
    KeyRow("embeddings.position_embeddings", POS_EMBED_KEY),
)

def _one_head_inverse(parts):
    head, dist = parts
    if np.any(dist):
        raise ArgumentError("DeiTForImageClassification has one head; this model's "
                            "distillation head is not zero.")
    return head / 2


def _one_head(transform):
    """DeiTForImageClassification's one `classifier` on the class token (the distillation
    token still in the sequence) as the distilled model's two heads: twice the classifier and
    a zero distillation head, whose average is the classifier's logits exactly (a factor of 2
    rounds nothing)."""
    def forward(a, heads):
        head = transform.forward(a, heads) * np.float32(2)
        return [head, np.zeros_like(head)]

    return Transform(f"one_head_{transform.name}", forward,
                     lambda parts: transform.inverse(_one_head_inverse(parts)))


DEIT_ROWS = (
    *_PATCH_TOKENS,
    KeyRow("embeddings.distillation_token", DIST_TOKEN_KEY),
    *_pairs("encoder.layer.{i}.", (
        *_VIT_ATTENTION,
        ("layernorm_before", LN0_SCALE, LN0_BIAS, None),
        ("layernorm_after", LN2_SCALE, LN2_BIAS, None),
        ("intermediate.dense", MLP0_KERNEL, MLP0_BIAS, LINEAR),
        ("output.dense", MLP1_KERNEL, MLP1_BIAS, LINEAR))),
    *_pairs("", (("layernorm", ENCODER_NORM_SCALE, ENCODER_NORM_BIAS, None),
                 # DeiTModel's tanh pooler is the official pre_logits, as in ViTModel.
                 ("pooler.dense", PRE_LOGITS_KERNEL_KEY, PRE_LOGITS_BIAS_KEY, LINEAR),
                 ("cls_classifier", HEAD_KERNEL_KEY, HEAD_BIAS_KEY, LINEAR),
                 ("distillation_classifier", HEAD_DIST_KERNEL_KEY, HEAD_DIST_BIAS_KEY, LINEAR))),
    # DeiTForImageClassification: read, never written (the writer writes the two heads).
    KeyRow("classifier.weight", (HEAD_KERNEL_KEY, HEAD_DIST_KERNEL_KEY), _one_head(LINEAR),
           read_only=True),
    KeyRow("classifier.bias", (HEAD_BIAS_KEY, HEAD_DIST_BIAS_KEY), _one_head(_COPY),
           read_only=True),
)

DINOV2_ROWS = (
    *_PATCH_TOKENS,
    KeyRow("embeddings.register_tokens", REG_TOKEN_KEY),
    *_pairs("encoder.layer.{i}.", (
        *_VIT_ATTENTION,
        ("norm1", LN0_SCALE, LN0_BIAS, None), ("norm2", LN2_SCALE, LN2_BIAS, None),
        ("mlp.fc1", MLP0_KERNEL, MLP0_BIAS, LINEAR), ("mlp.fc2", MLP1_KERNEL, MLP1_BIAS, LINEAR))),
    # The giant's SwiGLU: one packed input layer (silu(first half) * second half), as timm's.
    *_pairs("encoder.layer.{i}.", (("mlp.weights_in", MLP0_KERNEL, MLP0_BIAS, LINEAR),
                                   ("mlp.weights_out", MLP1_KERNEL, MLP1_BIAS, LINEAR))),
    KeyRow("encoder.layer.{i}.layer_scale1.lambda1", LS1_SCALE),
    KeyRow("encoder.layer.{i}.layer_scale2.lambda1", LS3_SCALE),
    *_pairs("", (("layernorm", ENCODER_NORM_SCALE, ENCODER_NORM_BIAS, None),)),
)

SIGLIP_ROWS = (
    KeyRow("embeddings.patch_embedding.weight", EMBEDDING_KERNEL, CONV),
    KeyRow("embeddings.patch_embedding.bias", EMBEDDING_BIAS),
    KeyRow("embeddings.position_embedding.weight", POS_EMBED_KEY, ADD_BATCH_AXIS),
    *_CLIP_BLOCK,
    *_pairs("", (("post_layernorm", ENCODER_NORM_SCALE, ENCODER_NORM_BIAS, None),)),
    # The MAP head: a torch MultiheadAttention (fused q, k, v) with a learned probe.
    KeyRow("head.probe", MAP_PROBE),
    KeyRow("head.attention.in_proj_weight", (MAP_QUERY_KERNEL, MAP_KEY_KERNEL, MAP_VALUE_KERNEL),
           FUSED_QKV),
    KeyRow("head.attention.in_proj_bias", (MAP_QUERY_BIAS, MAP_KEY_BIAS, MAP_VALUE_BIAS),
           FUSED_QKV_BIAS),
    *_pairs("head.", (("attention.out_proj", MAP_OUT_KERNEL, MAP_OUT_BIAS, HEADS_OUT),
                      ("layernorm", MAP_LN_SCALE, MAP_LN_BIAS, None),
                      ("mlp.fc1", MAP_MLP0_KERNEL, MAP_MLP0_BIAS, LINEAR),
                      ("mlp.fc2", MAP_MLP1_KERNEL, MAP_MLP1_BIAS, LINEAR))),
)

CLIP_ROWS = (
    KeyRow("embeddings.patch_embedding.weight", EMBEDDING_KERNEL, CONV),
    KeyRow("embeddings.class_embedding", CLS_KEY, _TOKEN_VECTOR),
    KeyRow("embeddings.position_embedding.weight", POS_EMBED_KEY, ADD_BATCH_AXIS),
    *_pairs("", (("pre_layrnorm", PRE_NORM_SCALE, PRE_NORM_BIAS, None),)),
    *_CLIP_BLOCK,
    # CLIP applies post_layernorm to the pooled class token only; norming every token first
    # (keras_vit's encoder_norm) gives the same pooled features.
    *_pairs("", (("post_layernorm", ENCODER_NORM_SCALE, ENCODER_NORM_BIAS, None),)),
    KeyRow("visual_projection.weight", HEAD_KERNEL_KEY, LINEAR),
)


@dataclasses.dataclass(frozen=True)
class FamilySource:
    """One transformers model type: its rows, the prefixes its wrappers add, the arrays
    inference never reads, and the FAMILIES row it builds."""

    rows: tuple
    family: str  # the FAMILIES row's family
    prefixes: tuple = ()  # removed before the rows apply ("deit." of the classifier)
    ignored: tuple = ()  # arrays for training only (DINOv2's mask_token)


FAMILY_SOURCES = {
    "deit": FamilySource(DEIT_ROWS, "DeiT", ("deit.",)),
    "dinov2": FamilySource(DINOV2_ROWS, "DINOv2", ("dinov2.",), ("embeddings.mask_token",)),
    "dinov2_with_registers": FamilySource(DINOV2_ROWS, "DINOv2", ("dinov2_with_registers.",),
                                          ("embeddings.mask_token",)),
    "siglip_vision_model": FamilySource(SIGLIP_ROWS, "SigLIP", ("vision_model.",)),
    "clip_vision_model": FamilySource(CLIP_ROWS, "CLIP", ("vision_model.",)),
}

_TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")
_ACTIVATIONS = ("gelu", *_TANH_GELU, "quick_gelu")


def family_to_official(model_type, sd, heads=None):
    """A family's transformers arrays -> official-key arrays. Keys no row takes pass through
    as "transformers:" + key, for the strict loader to name."""
    source = FAMILY_SOURCES[model_type]
    stripped = {}
    for key, array in sd.items():
        name = next((key[len(p):] for p in source.prefixes if key.startswith(p)), key)
        if name not in source.ignored:
            stripped[name] = array
    out = to_official(source.rows, stripped, heads, unknown_prefix="transformers:")
    if model_type == "dinov2_with_registers" and POS_EMBED_KEY in out and CLS_KEY in out:
        # The class token's position, added to it alone: folded into the token.
        pos = out[POS_EMBED_KEY]
        out[CLS_KEY] = out[CLS_KEY] + pos[:, :1]
        out[POS_EMBED_KEY] = pos[:, 1:]
    if model_type == "clip_vision_model" and HEAD_KERNEL_KEY in out:
        out[HEAD_BIAS_KEY] = np.zeros(out[HEAD_KERNEL_KEY].shape[-1:], np.float32)
    return out


def official_to_family(model_type, arrays):
    """Official-key arrays -> the model type's transformers keys (the inverse of
    `family_to_official`)."""
    arrays = dict(arrays)
    if model_type == "clip_vision_model" and HEAD_BIAS_KEY in arrays:
        if np.any(arrays.pop(HEAD_BIAS_KEY)):
            raise ArgumentError("CLIP's visual projection has no bias; this head has a non-zero "
                                "one. Save it with save_npz or save_safetensors.")
    out = from_official(FAMILY_SOURCES[model_type].rows, arrays, f"transformers {model_type}")
    if model_type == "dinov2_with_registers":
        pos, cls = out["embeddings.position_embeddings"], out["embeddings.cls_token"]
        out["embeddings.position_embeddings"] = np.concatenate([np.zeros_like(cls), pos], axis=1)
    return out


def model_type_of(source):
    """The family model type config.json names, or None (no config, or another model)."""
    if not source.is_dir or open_weights(source) is None:
        return None
    config = source.json("config.json")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return model_type if model_type in FAMILY_SOURCES else None


# The numbers read from a family's config.json, checked before anything is built.
_FIELDS = {
    "hidden_size": count(MAX_WIDTH), "num_hidden_layers": count(MAX_LAYERS),
    "num_attention_heads": count(MAX_HEADS), "intermediate_size": count(MAX_WIDTH),
    "image_size": count(MAX_PIXELS), "patch_size": count(MAX_PIXELS),
    "num_channels": count(MAX_WIDTH), "layer_norm_eps": epsilon, "hidden_act": string,
    "mlp_ratio": number(0, MAX_WIDTH), "use_swiglu_ffn": flag,
    "num_register_tokens": count(MAX_WIDTH), "layerscale_value": number(0, 1e3),
    "vision_use_head": flag,
}
_DEFAULTS = {"hidden_act": "gelu", "layer_norm_eps": 1e-12, "num_channels": 3}


def _read_config(source):
    path = os.path.join(source.folder, "config.json")
    config = check_object(path, source.json("config.json"))
    config = {**_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    check_fields(path, config, {f: optional(c) for f, c in _FIELDS.items()},
                 required=("hidden_size", "num_hidden_layers", "num_attention_heads",
                           "image_size", "patch_size"))
    if config["hidden_act"] not in _ACTIVATIONS:
        raise CheckpointError(f"{path}: hidden_act {config['hidden_act']!r} is none of the "
                              f"activations keras_vit computes ({', '.join(_ACTIVATIONS)}).")
    if config["model_type"] == "siglip_vision_model" and config.get("vision_use_head") is False:
        raise CheckpointError(f"{path}: vision_use_head is false; keras_vit's SigLIP pools with "
                              "the MAP head, which this model does not have.")
    check_architecture(path, family_variant(config), config["image_size"])
    return config


def family_variant(config):
    """The `Variant` a checked config describes: the row of FAMILIES it is (DINOv2-S/14 for
    facebook/dinov2-small), else that family's row resized and named after its sizes."""
    model_type = config["model_type"]
    width, depth = config["hidden_size"], config["num_hidden_layers"]
    swiglu = bool(config.get("use_swiglu_ffn"))
    if model_type.startswith("dinov2"):
        hidden = int(width * config.get("mlp_ratio", 4))
        # transformers' SwiGLU hidden width: 2/3 of it, rounded up to a multiple of 8; packed.
        mlp_dim = 2 * ((int(hidden * 2 / 3) + 7) // 8 * 8) if swiglu else hidden
    else:
        mlp_dim = config.get("intermediate_size", 4 * width)
    family = FAMILY_SOURCES[model_type].family
    base = {"deit": "DeiT-S/16-distilled", "dinov2": "DINOv2-S/14",
            "dinov2_with_registers": "DINOv2-S/14-reg4", "siglip_vision_model": "SigLIP-B/16",
            "clip_vision_model": "CLIP-B/16"}[model_type]
    fields = dict(width=width, depth=depth, mlp_dim=mlp_dim, heads=config["num_attention_heads"],
                  patch_size=config["patch_size"], image_size=config["image_size"])
    if model_type == "dinov2_with_registers":
        fields["register_tokens"] = config.get("num_register_tokens", 4)
    if swiglu:
        fields["feed_forward"] = "swiglu"
    if model_type == "clip_vision_model":  # OpenCLIP's towers on the Hub say "gelu"
        fields["activation"] = "quick_gelu" if config["hidden_act"] == "quick_gelu" else "gelu"
    variant = dataclasses.replace(FAMILIES[base], **fields)
    for row in FAMILIES.values():
        if row.family == family and dataclasses.replace(variant, name=row.name) == row:
            return row
    suffix = f"-reg{fields['register_tokens']}" if "register_tokens" in fields else ""
    suffix += "-distilled" if model_type == "deit" else ""
    return dataclasses.replace(
        variant, name=f"{family}-{width}x{depth}/{config['patch_size']}{suffix}")


def _recognises(source):
    return model_type_of(source) is not None


class FamilyReader(CheckpointReader):
    def __init__(self, source):
        super().__init__(source, FORMAT)
        self._config = _read_config(source)
        self._type = self._config["model_type"]
        self._weights = open_weights(source)

    def headers(self, heads=None):
        shapes = family_to_official(self._type, shape_stand_ins(self._weights.shapes), heads)
        return {k: ArrayHeader(v.shape, np.dtype("float32")) for k, v in shapes.items()}

    def read(self, keys, heads=None):
        arrays = family_to_official(self._type, self._weights.read(), heads)
        return {k: arrays[k] for k in keys}

    def info(self):
        config = self._config
        return CheckpointInfo({k: h.shape for k, h in self.headers().items()}, format=FORMAT.name,
                              layer_norm_epsilon=config["layer_norm_eps"],
                              approximate_gelu=config["hidden_act"] in _TANH_GELU,
                              heads=config["num_attention_heads"],
                              normalization=processor_normalization(self.source),
                              variant=family_variant(config))


FORMAT = CheckpointFormat(
    name="transformers_families",
    description="transformers save_pretrained folder of DeiT, DINOv2 (with registers), SigLIP "
                "or CLIP vision models (config.json model_type)",
    recognises=_recognises, open=FamilyReader, numerics=(False, 1e-6))
