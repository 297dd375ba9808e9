"""The independent reference: timm, and random checkpoints in the official layout.

The npz writer spells out the official key names and shapes by hand (from
official-checkpoints.md), independent of keras_vit's own mapping, so a wrong
mapping in keras_vit cannot also be wrong here.
"""

import importlib.util
import sys
import types

import numpy as np
import pytest


def import_timm():
    """Imports timm on a CPU-only torch, or skips the test when it is missing.

    Every torchvision wheel on the registry is a CUDA build whose C ops fail to
    register against CPU torch; timm imports torchvision at import time but its
    ViT path uses none of those ops, so an empty `_meta_registrations` suffices.
    """
    if importlib.util.find_spec("timm") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("the timm oracle needs the 'oracle' extra (torch, timm)")
    sys.modules.setdefault("torchvision._meta_registrations",
                           types.ModuleType("torchvision._meta_registrations"))
    import timm  # noqa: PLC0415

    return timm


def random_vit_npz(path, variant, grid, classes=1000, pre_logits=None, seed=0, linen=False,
                   prefix=""):
    """Writes random ViT weights in the official npz layout; returns the arrays."""
    rng = np.random.default_rng(seed)
    d, h, m = variant.width, variant.heads, variant.mlp_dim
    hd = d // h
    p = variant.patch_size
    in_channels = 3

    def normal(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    ln_names = ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0") \
        if linen else ("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3")
    ln0, mha, ln2, mlp = ln_names
    arrays = {
        "embedding/kernel": normal(p, p, in_channels, d, scale=1 / np.sqrt(p * p * in_channels)),
        "embedding/bias": normal(d),
        "Transformer/posembed_input/pos_embedding": normal(
            1, grid[0] * grid[1] + (variant.classifier == "token"), d, scale=0.5),
        "Transformer/encoder_norm/scale": 1 + normal(d, scale=0.1),
        "Transformer/encoder_norm/bias": normal(d, scale=0.1),
    }
    if variant.classifier == "token":
        arrays["cls"] = normal(1, 1, d, scale=0.5)
    for i in range(variant.depth):
        b = f"Transformer/encoderblock_{i}"
        for ln in (ln0, ln2):
            arrays[f"{b}/{ln}/scale"] = 1 + normal(d, scale=0.1)
            arrays[f"{b}/{ln}/bias"] = normal(d, scale=0.1)
        for name in ("query", "key", "value"):
            arrays[f"{b}/{mha}/{name}/kernel"] = normal(d, h, hd, scale=1 / np.sqrt(d))
            arrays[f"{b}/{mha}/{name}/bias"] = normal(h, hd, scale=0.1)
        arrays[f"{b}/{mha}/out/kernel"] = normal(h, hd, d, scale=1 / np.sqrt(d))
        arrays[f"{b}/{mha}/out/bias"] = normal(d, scale=0.1)
        arrays[f"{b}/{mlp}/Dense_0/kernel"] = normal(d, m, scale=1 / np.sqrt(d))
        arrays[f"{b}/{mlp}/Dense_0/bias"] = normal(m, scale=0.1)
        arrays[f"{b}/{mlp}/Dense_1/kernel"] = normal(m, d, scale=1 / np.sqrt(m))
        arrays[f"{b}/{mlp}/Dense_1/bias"] = normal(d, scale=0.1)
    head_in = d
    if pre_logits:
        arrays["pre_logits/kernel"] = normal(d, pre_logits, scale=1 / np.sqrt(d))
        arrays["pre_logits/bias"] = normal(pre_logits, scale=0.1)
        head_in = pre_logits
    if classes:
        arrays["head/kernel"] = normal(head_in, classes, scale=1 / np.sqrt(head_in))
        arrays["head/bias"] = normal(classes, scale=0.1)
    np.savez(path, **{prefix + k: v for k, v in arrays.items()})
    return arrays


def timm_vit(variant, image_size, classes, npz_path=None, features=False):
    """A timm VisionTransformer matching `variant` (tanh GELU), loaded from an npz."""
    timm = import_timm()
    import torch  # noqa: PLC0415
    from timm.models.vision_transformer import VisionTransformer  # noqa: PLC0415

    gap = variant.classifier == "gap"
    model = VisionTransformer(
        img_size=image_size, patch_size=variant.patch_size, embed_dim=variant.width,
        depth=variant.depth, num_heads=variant.heads, mlp_ratio=variant.mlp_dim / variant.width,
        num_classes=classes, act_layer="gelu_tanh", class_token=not gap,
        global_pool="avg" if gap else "token", fc_norm=False)
    if npz_path is not None:
        model.load_pretrained(str(npz_path))
    model.eval()
    del timm, torch
    return model


def run_timm(model, images_nhwc, features=False):
    """Logits (or pre-head features) of a timm model for NHWC float images."""
    import torch  # noqa: PLC0415

    with torch.no_grad():
        x = torch.from_numpy(np.ascontiguousarray(images_nhwc.transpose(0, 3, 1, 2)))
        if features:
            return model.forward_head(model.forward_features(x), pre_logits=True).numpy()
        return model(x).numpy()
