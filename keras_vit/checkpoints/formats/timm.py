"""timm's VisionTransformer state dicts (.safetensors, or a Hub folder with timm's config.json).

timm stores torch Linear weights (out, in), a fused `qkv` (3D, D), `cls_token`,
`pos_embed`, `patch_embed.proj` (D, C, p, p), `norm` and `head`; no pre_logits.
A bare state dict records neither its head count (nor the MAP head's), its
activation, GELU form, epsilon nor normalisation: `keras_vit.ViT(variant, weights=...)` takes
the variant's, and `keras_vit.from_pretrained` refuses it naming each (`unrecorded`). A Hub
folder's `config.json` names the architecture (whose heads keras_vit/variants/timm_names.py's
table knows), `model_args` its other sizes and activation (act_layer: the GELU form, which
keras_vit's save_pretrained records) and `pretrained_cfg` its mean/std.
"""

import dataclasses
import math
import os

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import config_values as checks
from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import (
    CheckpointFormat,
    CheckpointInfo,
    Resizes,
    RowTableReader,
    normalization_from,
)
from keras_vit.checkpoints.formats.config_variant import match_or_name
from keras_vit.checkpoints.formats.preprocess_configs import timm_preprocessing
from keras_vit.checkpoints.formats.rows import (
    CONV,
    FUSED_KV,
    FUSED_KV_BIAS,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    KeyRow,
    Transform,
    from_official,
    to_official,
)
from keras_vit.checkpoints.formats.safetensors import INDEX_SUFFIX, open_safetensors, write_safetensors
from keras_vit.checkpoints.formats.torch_state_dict import TorchStateDict, is_pickled
from keras_vit.checkpoints.layout import PRE_LOGITS_KERNEL_KEY, is_trunk_key, official_arrays
from keras_vit.errors import ArgumentError
from keras_vit.layer_names import EMBEDDING_NORM
from keras_vit.variants import timm_variant

__all__ = ["FORMAT", "TIMM_ROWS", "timm_to_official", "official_to_timm", "save_safetensors",
           "weights_file", "open_weights", "open_state_dict", "PYTORCH_WEIGHTS", "PATCH_LINEAR"]

# A folder's pickled weights, where it has no safetensors file.
PYTORCH_WEIGHTS = "pytorch_model.bin"

# The stem of timm's hybrid (ResNet + ViT) models, which keras_vit does not read from timm.
_HYBRID_STEM = "patch_embed.backbone.stem.conv.weight"
_NAFLEX_PATCH = "embeds.proj.weight"  # timm's NaFlexVit


def weights_file(source):
    """The weights of a source: the file itself (.safetensors, a shard index or a pickled
    state dict), or a folder's model.safetensors (or its shards' index), else its
    pytorch_model.bin (timm's save_for_hf default, older transformers folders); None where
    there is none."""
    if not source.is_dir:
        return source.path if source.path.endswith((".safetensors", INDEX_SUFFIX)) \
            or is_pickled(source.path) else None
    for name in ("model.safetensors", "model" + INDEX_SUFFIX, PYTORCH_WEIGHTS):
        if os.path.exists(os.path.join(source.path, name)):
            return os.path.join(source.path, name)
    return None


def open_state_dict(path):
    """The state-dict container of `path`: safetensors, or a pickle through torch's
    weights-only loader (torch_state_dict.py); either gives shapes, dtypes and read."""
    return TorchStateDict(path) if is_pickled(path) else open_safetensors(path)


def open_weights(source):
    """The source's weights, opened once per source (timm and transformers share it:
    detection reads its names, the reader its arrays)."""
    path = weights_file(source)
    return None if path is None else source.once("weights", lambda: open_state_dict(path))


# The fields keras_vit reads from timm's config.json: the architecture's name (variants/timm_names.py's
# table gives its heads) and pretrained_cfg's mean/std (normalization_from checks them).
_TIMM_FIELDS = {"architecture": checks.string, "pretrained_cfg": checks.mapping, "model_args": checks.mapping}

# timm's create_model arguments (config.json "model_args", which timm applies when it loads the
# folder) that change the architecture, as Variant fields; `img_size` is the default resolution.
_MODEL_ARGS = {"depth": "depth", "embed_dim": "width", "num_heads": "heads",
               "patch_size": "patch_size", "img_size": "image_size", "reg_tokens": "register_tokens"}
# Arguments that leave the architecture as it is (the head's size comes from the weights;
# mlp_ratio is read with the width, act_layer by timm_activation).
# qkv_fused: whether Eva stores query, key and value as one array, which the rows read either way.
_NEUTRAL_ARGS = ("num_classes", "drop_rate", "drop_path_rate", "attn_drop_rate", "pretrained_cfg",
                 "mlp_ratio", "act_layer", "qkv_fused")
# timm's act_layer names keras_vit builds: name -> (activation, approximate_gelu).
_ACT_LAYERS = {"gelu": ("gelu", False), "gelu_tanh": ("gelu", True),
               "quick_gelu": ("quick_gelu", False)}
# A SwiGLU's own gate activation, which timm's AIMv2 functions pass (and save_pretrained writes):
# no GELU setting; timm_config_variant refuses it on a row with a plain MLP.
SWIGLU_ACT_LAYER = "silu"


def built_by_eva(variant):
    """Whether timm builds `variant` with its Eva class (eva.py: the RoPE rows, DINOv3, EVA-02
    and PE) rather than VisionTransformer: they spell some weights and model_args otherwise."""
    return variant.rope is not None


def mlp_ratio_halves(variant):
    """Whether timm's mlp_ratio sizes one half of `variant`'s SwiGLU (VisionTransformer's
    SwiGLU, Eva's SwiGLU and GluMlp) rather than its whole first layer (an MLP, or
    VisionTransformer's SwiGLUPacked, DINOv2-g's); keras_vit's mlp_dim counts both halves."""
    return variant.feed_forward == "swiglu_split" or (
        built_by_eva(variant) and variant.feed_forward == "swiglu")


def timm_activation(config):
    """(activation, approximate_gelu) a timm config's model_args set (act_layer), or None
    where they set none; an act_layer keras_vit does not build is refused in one line."""
    name = (config.get("model_args") or {}).get("act_layer")
    if name is None or name == SWIGLU_ACT_LAYER:
        return None
    if name not in _ACT_LAYERS:
        raise CheckpointError(f"config.json: model_args act_layer {name!r} is no activation "
                              f"keras_vit builds ({', '.join(_ACT_LAYERS)}).")
    return _ACT_LAYERS[name]


def gelu_clip_variant(architecture):
    """timm's GELU CLIP (vit_base_patch16_clip_224: its _clip_quickgelu_ twin with torch's erf
    GELU, everything else the same in timm's model functions) as that twin's row with GELU,
    named "-gelu" as open_clip_config.py names LAION's; None for any other name."""
    base = architecture.split(".", 1)[0]
    if "_clip_" not in base or "quickgelu" in base:
        return None
    twin = timm_variant(base.replace("_clip_", "_clip_quickgelu_", 1))
    if twin is None or twin.activation != "quick_gelu":
        return None
    return dataclasses.replace(twin, name=f"{twin.name}-gelu", activation="gelu")


def timm_config_variant(config):
    """The `Variant` a timm Hub folder's config.json records: its architecture, with its
    model_args applied; None where it names none keras_vit knows, or model_args that change
    the architecture otherwise."""
    architecture = config.get("architecture")
    variant = (timm_variant(architecture) or gelu_clip_variant(architecture)
               if architecture is not None else None)
    args = dict(config.get("model_args") or {})
    size = args.get("img_size")
    if isinstance(size, list) and len(size) == 2 and size[0] == size[1]:  # timm writes [h, w]
        args["img_size"] = size[0]
    if args.get("in_chans", 3) == 3:  # the channels are the model's argument, not its variant's
        args.pop("in_chans", None)
    pool = {"token": "token", "avg": "gap", "map": "map"}.get(args.get("global_pool"))
    if variant is not None and pool == variant.classifier:  # what the architecture pools
        args.pop("global_pool")
    if variant is None or any(k not in _MODEL_ARGS and k not in _NEUTRAL_ARGS for k in args):
        return None
    if args.get("act_layer") == SWIGLU_ACT_LAYER and variant.feed_forward == "mlp":
        return None
    fields = {_MODEL_ARGS[k]: v for k, v in args.items() if k in _MODEL_ARGS}
    if any(isinstance(v, bool) or not isinstance(v, int)
           or not (0 if k == "register_tokens" else 1) <= v <= checks.MAX_WIDTH
           for k, v in fields.items()):
        return None
    if "width" in fields or "mlp_ratio" in args:  # the architecture's own ratio unless said
        halves = 2 if mlp_ratio_halves(variant) else 1
        ratio = args.get("mlp_ratio", variant.mlp_dim / halves / variant.width)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 64:
            return None
        fields["mlp_dim"] = halves * int(fields.get("width", variant.width) * ratio)
    activation = timm_activation(config)
    if activation is not None:
        fields["activation"] = activation[0]
    if not fields:
        return variant
    return match_or_name(dataclasses.replace(variant, **fields))


def _recognises(source):
    weights = open_weights(source)
    return weights is not None and any(key in weights.shapes for key in (
        "patch_embed.proj.weight", _NAFLEX_PATCH, _HYBRID_STEM))


class TimmReader(RowTableReader):
    def __init__(self, source):
        # The loader may ask for a few keys at a time (loader.py reads a large file row by
        # row): only the timm tensors that hold them are read.
        super().__init__(source, FORMAT, open_weights(source),
                         lambda sd, heads: timm_to_official(sd, heads, source=source.path),
                         reads_in_parts=True)
        config = source.json("config.json") if source.is_dir else None
        path = f"{source.folder}/config.json"
        self._config = checks.check_fields(path, checks.check_object(path, config), _TIMM_FIELDS) \
            if config is not None else {}

    def info(self):
        variant = timm_config_variant(self._config) if self._config else None
        if variant is not None:  # before anything is built
            checks.check_architecture(f"{self.source.folder}/config.json", variant)
        pretrained = self._config.get("pretrained_cfg") or {}
        normalization = None
        if "mean" in pretrained and "std" in pretrained:
            normalization = normalization_from(f"{self.source.folder}/config.json",
                                               pretrained["mean"], pretrained["std"])
        activation = timm_activation(self._config) if self._config else None
        # timm builds its naflexvit_*_siglip with act_layer="gelu_tanh" in the model function
        # (not in a Hub folder's model_args), its other ViTs with erf.
        naflex = variant is not None and variant.patch_input == "naflex"
        approximate_gelu = activation[1] if activation else (True if naflex else None)
        # A Hub folder's config.json: timm's eval transform (its defaults where it is silent).
        preprocessing = (timm_preprocessing(f"{self.source.folder}/config.json", pretrained)
                         if self._config else None)
        return CheckpointInfo(self.shapes(), format="timm",
                              heads=variant.heads if variant is not None else None,
                              approximate_gelu=approximate_gelu,
                              normalization=normalization, variant=variant,
                              preprocessing=preprocessing)


FORMAT = CheckpointFormat(
    name="timm", description="timm state dict (.safetensors, sharded, a .bin, .pth, .pth.tar or "
                             ".pt through torch's weights-only loader, or a Hub folder with "
                             "timm's config.json)",
    recognises=_recognises, open=TimmReader, numerics=(False, 1e-6), write="save_safetensors",
    # timm builds each architecture with its own activation, GELU form and epsilon (its CLIP
    # QuickGELU or GELU at 1e-5, its SigLIP-B/32 tanh GELU): a bare state dict records none.
    unrecorded=("activation", "approximate_gelu", "layer_norm_epsilon"),
    # timm's checkpoint_filter_fn resizes every file it loads at another size so
    # (resample_abs_pos_embed, resample_patch_embed: antialiased bicubic): DINOv2's 518-pixel
    # files at 224 give timm's output; dynamic_img_size resizes so too. Its FlexiViT models
    # load with bilinear, unantialiased resizes instead (big_vision's, which they were trained
    # with), and still resize by antialiased bicubic at run time.
    position_resize="bicubic", patch_resize="bicubic",
    family_resizes=(("FlexiViT", Resizes(load="bilinear", dynamic="bicubic", patch="bilinear")),),
    pickled=True)


# timm's VisionTransformer state dict, row by row (formats/rows.py applies them both ways), by
# feature: the plain ViT's embedding, blocks and final norm, its classifier, and what the
# families (keras_vit/variants/table.py FAMILIES) add: DeiT's distillation token and head, DINOv2's
# registers, LayerScale (ls1 after attention, ls2 after the MLP), CLIP's norm_pre and SigLIP's
# attention pooling (attn_pool, timm's AttentionPoolLatent). DINOv2's release files are these
# groups under a few names of their own (dinov2.py).
_BLOCK = "blocks.{i}."
TIMM_EMBEDDING = (*g.dense("patch_embed.proj", g.PATCH, CONV), KeyRow("cls_token", g.CLS),
                  KeyRow("pos_embed", g.POSITIONS),
                  *g.norm("patch_embed.norm", g.part_norm(EMBEDDING_NORM)))  # AIMv2's RmsNorm
TIMM_BLOCKS = (
    *g.norm(_BLOCK + "norm1", g.NORM1),
    *g.fused_qkv(_BLOCK + "attn.qkv.weight", _BLOCK + "attn.qkv.bias"),
    *g.dense(_BLOCK + "attn.proj", g.OUT, HEADS_OUT),
    *g.norm(_BLOCK + "norm2", g.NORM2),
    *g.dense(_BLOCK + "mlp.fc1", g.MLP_IN),
    *g.dense(_BLOCK + "mlp.fc2", g.MLP_OUT),
    *g.norm("norm", g.ENCODER_NORM),
)
TIMM_HEAD = g.dense("head", g.HEAD)
TIMM_DISTILLATION = (KeyRow("dist_token", g.DIST_TOKEN), *g.dense("head_dist", g.HEAD_DIST))
TIMM_REGISTERS = (KeyRow("reg_token", g.REGISTERS),)
TIMM_PRE_NORM = g.norm("norm_pre", g.PRE_NORM)
TIMM_LAYER_SCALE = (KeyRow(_BLOCK + "ls1.gamma", g.LAYER_SCALE1),
                    KeyRow(_BLOCK + "ls2.gamma", g.LAYER_SCALE2))
_MAP_QUERY, _MAP_KEY, _MAP_VALUE, _MAP_OUT = g.MAP_ATTENTION
TIMM_MAP_HEAD = (
    KeyRow("attn_pool.latent", g.MAP_PROBE),
    *g.dense("attn_pool.q", _MAP_QUERY, HEADS_IN),
    KeyRow("attn_pool.kv.weight", (_MAP_KEY.kernel, _MAP_VALUE.kernel), FUSED_KV),
    KeyRow("attn_pool.kv.bias", (_MAP_KEY.bias, _MAP_VALUE.bias), FUSED_KV_BIAS),
    *g.dense("attn_pool.proj", _MAP_OUT, HEADS_OUT),
    *g.norm("attn_pool.norm", g.MAP_NORM),
    *g.dense("attn_pool.mlp.fc1", g.MAP_MLP_IN),
    *g.dense("attn_pool.mlp.fc2", g.MAP_MLP_OUT),
)
# timm's Eva (eva.py: DINOv3, EVA-02) spells the same features its own way: LayerScale as
# gamma_1/gamma_2; a fused qkv without bias beside separate q_bias and v_bias (the key has none),
# or separate q_proj, k_proj (bias-free), v_proj; SwiGLU split as fc1_g (gate) and fc1_x
# (value), with a norm before fc2; the final norm after the pooling as fc_norm. What
# VisionTransformer also stores is read in Eva's spelling and written in VisionTransformer's
# (read_only); the query and value biases alone, the split SwiGLU's value and the MLP's norm
# have only Eva's.
_QUERY, _KEY, _VALUE, _OUT = g.ATTENTION
TIMM_EVA = (
    KeyRow(_BLOCK + "gamma_1", g.LAYER_SCALE1, read_only=True),
    KeyRow(_BLOCK + "gamma_2", g.LAYER_SCALE2, read_only=True),
    KeyRow(_BLOCK + "attn.q_bias", _QUERY.bias, HEADS_BIAS),
    KeyRow(_BLOCK + "attn.v_bias", _VALUE.bias, HEADS_BIAS),
    *g.dense(_BLOCK + "attn.q_proj", _QUERY, HEADS_IN, read_only=True),
    KeyRow(_BLOCK + "attn.k_proj.weight", _KEY.kernel, HEADS_IN, read_only=True),
    *g.dense(_BLOCK + "attn.v_proj", _VALUE, HEADS_IN, read_only=True),
    *g.dense(_BLOCK + "mlp.fc1_g", g.MLP_IN, read_only=True),
    *g.dense(_BLOCK + "mlp.fc1_x", g.MLP_VALUE),
    *g.norm(_BLOCK + "mlp.norm", g.MLP_NORM),
    *g.norm("fc_norm", g.ENCODER_NORM, read_only=True),  # Variant.norm_after_pooling
)


def _patch_linear(a, heads):
    # (D, P * P * 3), each patch flattened as (row, column, channel) -> the conv kernel (P, P, 3, D)
    side = math.isqrt(a.shape[-1] // 3) if a.ndim == 2 else 0
    return a.T.reshape(side, side, 3, -1) if side and side * side * 3 == a.shape[-1] else a


# NaFlex's patch embedding, a Linear on flattened RGB patches (timm's NaFlexEmbeds,
# transformers' Siglip2): the same function as the official patch convolution.
PATCH_LINEAR = Transform("patch_linear", _patch_linear, lambda a: a.reshape(-1, a.shape[-1]).T)
# timm's NaFlex position grid (1, rows, cols, D) <-> the official (1, rows * cols, D).
_GRID_POSITIONS = Transform(
    "grid_positions", lambda a, heads: a.reshape(1, -1, a.shape[-1]) if a.ndim == 4 else a,
    lambda a: a.reshape(1, *((math.isqrt(a.shape[1]),) * 2), a.shape[-1]))
# SigLIP 2 NaFlex (timm's NaFlexVit): the embedding under `embeds.`, a Linear on flattened
# patches and a (1, rows, cols, D) position grid; read only: written back, a NaFlex model is the
# plain ViT's state dict, which timm's NaFlexVit loads through its checkpoint_filter_fn.
TIMM_NAFLEX = (*g.dense("embeds.proj", g.PATCH, PATCH_LINEAR, read_only=True),
               KeyRow("embeds.pos_embed", g.POSITIONS, _GRID_POSITIONS, read_only=True))
TIMM_ROWS = (*TIMM_EMBEDDING, *TIMM_BLOCKS, *TIMM_HEAD, *TIMM_DISTILLATION, *TIMM_REGISTERS,
             *TIMM_PRE_NORM, *TIMM_LAYER_SCALE, *TIMM_MAP_HEAD, *TIMM_EVA, *TIMM_NAFLEX)


def timm_to_official(sd, heads=None, source="the checkpoint"):
    """timm arrays -> official-key arrays, attention split into `heads` heads (None: kept
    (D, D), enough for header checks). Keys it does not know pass through unchanged
    (prefixed "timm:"), so that the strict loader names them as unexpected."""
    if _HYBRID_STEM in sd:
        raise CheckpointError(f"{source} is a timm hybrid (ResNet + ViT) state dict; keras_vit reads "
                              "hybrids from the official .npz layout only.")
    return to_official(TIMM_ROWS, sd, heads, unknown_prefix="timm:")


def official_to_timm(arrays, eva=False, pooled_norm=False):
    """Official-key arrays (heads split as (D, H, hd)) -> timm's keys: VisionTransformer's, or
    with `eva` those of timm's Eva class (the RoPE families), whose final norm is after the
    pooling (fc_norm) with `pooled_norm` (EVA-02)."""
    if any(is_trunk_key(k) for k in arrays):
        raise ArgumentError("save_safetensors writes timm's plain ViT layout; a hybrid's ResNet trunk "
                            "has no equivalent there. Use save_npz, which timm's npz loader reads.")
    if PRE_LOGITS_KERNEL_KEY in arrays:
        raise ArgumentError("timm's ViT layout has no pre_logits layer; save this model with "
                            "save_npz, or build it with representation_size=None.")
    sd = _class_spelling(from_official(TIMM_ROWS, arrays, "timm"), eva, pooled_norm)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def _class_spelling(sd, eva, pooled_norm):
    """The written keys as the model's timm class loads them, where the rows' one written
    spelling is VisionTransformer's: both classes name a split SwiGLU's gate `fc1_g` (beside
    `fc1_x`), and Eva names LayerScale `gamma_1`/`gamma_2` and the norm after the pooling
    `fc_norm` (TIMM_EVA, which the reader takes too)."""
    split = any(k.endswith(".mlp.fc1_x.weight") for k in sd)

    def spelled(key):
        if split:
            key = key.replace(".mlp.fc1.", ".mlp.fc1_g.")
        if eva:
            key = key.replace(".ls1.gamma", ".gamma_1").replace(".ls2.gamma", ".gamma_2")
        if pooled_norm and key.startswith("norm."):
            key = "fc_" + key
        return key
    return {spelled(k): v for k, v in sd.items()}


def save_safetensors(model, path):
    """Writes a plain keras_vit ViT as timm's state dict (safetensors), atomically: its
    VisionTransformer's, or its Eva's for the RoPE families (query, key and value fused:
    timm's qkv_fused=True). Hybrids and models with pre_logits have no timm equivalent: use
    save_npz."""
    path = os.fspath(path)
    if not path.endswith(".safetensors"):
        raise ArgumentError(f"save_safetensors writes a .safetensors file; got the path {path!r}.")
    from keras_vit.layer_names import POOLED_NORM, is_block

    names = {layer.name for layer in model.layers}
    eva = any(layer.rope for layer in model.layers if is_block(layer.name))  # built_by_eva
    arrays = official_to_timm(official_arrays(model), eva=eva, pooled_norm=POOLED_NORM in names)
    write_safetensors(arrays, path, metadata={"format": "pt"})
    return path
