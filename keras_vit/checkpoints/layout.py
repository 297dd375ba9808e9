"""The official checkpoint's key table: which arrays fill which variable of a model.

This is the one place that spells the official key layout (pre-Linen names,
as released): the transformer's `Transformer/encoderblock_{i}/...`, the
embedding, class token, position embedding and head, and the hybrids' ResNet
trunk (`conv_root`, `gn_root`, `block{s}/unit{u}/...`). The rows are generated
from the model's own layer names, which follow the checkpoint's.
"""

import dataclasses
import math
import re

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.errors import ArgumentError
from keras_vit.variants import VARIANTS

__all__ = ["Row", "layout", "trunk_rows", "normalize_keys", "fits", "is_trunk_key", "is_head_key",
           "square_grid", "describe_architecture", "POS_EMBED_KEY", "HEAD_KERNEL_KEY",
           "PRE_LOGITS_KERNEL_KEY", "DROPPABLE_PREFIXES", "TRUNK_PREFIXES", "timm_to_official",
           "official_to_timm", "transformers_to_official", "keras_hub_key", "split_heads",
           "released_shape", "keras_hub_shapes"]

POS_EMBED_KEY = "Transformer/posembed_input/pos_embedding"
HEAD_KERNEL_KEY = "head/kernel"  # (features, classes): the head's class count
PRE_LOGITS_KERNEL_KEY = "pre_logits/kernel"  # (D, representation size)
# Keys a model may leave unused: a fine-tuned model drops the pre-training head.
DROPPABLE_PREFIXES = ("pre_logits/", "head/")
# Every key of the hybrids' ResNet trunk starts with one of these.
TRUNK_PREFIXES = ("conv_root/", "gn_root/", "block")


@dataclasses.dataclass
class Row:
    """Checkpoint keys whose arrays, combined, become one Keras variable."""

    keys: tuple
    variable: object
    combine: object = None  # arrays -> array; None means a single key copied as is
    shapes: tuple = None  # the checkpoint shape each key must have

    def value(self, arrays):
        parts = [arrays[k] for k in self.keys]
        return self.combine(parts) if self.combine else parts[0]


def is_trunk_key(key):
    return key.startswith(TRUNK_PREFIXES)


def is_head_key(key):
    return key.startswith("head/")


def fits(found, expected):
    """Whether an array of shape `found` fills a variable of shape `expected`."""
    # GroupNorm parameters are stored as (1, 1, 1, C) in released hybrid files.
    return found == expected or (len(expected) == 1 and found == (1, 1, 1, expected[0]))


def square_grid(count):
    """(side, side) when `count` position-embedding tokens form a square grid, else None."""
    side = math.isqrt(max(count, 0))
    return (side, side) if side * side == count and side > 0 else None


def normalize_keys(arrays):
    """Maps the accepted layouts onto the released pre-Linen one.

    Accepted: `opt/target/` (old optimizer dumps) and `params/` (big_vision)
    prefixes; Linen block names (MultiHeadDotProductAttention_0, LayerNorm_1,
    MlpBlock_0); big_vision's top-level `pos_embedding`. Two keys that name the
    same parameter (`params/cls` and `cls`) raise `CheckpointError`: which one
    is meant cannot be known, and silently keeping either would be a guess.
    """
    out, origin = {}, {}
    for key, value in arrays.items():
        stored = key
        for prefix in ("opt/target/", "params/"):
            if key.startswith(prefix):
                key = key[len(prefix):]
        if key == "pos_embedding":
            key = POS_EMBED_KEY
        key = re.sub(r"(encoderblock_\d+)/MultiHeadDotProductAttention_0/",
                     r"\1/MultiHeadDotProductAttention_1/", key)
        key = re.sub(r"(encoderblock_\d+)/LayerNorm_1/", r"\1/LayerNorm_2/", key)
        key = re.sub(r"(encoderblock_\d+)/MlpBlock_0/", r"\1/MlpBlock_3/", key)
        if key in out:
            raise CheckpointError(f"{origin[key]!r} and {stored!r} are the same parameter "
                                  f"{key!r} in two layouts; a checkpoint holds each parameter "
                                  "once. No weights were changed.")
        out[key], origin[key] = value, stored
    return out


def layout(model):
    """The rows that fill `model` (a ViT, or a ResNetV2 trunk) from a checkpoint."""
    rows = []
    names = {layer.name for layer in model.layers}

    def dense(prefix, layer):
        rows.append(Row((f"{prefix}/kernel",), layer.kernel))
        rows.append(Row((f"{prefix}/bias",), layer.bias))

    def norm(prefix, layer):
        rows.append(Row((f"{prefix}/scale",), layer.gamma))
        rows.append(Row((f"{prefix}/bias",), layer.beta))

    if "resnet" in names:
        rows += trunk_rows(model.get_layer("resnet"))
    if "embedding" in names:
        dense("embedding", model.get_layer("embedding"))
    if "cls" in names:
        rows.append(Row(("cls",), model.get_layer("cls").cls))
    if "posembed_input" in names:
        rows.append(Row((POS_EMBED_KEY,), model.get_layer("posembed_input").pos_embedding))
    block = 0
    while f"encoderblock_{block}" in names:
        layer = model.get_layer(f"encoderblock_{block}")
        prefix = f"Transformer/encoderblock_{block}"
        norm(f"{prefix}/LayerNorm_0", layer.norm_0)
        rows += _attention_rows(f"{prefix}/MultiHeadDotProductAttention_1", layer.attention)
        norm(f"{prefix}/LayerNorm_2", layer.norm_2)
        dense(f"{prefix}/MlpBlock_3/Dense_0", layer.mlp.dense_0)
        dense(f"{prefix}/MlpBlock_3/Dense_1", layer.mlp.dense_1)
        block += 1
    if "encoder_norm" in names:
        norm("Transformer/encoder_norm", model.get_layer("encoder_norm"))
    for name in ("pre_logits", "head"):
        if name in names:
            dense(name, model.get_layer(name))
    for row in rows:
        if row.shapes is None:
            row.shapes = (tuple(row.variable.shape),)
    return rows


def trunk_rows(trunk):
    """The rows of a `ResNetTrunk`: conv_root, gn_root, then every bottleneck unit's
    block{s}/unit{u}/{conv1,conv2,conv3,conv_proj}/kernel and gn{1,2,3,_proj}/{scale,bias}."""
    pairs = [("conv_root/kernel", trunk.conv_root.kernel),
             ("gn_root/scale", trunk.gn_root.gamma), ("gn_root/bias", trunk.gn_root.beta)]
    for s, u, unit in trunk.units:
        for conv, norm in (("conv1", "gn1"), ("conv2", "gn2"), ("conv3", "gn3"),
                           ("conv_proj", "gn_proj")):
            if getattr(unit, conv) is None:  # the projection exists in a stage's first unit
                continue
            pairs.append((f"block{s}/unit{u}/{conv}/kernel", getattr(unit, conv).kernel))
            pairs.append((f"block{s}/unit{u}/{norm}/scale", getattr(unit, norm).gamma))
            pairs.append((f"block{s}/unit{u}/{norm}/bias", getattr(unit, norm).beta))
    return [Row((key,), variable, shapes=(tuple(variable.shape),)) for key, variable in pairs]


def _attention_rows(prefix, attention):
    # The official query/key/value kernels (D, heads, head_dim) are the column blocks of
    # keras_vit's fused (D, 3 * D) kernel; the output kernel is (heads, head_dim, D).
    width, heads = attention.qkv_kernel.shape[0], attention.num_heads
    head_dim = width // heads
    qkv = ("query", "key", "value")
    return [
        Row(tuple(f"{prefix}/{n}/kernel" for n in qkv), attention.qkv_kernel,
            lambda a: np.concatenate([x.reshape(width, width) for x in a], axis=1),
            ((width, heads, head_dim),) * 3),
        Row(tuple(f"{prefix}/{n}/bias" for n in qkv), attention.qkv_bias,
            lambda a: np.concatenate([x.reshape(width) for x in a]), ((heads, head_dim),) * 3),
        Row((f"{prefix}/out/kernel",), attention.out_kernel,
            lambda a: a[0].reshape(width, width), ((heads, head_dim, width),)),
        Row((f"{prefix}/out/bias",), attention.out_bias),
    ]


def describe_architecture(arrays):
    """A human description of the architecture a checkpoint's arrays belong to."""
    kernel = arrays.get("embedding/kernel")
    if kernel is None or kernel.ndim != 4:
        return None
    depth = len({m.group(1) for k in arrays if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))})
    hybrid = "conv_root/kernel" in arrays
    for v in VARIANTS.values():
        found = (kernel.shape[3], depth, kernel.shape[0], hybrid, "cls" in arrays)
        if (v.width, v.depth, v.patch_size, v.is_hybrid, v.classifier == "token") == found \
                and (not hybrid or kernel.shape[2] == v.trunk_channels):
            return f"{v.name} (width {v.width}, depth {depth}, patch {kernel.shape[0]})"
    return f"a ViT of width {kernel.shape[3]}, depth {depth}, patch {kernel.shape[0]}"


# --- other libraries' layouts, translated into the official one -----------------------------
# Each reader in formats/ reads its file format; the key names are translated here, so the
# official layout is still spelled in one place. Keys a translation does not know pass through
# with a "library:" prefix, so that the strict loader names them as unexpected.

# The parameters outside the blocks, by each PyTorch library's name -> the official key.
_POS, _NORM = "Transformer/posembed_input/pos_embedding", "Transformer/encoder_norm"
_TIMM_TOP = {"patch_embed.proj.weight": "embedding/kernel", "patch_embed.proj.bias": "embedding/bias",
             "cls_token": "cls", "pos_embed": _POS, "norm.weight": f"{_NORM}/scale",
             "norm.bias": f"{_NORM}/bias", "head.weight": "head/kernel", "head.bias": "head/bias"}
_TRANSFORMERS_TOP = {
    "embeddings.patch_embeddings.projection.weight": "embedding/kernel",
    "embeddings.patch_embeddings.projection.bias": "embedding/bias",
    "embeddings.cls_token": "cls", "embeddings.position_embeddings": _POS,
    "layernorm.weight": f"{_NORM}/scale", "layernorm.bias": f"{_NORM}/bias",
    "pooler.dense.weight": "pre_logits/kernel", "pooler.dense.bias": "pre_logits/bias",
    "classifier.weight": "head/kernel", "classifier.bias": "head/bias",
}


def _from_torch(official_key, a):
    """A PyTorch tensor in the official layout of `official_key`: the patch convolution
    (out, in, kh, kw) -> (kh, kw, in, out), a linear kernel (out, in) -> (in, out)."""
    if official_key == "embedding/kernel":
        return a.transpose(2, 3, 1, 0)
    return a.T if official_key.endswith("/kernel") else a


def timm_to_official(sd, heads=None, source="the checkpoint"):
    """timm arrays -> official-key arrays, attention split into `heads` heads (None: kept
    (D, D), enough for header checks). Keys it does not know pass through unchanged
    (prefixed "timm:"), so that the strict loader names them as unexpected."""
    if "patch_embed.backbone.stem.conv.weight" in sd:
        raise CheckpointError(f"{source} is a timm hybrid (ResNet + ViT) state dict; keras_vit reads "
                              "hybrids from the official .npz layout only.")
    out = {}
    for key, a in sd.items():
        m = re.fullmatch(r"blocks\.(\d+)\.(.+)", key)
        if m:
            _block_to_official(out, f"Transformer/encoderblock_{m.group(1)}", m.group(2), a, key,
                               heads)
        elif key in _TIMM_TOP:
            out[_TIMM_TOP[key]] = _from_torch(_TIMM_TOP[key], a)
        else:
            out["timm:" + key] = a
    return out


def _block_to_official(out, b, rest, a, key, heads):
    ln = {"norm1": "LayerNorm_0", "norm2": "LayerNorm_2"}
    mha = f"{b}/MultiHeadDotProductAttention_1"
    m = re.fullmatch(r"(norm1|norm2)\.(weight|bias)", rest)
    if m:
        out[f"{b}/{ln[m.group(1)]}/{'scale' if m.group(2) == 'weight' else 'bias'}"] = a
    elif rest in ("attn.qkv.weight", "attn.qkv.bias"):
        d = a.shape[0] // 3
        for j, name in enumerate(("query", "key", "value")):
            part = a[j * d:(j + 1) * d]
            if rest.endswith("weight"):
                out[f"{mha}/{name}/kernel"] = split_heads(part.T, heads, axis=1)
            else:
                out[f"{mha}/{name}/bias"] = split_heads(part, heads, axis=0)
    elif rest == "attn.proj.weight":
        out[f"{mha}/out/kernel"] = split_heads(a.T, heads, axis=0)
    elif rest == "attn.proj.bias":
        out[f"{mha}/out/bias"] = a
    elif m := re.fullmatch(r"mlp\.fc([12])\.(weight|bias)", rest):
        dense = f"{b}/MlpBlock_3/Dense_{int(m.group(1)) - 1}"
        if m.group(2) == "weight":
            out[f"{dense}/kernel"] = a.T
        else:
            out[f"{dense}/bias"] = a
    else:
        out["timm:" + key] = a


def split_heads(a, heads, axis):
    """(.., D, ..) -> (.., heads, D // heads, ..) at `axis`: the official attention shapes."""
    if heads is None or a.shape[axis] % heads:
        return a  # the loader then names the shape mismatch
    shape = list(a.shape)
    shape[axis:axis + 1] = [heads, shape[axis] // heads]
    return a.reshape(shape)


def official_to_timm(arrays):
    """Official-key arrays (heads split as (D, H, hd)) -> timm's VisionTransformer keys."""
    if "conv_root/kernel" in arrays:
        raise ArgumentError("save_safetensors writes timm's plain ViT layout; a hybrid's ResNet trunk "
                            "has no equivalent there. Use save_npz, which timm's npz loader reads.")
    if "pre_logits/kernel" in arrays:
        raise ArgumentError("timm's ViT layout has no pre_logits layer; save this model with "
                            "save_npz, or build it with representation_size=None.")
    sd = {"patch_embed.proj.weight": arrays["embedding/kernel"].transpose(3, 2, 0, 1),
          "patch_embed.proj.bias": arrays["embedding/bias"],
          "pos_embed": arrays["Transformer/posembed_input/pos_embedding"],
          "norm.weight": arrays["Transformer/encoder_norm/scale"],
          "norm.bias": arrays["Transformer/encoder_norm/bias"]}
    if "cls" in arrays:
        sd["cls_token"] = arrays["cls"]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in arrays:
        b, t = f"Transformer/encoderblock_{i}", f"blocks.{i}"
        mha = f"{b}/MultiHeadDotProductAttention_1"
        d = arrays[f"{b}/LayerNorm_0/scale"].shape[0]
        sd[f"{t}.norm1.weight"] = arrays[f"{b}/LayerNorm_0/scale"]
        sd[f"{t}.norm1.bias"] = arrays[f"{b}/LayerNorm_0/bias"]
        sd[f"{t}.norm2.weight"] = arrays[f"{b}/LayerNorm_2/scale"]
        sd[f"{t}.norm2.bias"] = arrays[f"{b}/LayerNorm_2/bias"]
        qkv = ("query", "key", "value")
        sd[f"{t}.attn.qkv.weight"] = np.concatenate(
            [arrays[f"{mha}/{n}/kernel"].reshape(d, d).T for n in qkv])
        sd[f"{t}.attn.qkv.bias"] = np.concatenate([arrays[f"{mha}/{n}/bias"].reshape(d) for n in qkv])
        sd[f"{t}.attn.proj.weight"] = arrays[f"{mha}/out/kernel"].reshape(d, d).T
        sd[f"{t}.attn.proj.bias"] = arrays[f"{mha}/out/bias"]
        for j in (0, 1):
            sd[f"{t}.mlp.fc{j + 1}.weight"] = arrays[f"{b}/MlpBlock_3/Dense_{j}/kernel"].T
            sd[f"{t}.mlp.fc{j + 1}.bias"] = arrays[f"{b}/MlpBlock_3/Dense_{j}/bias"]
        i += 1
    if "head/kernel" in arrays:
        sd["head.weight"] = arrays["head/kernel"].T
        sd["head.bias"] = arrays["head/bias"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


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
            out[_TRANSFORMERS_TOP[name]] = _from_torch(_TRANSFORMERS_TOP[name], a)
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


_KERAS_HUB_BLOCK = {"ln_1/gamma": "LayerNorm_0/scale", "ln_1/beta": "LayerNorm_0/bias",
          "ln_2/gamma": "LayerNorm_2/scale", "ln_2/beta": "LayerNorm_2/bias",
          "mlp/dense_1/kernel": "MlpBlock_3/Dense_0/kernel",
          "mlp/dense_1/bias": "MlpBlock_3/Dense_0/bias",
          "mlp/dense_2/kernel": "MlpBlock_3/Dense_1/kernel",
          "mlp/dense_2/bias": "MlpBlock_3/Dense_1/bias",
          "mha/attention_output/kernel": "MultiHeadDotProductAttention_1/out/kernel",
          "mha/attention_output/bias": "MultiHeadDotProductAttention_1/out/bias"}


def keras_hub_key(path):
    m = re.search(r"transformer_block_(\d+)/(.+)$", path)
    if m:
        b = f"Transformer/encoderblock_{int(m.group(1)) - 1}"
        rest = m.group(2)
        if rest in _KERAS_HUB_BLOCK:
            return f"{b}/{_KERAS_HUB_BLOCK[rest]}"
        qkv = re.fullmatch(r"mha/(query|key|value)/(kernel|bias)", rest)
        if qkv:
            return f"{b}/MultiHeadDotProductAttention_1/{qkv.group(1)}/{qkv.group(2)}"
    for suffix, key in (("class_token", "cls"), ("patch_embedding/kernel", "embedding/kernel"),
                        ("patch_embedding/bias", "embedding/bias"),
                        ("vit_encoder/ln/gamma", "Transformer/encoder_norm/scale"),
                        ("vit_encoder/ln/beta", "Transformer/encoder_norm/bias"),
                        ("pre_logits/kernel", "pre_logits/kernel"),
                        ("pre_logits/bias", "pre_logits/bias"),
                        ("output_dense/kernel", "head/kernel"), ("output_dense/bias", "head/bias"),
                        ("predictions/kernel", "head/kernel"), ("predictions/bias", "head/bias")):
        if path.endswith(suffix):
            return key
    if path.endswith("position_embedding/embeddings"):
        return "Transformer/posembed_input/pos_embedding"
    return "keras_hub:" + path  # the strict loader names it as unexpected


def released_shape(key, shape):
    """The shape `key` has in released files: hybrids store GroupNorm parameters (1, 1, 1, C)."""
    is_group_norm = is_trunk_key(key) and key.split("/")[-2].startswith("gn")
    return (1, 1, 1, *shape) if is_group_norm else tuple(shape)


def keras_hub_shapes(config, task_config=None):
    """The official-key shapes of a keras-hub ViT backbone of `config` (and of its image
    classifier's pre_logits and head, given the task's config): its configs, not its h5
    file, are the cheap header."""
    d, p = config["hidden_dim"], config["patch_size"]
    h, w, c = config["image_shape"]
    p = p if isinstance(p, int) else p[0]
    has_cls = config.get("use_class_token", True)
    shapes = {"embedding/kernel": (p, p, c, d), POS_EMBED_KEY: (1, (h // p) * (w // p) + has_cls, d)}
    if has_cls:
        shapes["cls"] = (1, 1, d)
    for i in range(config["num_layers"]):
        shapes[f"Transformer/encoderblock_{i}/LayerNorm_0/scale"] = (d,)
    if task_config is not None:
        hidden = task_config.get("intermediate_dim")
        if hidden:
            shapes[PRE_LOGITS_KERNEL_KEY] = (d, hidden)
        shapes[HEAD_KERNEL_KEY] = (hidden or d, task_config.get("num_classes"))
    return shapes
