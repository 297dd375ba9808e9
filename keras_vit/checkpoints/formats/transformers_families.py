"""transformers `save_pretrained` folders of the families (keras_vit/variants/table.py FAMILIES).

One row table per transformers model type, chosen by config.json's `model_type`:

    deit                   DeiTModel, DeiTForImageClassificationWithTeacher (distilled DeiT:
                           transformers' DeiT always has the distillation token),
                           DeiTForImageClassification (its one classifier, on the class
                           token, read as twice itself beside a zero distillation head)
    dinov2                 Dinov2Model (SwiGLU for the giant: use_swiglu_ffn);
                           Dinov2ForImageClassification's backbone (its classifier, on the
                           class token beside the mean of the patch tokens, is no keras_vit
                           head: a load with a head is refused saying so)
    dinov2_with_registers  Dinov2WithRegistersModel (0 registers: Dinov2's layout)
    siglip_vision_model    SiglipVisionModel (the MAP head: `head.*`)
    siglip2_vision_model   Siglip2VisionModel (SigLIP 2 NaFlex: a Linear on flattened patches,
                           a square position table of `num_patches`; no image_size)
    clip_vision_model      CLIPVisionModel, CLIPVisionModelWithProjection (the projection is
                           the head, a Dense without bias)
    clip, siglip           CLIPModel, SiglipModel (two towers): the image tower, by its
                           vision_config, and CLIP's visual_projection as the head; the text
                           tower left
    dinov3_vit             DINOv3ViTModel (RoPE, no position table; its gated MLP, S+ and H+,
                           as the split SwiGLU: gate_proj the gate, up_proj the value)
    aimv2_vision_model     Aimv2VisionModel (RMSNorm, the patch embedding's too; the SwiGLU;
                           its attention-pooling `head`, which timm's AIMv2 does not have, is
                           no keras_vit head: a load with a head is refused saying so)

The config sets the numerics (hidden_act: "gelu" is erf, "gelu_pytorch_tanh" tanh,
"quick_gelu" CLIP's; layer_norm_eps) and the architecture (`family_variant`: a row of
FAMILIES where the config describes one, else one named after its sizes);
preprocessor_config.json, where saved, the normalisation. DINOv2-with-registers' position
embedding covers the class token, which the family row does not embed: the class token's
position is folded into the token (rows.fold_class_position), exactly, as the model adds it to
that token alone. CLIP's projection has no bias: the head's bias is read as zero
(rows.bias_free).
"""

import dataclasses
import math
import os

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import config_values as checks
from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import CheckpointFormat, RowTableReader
from keras_vit.checkpoints.formats.config_variant import (
    DinoV3Spelling,
    check_dinov3,
    dinov3_fields,
    match_or_name,
    swiglu_mlp_dim,
)
from keras_vit.checkpoints.formats.rows import (
    ADD_BATCH_AXIS,
    CONV,
    COPY,
    HEADS_OUT,
    LINEAR,
    TOKEN_VECTOR,
    KeyRow,
    Transform,
    fold_class_position,
    to_official,
)
from keras_vit.checkpoints.formats.timm import PATCH_LINEAR, open_weights
from keras_vit.checkpoints.formats.transformers import TANH_GELU, folder_info
from keras_vit.errors import ArgumentError
from keras_vit.layer_names import EMBEDDING_NORM
from keras_vit.variants import FAMILIES

__all__ = ["FORMAT", "FAMILY_SOURCES", "family_to_official", "family_variant", "model_type_of"]


# ViT-style attention as transformers' DeiT and DINOv2 save it.
_VIT_ATTENTION = ("attention.attention.query", "attention.attention.key",
                  "attention.attention.value", "attention.output.dense")
# CLIP- and SigLIP-style blocks (self_attn, layer_norm1/2, mlp.fc1/2).
_CLIP = "encoder.layers.{i}."
_CLIP_BLOCK = (
    *g.attention(_CLIP + "self_attn.", ("q_proj", "k_proj", "v_proj", "out_proj")),
    *g.norm(_CLIP + "layer_norm1", g.NORM1), *g.norm(_CLIP + "layer_norm2", g.NORM2),
    *g.dense(_CLIP + "mlp.fc1", g.MLP_IN), *g.dense(_CLIP + "mlp.fc2", g.MLP_OUT))
_PATCH_TOKENS = (
    *g.dense("embeddings.patch_embeddings.projection", g.PATCH, CONV),
    KeyRow("embeddings.cls_token", g.CLS),
    KeyRow("embeddings.position_embeddings", g.POSITIONS),
)
_VIT = "encoder.layer.{i}."


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
    KeyRow("embeddings.distillation_token", g.DIST_TOKEN),
    *g.attention(_VIT, _VIT_ATTENTION),
    *g.norm(_VIT + "layernorm_before", g.NORM1), *g.norm(_VIT + "layernorm_after", g.NORM2),
    *g.dense(_VIT + "intermediate.dense", g.MLP_IN), *g.dense(_VIT + "output.dense", g.MLP_OUT),
    *g.norm("layernorm", g.ENCODER_NORM),
    # DeiTModel's tanh pooler is the official pre_logits, as in ViTModel.
    *g.dense("pooler.dense", g.PRE_LOGITS),
    *g.dense("cls_classifier", g.HEAD),
    *g.dense("distillation_classifier", g.HEAD_DIST),
    # DeiTForImageClassification: read, never written (the writer writes the two heads).
    KeyRow("classifier.weight", (g.HEAD.kernel, g.HEAD_DIST.kernel), _one_head(LINEAR),
           read_only=True),
    KeyRow("classifier.bias", (g.HEAD.bias, g.HEAD_DIST.bias), _one_head(COPY), read_only=True),
)

DINOV2_ROWS = (
    *_PATCH_TOKENS,
    KeyRow("embeddings.register_tokens", g.REGISTERS),
    *g.attention(_VIT, _VIT_ATTENTION),
    *g.norm(_VIT + "norm1", g.NORM1), *g.norm(_VIT + "norm2", g.NORM2),
    *g.dense(_VIT + "mlp.fc1", g.MLP_IN), *g.dense(_VIT + "mlp.fc2", g.MLP_OUT),
    # The giant's SwiGLU: one packed input layer (silu(first half) * second half), as timm's.
    *g.dense(_VIT + "mlp.weights_in", g.MLP_IN), *g.dense(_VIT + "mlp.weights_out", g.MLP_OUT),
    KeyRow(_VIT + "layer_scale1.lambda1", g.LAYER_SCALE1),
    KeyRow(_VIT + "layer_scale2.lambda1", g.LAYER_SCALE2),
    *g.norm("layernorm", g.ENCODER_NORM),
)

_MAP_QUERY, _MAP_KEY, _MAP_VALUE, _MAP_OUT = g.MAP_ATTENTION
SIGLIP_ROWS = (
    *g.dense("embeddings.patch_embedding", g.PATCH, CONV),
    KeyRow("embeddings.position_embedding.weight", g.POSITIONS, ADD_BATCH_AXIS),
    *_CLIP_BLOCK,
    *g.norm("post_layernorm", g.ENCODER_NORM),
    # The MAP head: a torch MultiheadAttention (fused q, k, v) with a learned probe.
    KeyRow("head.probe", g.MAP_PROBE),
    *g.fused_qkv("head.attention.in_proj_weight", "head.attention.in_proj_bias",
                 g.MAP_ATTENTION),
    *g.dense("head.attention.out_proj", _MAP_OUT, HEADS_OUT),
    *g.norm("head.layernorm", g.MAP_NORM),
    *g.dense("head.mlp.fc1", g.MAP_MLP_IN), *g.dense("head.mlp.fc2", g.MAP_MLP_OUT),
)

# SigLIP 2 NaFlex: SigLIP's tower with the patch embedding a Linear on flattened patches.
SIGLIP2_ROWS = (*g.dense("embeddings.patch_embedding", g.PATCH, PATCH_LINEAR), *SIGLIP_ROWS[2:])

CLIP_ROWS = (
    KeyRow("embeddings.patch_embedding.weight", g.PATCH.kernel, CONV),
    KeyRow("embeddings.class_embedding", g.CLS, TOKEN_VECTOR),
    KeyRow("embeddings.position_embedding.weight", g.POSITIONS, ADD_BATCH_AXIS),
    *g.norm("pre_layrnorm", g.PRE_NORM),
    *_CLIP_BLOCK,
    # CLIP applies post_layernorm to the pooled class token only; norming every token first
    # (keras_vit's encoder_norm) gives the same pooled features.
    *g.norm("post_layernorm", g.ENCODER_NORM),
    # The projection has no bias: the head, with a zero bias.
    *g.bias_free_dense("visual_projection.weight", g.HEAD),
)


# DINOv3ViTModel: its blocks under layer (saved so), q/k/v/o projections (the key without a bias
# where the family has none), LayerScale as lambda1, and a plain or gated MLP.
_DINOV3 = "layer.{i}."
_DINOV3_COMMON = (
    *g.dense("embeddings.patch_embeddings", g.PATCH, CONV),
    KeyRow("embeddings.cls_token", g.CLS),
    KeyRow("embeddings.register_tokens", g.REGISTERS),
    *g.attention(_DINOV3 + "attention.", ("q_proj", "k_proj", "v_proj", "o_proj")),
    *g.norm(_DINOV3 + "norm1", g.NORM1), *g.norm(_DINOV3 + "norm2", g.NORM2),
    KeyRow(_DINOV3 + "layer_scale1.lambda1", g.LAYER_SCALE1),
    KeyRow(_DINOV3 + "layer_scale2.lambda1", g.LAYER_SCALE2),
    *g.dense(_DINOV3 + "mlp.down_proj", g.MLP_OUT),
    *g.norm("norm", g.ENCODER_NORM),
)
DINOV3_ROWS = (*_DINOV3_COMMON, *g.dense(_DINOV3 + "mlp.up_proj", g.MLP_IN))
DINOV3_GATED_ROWS = (*_DINOV3_COMMON, *g.dense(_DINOV3 + "mlp.gate_proj", g.MLP_IN),
                     *g.dense(_DINOV3 + "mlp.up_proj", g.MLP_VALUE))


# Aimv2VisionModel: RMSNorms (weight only), bias-free attention and SwiGLU, a position table
# of the patches (nn.Embedding: no batch axis).
_AIMV2 = "encoder.layers.{i}."
AIMV2_ROWS = (
    *g.dense("embeddings.patch_embed", g.PATCH, CONV),
    *g.norm("embeddings.rms_norm", g.part_norm(EMBEDDING_NORM)),
    KeyRow("embeddings.position_embedding.weight", g.POSITIONS, ADD_BATCH_AXIS),
    *g.attention(_AIMV2 + "attention.", ("q_proj", "k_proj", "v_proj", "out_proj")),
    *g.norm(_AIMV2 + "rms_norm1", g.NORM1), *g.norm(_AIMV2 + "rms_norm2", g.NORM2),
    *g.dense(_AIMV2 + "ffn.gate_proj", g.MLP_IN), *g.dense(_AIMV2 + "ffn.up_proj", g.MLP_VALUE),
    *g.dense(_AIMV2 + "ffn.down_proj", g.MLP_OUT),
    *g.norm("rms_norm", g.ENCODER_NORM),
)


@dataclasses.dataclass(frozen=True)
class FamilySource:
    """One transformers model type: its rows, the prefixes its wrappers add, the arrays
    inference never reads, and the FAMILIES row it builds."""

    rows: tuple
    family: str  # the FAMILIES row's family
    prefixes: tuple = ()  # removed before the rows apply ("deit." of the classifier)
    ignored: tuple = ()  # arrays for training only (DINOv2's mask_token)
    # The model's interpolate_pos_encoding (layers/tokens.py POSITION_RESIZES): torch's
    # bicubic without antialiasing, but with it for DINOv2 with registers.
    position_resize: str = "torch_bicubic"
    gated_rows: tuple = None  # the rows where the MLP is gated (its gate_proj saved)


FAMILY_SOURCES = {
    "deit": FamilySource(DEIT_ROWS, "DeiT", ("deit.",)),
    "dinov2": FamilySource(DINOV2_ROWS, "DINOv2", ("dinov2.",), ("embeddings.mask_token",)),
    "dinov2_with_registers": FamilySource(DINOV2_ROWS, "DINOv2", ("dinov2_with_registers.",),
                                          ("embeddings.mask_token",), "bicubic"),
    "siglip_vision_model": FamilySource(SIGLIP_ROWS, "SigLIP", ("vision_model.",)),
    "clip_vision_model": FamilySource(CLIP_ROWS, "CLIP", ("vision_model.",)),
    "siglip2_vision_model": FamilySource(SIGLIP2_ROWS, "SigLIP2", ("vision_model.",)),
    "dinov3_vit": FamilySource(DINOV3_ROWS, "DINOv3", ignored=("embeddings.mask_token",),
                               gated_rows=DINOV3_GATED_ROWS),
    "aimv2_vision_model": FamilySource(AIMV2_ROWS, "AIMv2", ("vision_model.",)),
}

_ACTIVATIONS = ("gelu", *TANH_GELU, "quick_gelu", "silu")


# Dinov2ForImageClassification's classifier: a Linear on the class token beside the mean of
# the patch tokens (2 x hidden_size features), which no keras_vit head computes (its
# poolings give one of them). Its backbone is read; a load with a head is refused.
_DINOV2_CLASSIFIER = ("classifier.weight", "classifier.bias")
DINOV2_HEAD_REFUSAL = (
    "its classifier (Dinov2ForImageClassification) reads the class token beside the mean of "
    "the patch tokens (2 x hidden_size features), which keras_vit's heads do not compute; load "
    "its backbone with include_top=False (pooling=None gives every token, the classifier's "
    "input is their concatenation).")
# Aimv2VisionModel's attention-pooling head (use_head): a learned query over the tokens' keys
# and values, averaged over heads and projected, which timm's AIMv2 and keras_vit's row do not
# have. Its trunk is read; a load with a head is refused.
_AIMV2_HEAD = "head."
AIMV2_HEAD_REFUSAL = (
    "its attention-pooling head (Aimv2VisionModel's use_head) is not one keras_vit computes "
    "(AIMv2's row, as timm's, averages the normed tokens); load its trunk with "
    "include_top=False (pooling=None gives last_hidden_state).")
# Dinov2WithRegisters with num_register_tokens 0 saves an empty register array: it is then
# Dinov2's own layout (the position embedding covers the class token).
_REGISTERS = "embeddings.register_tokens"


def family_to_official(model_type, sd, heads=None):
    """A family's transformers arrays -> official-key arrays. Keys no row takes pass through
    as "transformers:" + key, for the strict loader to name."""
    source = FAMILY_SOURCES[model_type]
    stripped = {}
    for key, array in sd.items():
        name = next((key[len(p):] for p in source.prefixes if key.startswith(p)), key)
        if name == _REGISTERS and array.size == 0:
            continue
        if name not in source.ignored:
            stripped[name] = array
    gated = source.gated_rows is not None and any(".mlp.gate_proj." in k for k in stripped)
    # DINOv2 with registers: the class token's position, added to it alone, folded in.
    return fold_class_position(to_official(source.gated_rows if gated else source.rows,
                                           stripped, heads, unknown_prefix="transformers:"))


# Two-tower models (CLIPModel, SiglipModel): config.json's vision_config is the image tower's
# config, its weights those under vision_model. (and CLIP's visual_projection, the head); the
# text tower is left.
TWO_TOWERS = {"clip": "clip_vision_model", "siglip": "siglip_vision_model"}
_TOWER_NAMES = ("vision_model.", "visual_projection.")


def model_type_of(source):
    """The family model type config.json names (a two-tower model's: its image tower's), or
    None (no config, or another model)."""
    if not source.is_dir or open_weights(source) is None:
        return None
    config = source.json("config.json")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    model_type = TWO_TOWERS.get(model_type, model_type)
    return model_type if model_type in FAMILY_SOURCES else None


# The numbers read from a family's config.json, checked before anything is built.
_FIELDS = {
    "hidden_size": checks.WIDTH, "num_hidden_layers": checks.LAYERS,
    "num_attention_heads": checks.HEADS, "intermediate_size": checks.WIDTH,
    "image_size": checks.PIXELS, "patch_size": checks.PIXELS,
    "num_channels": checks.WIDTH, "layer_norm_eps": checks.epsilon, "hidden_act": checks.string,
    "mlp_ratio": checks.number(0, checks.MAX_WIDTH), "use_swiglu_ffn": checks.flag,
    "num_register_tokens": checks.count(checks.MAX_WIDTH, low=0), "layerscale_value": checks.number(0, 1e3),
    "vision_use_head": checks.flag, "num_patches": checks.WIDTH,
    "query_bias": checks.flag, "key_bias": checks.flag, "value_bias": checks.flag,
    "proj_bias": checks.flag, "mlp_bias": checks.flag, "use_gated_mlp": checks.flag,
    "rope_theta": checks.number(0, 1e9), "rms_norm_eps": checks.epsilon,
    "qkv_bias": checks.flag, "use_head": checks.flag, "is_native": checks.flag,
}
# How DINOv3ViTConfig names DINOv3's settings.
_DINOV3_SPELLING = DinoV3Spelling(
    biases=(("query_bias", True), ("key_bias", False), ("value_bias", True)),
    proj_bias="proj_bias", mlp_bias="mlp_bias", activation="hidden_act")
_DEFAULTS = {"hidden_act": "gelu", "layer_norm_eps": 1e-12, "num_channels": 3}


def _read_config(source):
    path = os.path.join(source.folder, "config.json")
    config = checks.check_object(path, source.json("config.json"))
    if config.get("model_type") in TWO_TOWERS:  # the image tower's own config
        tower = TWO_TOWERS[config["model_type"]]
        path = f"{path} (its vision_config)"
        config = {**checks.check_object(path, config.get("vision_config") or {}),
                  "model_type": tower}
    config = {**_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    if config.get("model_type") == "aimv2_vision_model":  # its norms are RMSNorms
        config["layer_norm_eps"] = config.get("rms_norm_eps", 1e-5)
    patches, patch = config.get("num_patches"), config.get("patch_size")
    if "image_size" not in config and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                          for v in (patches, patch)):
        # SigLIP 2 NaFlex records its square position table's count, not an image size.
        config["image_size"] = math.isqrt(patches) * patch
    checks.check_fields(path, config, {f: checks.optional(c) for f, c in _FIELDS.items()},
                 required=("hidden_size", "num_hidden_layers", "num_attention_heads",
                           "image_size", "patch_size"))
    if config["hidden_act"] not in _ACTIVATIONS:
        raise CheckpointError(f"{path}: hidden_act {config['hidden_act']!r} is none of the "
                              f"activations keras_vit computes ({', '.join(_ACTIVATIONS)}).")
    if config["model_type"] == "dinov3_vit":
        check_dinov3(path, config, _DINOV3_SPELLING)
    if config["model_type"] == "aimv2_vision_model":
        _check_aimv2(path, config)
    if config["model_type"].startswith("siglip") and config.get("vision_use_head") is False:
        raise CheckpointError(f"{path}: vision_use_head is false; keras_vit's SigLIP pools with "
                              "the MAP head, which this model does not have.")
    checks.check_architecture(path, family_variant(config), config["image_size"])
    return config


def _check_aimv2(path, config):
    """Aimv2VisionConfig's settings that keras_vit's AIMv2 computes one way, or refused."""
    for field, value in (("is_native", False), ("qkv_bias", False), ("mlp_bias", False),
                         ("hidden_act", "silu")):
        if config.get(field, value) != value:
            raise CheckpointError(f"{path}: {field} {config[field]!r} is not AIMv2's {value!r}, "
                                  "the only one keras_vit computes.")


def family_variant(config):
    """The `Variant` a checked config describes: the row of FAMILIES it is (DINOv2-S/14 for
    facebook/dinov2-small), else that family's row resized and named after its sizes."""
    model_type = config["model_type"]
    width, depth = config["hidden_size"], config["num_hidden_layers"]
    swiglu = bool(config.get("use_swiglu_ffn"))
    if model_type.startswith("dinov2"):
        hidden = int(width * config.get("mlp_ratio", 4))
        mlp_dim = swiglu_mlp_dim(hidden) if swiglu else hidden
    else:
        mlp_dim = config.get("intermediate_size", 4 * width)
    base = {"deit": "DeiT-S/16-distilled", "dinov2": "DINOv2-S/14",
            "dinov2_with_registers": "DINOv2-S/14-reg4", "siglip_vision_model": "SigLIP-B/16",
            "clip_vision_model": "CLIP-B/16",
            "siglip2_vision_model": "SigLIP2-B/16-naflex", "dinov3_vit": "DINOv3-S/16",
            "aimv2_vision_model": "AIMv2-L/14"}[model_type]
    fields = dict(width=width, depth=depth, mlp_dim=mlp_dim, heads=config["num_attention_heads"],
                  patch_size=config["patch_size"], image_size=config["image_size"])
    if model_type == "dinov2_with_registers":
        fields["register_tokens"] = config.get("num_register_tokens", 4)
    if swiglu:
        fields["feed_forward"] = "swiglu"
    if model_type == "dinov3_vit":
        fields.update(register_tokens=config.get("num_register_tokens", 0),
                      layer_norm_epsilon=config.get("layer_norm_eps", 1e-5),
                      **dinov3_fields(config, _DINOV3_SPELLING, mlp_dim))
    if model_type == "aimv2_vision_model":  # the SwiGLU's two halves, the RMSNorms' epsilon
        fields.update(mlp_dim=2 * config.get("intermediate_size", 2816),
                      layer_norm_epsilon=config.get("rms_norm_eps", 1e-5))
    if model_type == "clip_vision_model":  # OpenCLIP's towers on the Hub say "gelu"
        fields["activation"] = "quick_gelu" if config["hidden_act"] == "quick_gelu" else "gelu"
    return match_or_name(dataclasses.replace(FAMILIES[base], **fields),
                         family=FAMILY_SOURCES[model_type].family)


def _recognises(source):
    return model_type_of(source) is not None


class FamilyReader(RowTableReader):
    def __init__(self, source):
        config = _read_config(source)
        # The format as this model type resizes its position embedding.
        found = dataclasses.replace(
            FORMAT, position_resize=FAMILY_SOURCES[config["model_type"]].position_resize)
        weights = open_weights(source)
        names = list(weights.shapes)
        if source.json("config.json").get("model_type") in TWO_TOWERS:
            names = [n for n in names if n.startswith(_TOWER_NAMES)]
        # DINOv2's classifier is left unread: only its backbone loads (DINOV2_HEAD_REFUSAL).
        self._head_refusal = None
        if config["model_type"].startswith("dinov2") and set(_DINOV2_CLASSIFIER) & set(names):
            self._head_refusal = DINOV2_HEAD_REFUSAL
            names = [n for n in names if n not in _DINOV2_CLASSIFIER]
        if config["model_type"] == "aimv2_vision_model" and any(
                n.startswith(_AIMV2_HEAD) for n in names):
            self._head_refusal = AIMV2_HEAD_REFUSAL
            names = [n for n in names if not n.startswith(_AIMV2_HEAD)]
        super().__init__(source, found, weights,
                         lambda sd, heads: family_to_official(config["model_type"], sd, heads),
                         names=names)
        self._config = config

    def info(self):
        return folder_info(self, self._config, family_variant(self._config),
                           head_refusal=self._head_refusal)


FORMAT = CheckpointFormat(
    name="transformers_families",
    description="transformers save_pretrained folder of DeiT, DINOv2 (with registers), SigLIP, "
                "SigLIP 2 NaFlex, CLIP, DINOv3 or AIMv2 vision models, or the image tower of CLIPModel "
                "and SiglipModel (config.json model_type)",
    recognises=_recognises, open=FamilyReader, numerics=(False, 1e-6), pickled=True)
