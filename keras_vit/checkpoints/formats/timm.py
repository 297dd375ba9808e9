"""timm's VisionTransformer state dict (safetensors) <-> the official layout.

timm stores torch Linear weights (out, in), a fused `qkv` (3D, D), `cls_token`,
`pos_embed`, `patch_embed.proj` (D, C, p, p), `norm` and `head`; no pre_logits.
Both directions are spelled here, so the reader and `save_safetensors` agree.
"""

import re

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError

__all__ = ["timm_to_official", "official_to_timm", "is_timm_layout"]


def is_timm_layout(names):
    return "patch_embed.proj.weight" in names or "patch_embed.backbone.stem.conv.weight" in names


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
        elif key == "patch_embed.proj.weight":
            out["embedding/kernel"] = a.transpose(2, 3, 1, 0)
        elif key == "patch_embed.proj.bias":
            out["embedding/bias"] = a
        elif key == "cls_token":
            out["cls"] = a
        elif key == "pos_embed":
            out["Transformer/posembed_input/pos_embedding"] = a
        elif key in ("norm.weight", "norm.bias"):
            out["Transformer/encoder_norm/" + ("scale" if key.endswith("weight") else "bias")] = a
        elif key == "head.weight":
            out["head/kernel"] = a.T
        elif key == "head.bias":
            out["head/bias"] = a
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
        raise ValueError("save_safetensors writes timm's plain ViT layout; a hybrid's ResNet trunk "
                         "has no equivalent there. Use save_npz, which timm's npz loader reads.")
    if "pre_logits/kernel" in arrays:
        raise ValueError("timm's ViT layout has no pre_logits layer; save this model with "
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
