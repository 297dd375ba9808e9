"""timm's VisionTransformer state dicts (.safetensors, or a Hub folder with timm's config.json).

timm stores torch Linear weights (out, in), a fused `qkv` (3D, D), `cls_token`,
`pos_embed`, `patch_embed.proj` (D, C, p, p), `norm` and `head`; no pre_logits.
A bare state dict records neither its head count nor its normalisation: the
variant's heads are assumed and said so. A Hub folder's `config.json` names the
architecture (whose heads variants.py's timm table knows) and `pretrained_cfg`
its mean/std.
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
    MAX_WIDTH,
    check_fields,
    check_object,
    mapping,
    string,
)
from keras_vit.checkpoints.formats.rows import (
    CONV,
    FUSED_KV,
    FUSED_KV_BIAS,
    FUSED_QKV,
    FUSED_QKV_BIAS,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    LINEAR,
    KeyRow,
    from_official,
    to_official,
)
from keras_vit.checkpoints.formats.safetensors import INDEX_SUFFIX, open_safetensors, write_safetensors
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
    PRE_LOGITS_KERNEL_KEY,
    PRE_NORM_BIAS,
    PRE_NORM_SCALE,
    QUERY_BIAS,
    QUERY_KERNEL,
    REG_TOKEN_KEY,
    VALUE_BIAS,
    VALUE_KERNEL,
    is_trunk_key,
    official_arrays,
)
from keras_vit.errors import ArgumentError
from keras_vit.variants import table_variant, timm_variant

__all__ = ["FORMAT", "TIMM_ROWS", "timm_to_official", "official_to_timm", "save_safetensors",
           "weights_file", "open_weights"]

# The stem of timm's hybrid (ResNet + ViT) models, which keras_vit does not read from timm.
_HYBRID_STEM = "patch_embed.backbone.stem.conv.weight"


def weights_file(source):
    """The safetensors weights of a source: the file itself, or a folder's model.safetensors
    (or the index of its shards); None where there is none."""
    if not source.is_dir:
        return source.path if source.path.endswith((".safetensors", INDEX_SUFFIX)) else None
    for name in ("model.safetensors", "model" + INDEX_SUFFIX):
        if os.path.exists(os.path.join(source.path, name)):
            return os.path.join(source.path, name)
    return None


def open_weights(source):
    """The source's safetensors weights, opened once per source (timm and transformers share
    it: detection reads its names, the reader its arrays)."""
    path = weights_file(source)
    return None if path is None else source.once("safetensors", lambda: open_safetensors(path))


# The fields keras_vit reads from timm's config.json: the architecture's name (variants.py's
# timm table gives its heads) and pretrained_cfg's mean/std (normalization_from checks them).
_TIMM_FIELDS = {"architecture": string, "pretrained_cfg": mapping, "model_args": mapping}

# timm's create_model arguments (config.json "model_args", which timm applies when it loads the
# folder) that change the architecture, as Variant fields; `img_size` is the default resolution.
_MODEL_ARGS = {"depth": "depth", "embed_dim": "width", "num_heads": "heads",
               "patch_size": "patch_size", "img_size": "image_size", "reg_tokens": "register_tokens"}
# Arguments that leave the architecture as it is (the head's size comes from the weights).
_NEUTRAL_ARGS = ("num_classes", "drop_rate", "drop_path_rate", "attn_drop_rate", "pretrained_cfg")


def timm_config_variant(config):
    """The `Variant` a timm Hub folder's config.json records: its architecture, with its
    model_args applied; None where it names none keras_vit knows, or model_args that change
    the architecture otherwise."""
    architecture = config.get("architecture")
    variant = timm_variant(architecture) if architecture is not None else None
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
    fields = {_MODEL_ARGS[k]: v for k, v in args.items() if k in _MODEL_ARGS}
    if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_WIDTH
           for v in fields.values()):
        return None
    if "width" in fields or "mlp_ratio" in args:  # the architecture's own ratio unless said
        ratio = args.get("mlp_ratio", variant.mlp_dim / variant.width)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 64:
            return None
        fields["mlp_dim"] = int(fields.get("width", variant.width) * ratio)
    if not fields:
        return variant
    resized = dataclasses.replace(variant, **fields)
    found = table_variant(resized)
    if found is not resized:
        return found
    sizes = f"{resized.width}x{resized.depth}"
    return dataclasses.replace(resized, name=f"{architecture.split('.', 1)[0]}-{sizes}")


def _recognises(source):
    weights = open_weights(source)
    return weights is not None and ("patch_embed.proj.weight" in weights.shapes
                                    or _HYBRID_STEM in weights.shapes)


class TimmReader(CheckpointReader):
    def __init__(self, source):
        super().__init__(source, FORMAT)
        self._weights = open_weights(source)
        config = source.json("config.json") if source.is_dir else None
        path = f"{source.folder}/config.json"
        self._config = check_fields(path, check_object(path, config), _TIMM_FIELDS) \
            if config is not None else {}

    def headers(self, heads=None):
        shapes = timm_to_official(shape_stand_ins(self._weights.shapes), heads, source=self.path)
        return {k: ArrayHeader(v.shape, np.dtype("float32")) for k, v in shapes.items()}

    # The loader may ask for a few keys at a time (loader.py reads a large file row by row):
    # only the timm tensors that hold `keys` are read.
    reads_in_parts = True

    def read(self, keys, heads=None):
        owners = self._owners()
        names = list(dict.fromkeys(owners[k] for k in keys))
        arrays = timm_to_official(self._weights.read(names), heads, source=self.path)
        return {k: arrays[k] for k in keys}

    def _owners(self):
        """{official key: the timm tensor it comes from}, from the names and shapes alone."""
        if getattr(self, "_owner_map", None) is None:
            stand_ins = shape_stand_ins(self._weights.shapes)
            self._owner_map = {
                official: name for name, array in stand_ins.items()
                for official in timm_to_official({name: array}, source=self.path)}
        return self._owner_map

    def info(self):
        variant = timm_config_variant(self._config) if self._config else None
        pretrained = self._config.get("pretrained_cfg") or {}
        normalization = None
        if "mean" in pretrained and "std" in pretrained:
            normalization = normalization_from(f"{self.source.folder}/config.json",
                                               pretrained["mean"], pretrained["std"])
        return CheckpointInfo({k: h.shape for k, h in self.headers().items()}, format="timm",
                              heads=variant.heads if variant is not None else None,
                              normalization=normalization, variant=variant)


FORMAT = CheckpointFormat(
    name="timm", description="timm state dict (.safetensors, sharded, or a Hub folder with "
                             "timm's config.json)",
    recognises=_recognises, open=TimmReader, numerics=(False, 1e-6), write="save_safetensors",
    # timm's checkpoint_filter_fn resizes every file it loads at another size so
    # (resample_abs_pos_embed): DINOv2's 518-pixel files at 224 give timm's output.
    position_resize="bicubic")


# timm's VisionTransformer state dict, row by row (formats/rows.py applies it both ways).
TIMM_ROWS = (
    KeyRow("patch_embed.proj.weight", EMBEDDING_KERNEL, CONV),
    KeyRow("patch_embed.proj.bias", EMBEDDING_BIAS),
    KeyRow("cls_token", CLS_KEY),
    KeyRow("pos_embed", POS_EMBED_KEY),
    KeyRow("blocks.{i}.norm1.weight", LN0_SCALE),
    KeyRow("blocks.{i}.norm1.bias", LN0_BIAS),
    KeyRow("blocks.{i}.attn.qkv.weight", (QUERY_KERNEL, KEY_KERNEL, VALUE_KERNEL), FUSED_QKV),
    KeyRow("blocks.{i}.attn.qkv.bias", (QUERY_BIAS, KEY_BIAS, VALUE_BIAS), FUSED_QKV_BIAS),
    KeyRow("blocks.{i}.attn.proj.weight", OUT_KERNEL, HEADS_OUT),
    KeyRow("blocks.{i}.attn.proj.bias", OUT_BIAS),
    KeyRow("blocks.{i}.norm2.weight", LN2_SCALE),
    KeyRow("blocks.{i}.norm2.bias", LN2_BIAS),
    KeyRow("blocks.{i}.mlp.fc1.weight", MLP0_KERNEL, LINEAR),
    KeyRow("blocks.{i}.mlp.fc1.bias", MLP0_BIAS),
    KeyRow("blocks.{i}.mlp.fc2.weight", MLP1_KERNEL, LINEAR),
    KeyRow("blocks.{i}.mlp.fc2.bias", MLP1_BIAS),
    KeyRow("norm.weight", ENCODER_NORM_SCALE),
    KeyRow("norm.bias", ENCODER_NORM_BIAS),
    KeyRow("head.weight", HEAD_KERNEL_KEY, LINEAR),
    KeyRow("head.bias", HEAD_BIAS_KEY),
    # The families (keras_vit/variants.py FAMILIES): DeiT's distillation token and head,
    # DINOv2's registers, LayerScale (ls1 after attention, ls2 after the MLP), CLIP's norm_pre,
    # and SigLIP's attention pooling (attn_pool, timm's AttentionPoolLatent).
    KeyRow("dist_token", DIST_TOKEN_KEY),
    KeyRow("reg_token", REG_TOKEN_KEY),
    KeyRow("norm_pre.weight", PRE_NORM_SCALE),
    KeyRow("norm_pre.bias", PRE_NORM_BIAS),
    KeyRow("blocks.{i}.ls1.gamma", LS1_SCALE),
    KeyRow("blocks.{i}.ls2.gamma", LS3_SCALE),
    KeyRow("head_dist.weight", HEAD_DIST_KERNEL_KEY, LINEAR),
    KeyRow("head_dist.bias", HEAD_DIST_BIAS_KEY),
    KeyRow("attn_pool.latent", MAP_PROBE),
    KeyRow("attn_pool.q.weight", MAP_QUERY_KERNEL, HEADS_IN),
    KeyRow("attn_pool.q.bias", MAP_QUERY_BIAS, HEADS_BIAS),
    KeyRow("attn_pool.kv.weight", (MAP_KEY_KERNEL, MAP_VALUE_KERNEL), FUSED_KV),
    KeyRow("attn_pool.kv.bias", (MAP_KEY_BIAS, MAP_VALUE_BIAS), FUSED_KV_BIAS),
    KeyRow("attn_pool.proj.weight", MAP_OUT_KERNEL, HEADS_OUT),
    KeyRow("attn_pool.proj.bias", MAP_OUT_BIAS),
    KeyRow("attn_pool.norm.weight", MAP_LN_SCALE),
    KeyRow("attn_pool.norm.bias", MAP_LN_BIAS),
    KeyRow("attn_pool.mlp.fc1.weight", MAP_MLP0_KERNEL, LINEAR),
    KeyRow("attn_pool.mlp.fc1.bias", MAP_MLP0_BIAS),
    KeyRow("attn_pool.mlp.fc2.weight", MAP_MLP1_KERNEL, LINEAR),
    KeyRow("attn_pool.mlp.fc2.bias", MAP_MLP1_BIAS),
)


def timm_to_official(sd, heads=None, source="the checkpoint"):
    """timm arrays -> official-key arrays, attention split into `heads` heads (None: kept
    (D, D), enough for header checks). Keys it does not know pass through unchanged
    (prefixed "timm:"), so that the strict loader names them as unexpected."""
    if _HYBRID_STEM in sd:
        raise CheckpointError(f"{source} is a timm hybrid (ResNet + ViT) state dict; keras_vit reads "
                              "hybrids from the official .npz layout only.")
    return to_official(TIMM_ROWS, sd, heads, unknown_prefix="timm:")


def official_to_timm(arrays):
    """Official-key arrays (heads split as (D, H, hd)) -> timm's VisionTransformer keys."""
    if any(is_trunk_key(k) for k in arrays):
        raise ArgumentError("save_safetensors writes timm's plain ViT layout; a hybrid's ResNet trunk "
                            "has no equivalent there. Use save_npz, which timm's npz loader reads.")
    if PRE_LOGITS_KERNEL_KEY in arrays:
        raise ArgumentError("timm's ViT layout has no pre_logits layer; save this model with "
                            "save_npz, or build it with representation_size=None.")
    sd = from_official(TIMM_ROWS, arrays, "timm")
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def save_safetensors(model, path):
    """Writes a plain keras_vit ViT as timm's VisionTransformer state dict (safetensors),
    atomically. Hybrids and models with pre_logits have no timm equivalent: use save_npz."""
    path = os.fspath(path)
    if not path.endswith(".safetensors"):
        raise ArgumentError(f"save_safetensors writes a .safetensors file; got the path {path!r}.")
    write_safetensors(official_to_timm(official_arrays(model)), path, metadata={"format": "pt"})
    return path
