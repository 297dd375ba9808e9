"""timm's VisionTransformer state dicts (.safetensors, or a Hub folder with timm's config.json).

timm stores torch Linear weights (out, in), a fused `qkv` (3D, D), `cls_token`,
`pos_embed`, `patch_embed.proj` (D, C, p, p), `norm` and `head`; no pre_logits.
A bare state dict records neither its head count nor its normalisation: the
variant's heads are assumed and said so. A Hub folder's `config.json` names the
architecture (whose heads variants.py's timm table knows) and `pretrained_cfg`
its mean/std.
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
from keras_vit.checkpoints.formats.config_values import check_object
from keras_vit.checkpoints.formats.safetensors import INDEX_SUFFIX, open_safetensors
from keras_vit.checkpoints.formats.torch_layout import from_torch, split_heads
from keras_vit.errors import ArgumentError
from keras_vit.variants import timm_variant

__all__ = ["FORMAT", "timm_to_official", "official_to_timm", "weights_file", "open_weights"]


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


def _recognises(source):
    weights = open_weights(source)
    return weights is not None and ("patch_embed.proj.weight" in weights.shapes
                                    or "patch_embed.backbone.stem.conv.weight" in weights.shapes)


class TimmReader(CheckpointReader):
    def __init__(self, source):
        super().__init__(source, FORMAT)
        self._weights = open_weights(source)
        config = source.json("config.json") if source.is_dir else None
        self._config = check_object(f"{source.folder}/config.json", config) if config is not None else {}

    def headers(self, heads=None):
        shapes = timm_to_official(ShapeOnly.of(self._weights.shapes), heads, source=self.path)
        return {k: ArrayHeader(v.shape, np.dtype("float32")) for k, v in shapes.items()}

    def read(self, keys, heads=None):
        arrays = timm_to_official(self._weights.read(), heads, source=self.path)
        return {k: arrays[k] for k in keys}

    def info(self):
        architecture = self._config.get("architecture")
        variant = timm_variant(architecture) if isinstance(architecture, str) else None
        pretrained = self._config.get("pretrained_cfg")
        normalization = None
        if isinstance(pretrained, dict) and "mean" in pretrained and "std" in pretrained:
            normalization = normalization_from(f"{self.source.folder}/config.json",
                                               pretrained["mean"], pretrained["std"])
        return CheckpointInfo({k: h.shape for k, h in self.headers().items()}, format="timm",
                              heads=variant.heads if variant is not None else None,
                              normalization=normalization)


FORMAT = CheckpointFormat(
    name="timm", description="timm state dict (.safetensors, sharded, or a Hub folder with "
                             "timm's config.json)",
    recognises=_recognises, open=TimmReader, numerics=(False, 1e-6), write="save_safetensors")


_POS, _NORM = "Transformer/posembed_input/pos_embedding", "Transformer/encoder_norm"
_TIMM_TOP = {"patch_embed.proj.weight": "embedding/kernel", "patch_embed.proj.bias": "embedding/bias",
             "cls_token": "cls", "pos_embed": _POS, "norm.weight": f"{_NORM}/scale",
             "norm.bias": f"{_NORM}/bias", "head.weight": "head/kernel", "head.bias": "head/bias"}
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
            out[_TIMM_TOP[key]] = from_torch(_TIMM_TOP[key], a)
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


