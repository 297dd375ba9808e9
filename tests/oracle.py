"""The independent reference: timm, and random checkpoints in the official layout.

The npz writer spells out the official key names and shapes by hand (from
official-checkpoints.md), independent of keras_vit's own mapping, so a wrong
mapping in keras_vit cannot also be wrong here (the package's own table is
keras_vit/checkpoints/layout.py). The benchmarks write their checkpoints with
`official_vit_arrays` too, rather than spelling the layout a third time.
"""

import importlib.util
import sys
import types

import numpy as np


def import_timm():
    """Imports timm on a CPU-only torch, or skips the test when it is missing.

    Every torchvision wheel on the registry is a CUDA build whose C ops fail to
    register against CPU torch; timm imports torchvision at import time but its
    ViT path uses none of those ops, so an empty `_meta_registrations` suffices.
    """
    if importlib.util.find_spec("timm") is None or importlib.util.find_spec("torch") is None:
        import pytest  # here, not at the top: the benchmarks import this module without pytest

        pytest.skip("the timm oracle needs the 'oracle' extra (torch, timm)")
    sys.modules.setdefault("torchvision._meta_registrations",
                           types.ModuleType("torchvision._meta_registrations"))
    import timm

    return timm


def import_open_clip():
    """Imports open_clip (the OpenCLIP reference, which imports timm and torchvision) as
    `import_timm` does, or skips the test when it is missing."""
    import_timm()
    if importlib.util.find_spec("open_clip") is None:
        import pytest

        pytest.skip("the open_clip oracle needs open_clip_torch (the README's test command)")
    import open_clip

    return open_clip


def official_vit_arrays(variant, grid, classes=1000, pre_logits=None, seed=0, linen=False):
    """Random ViT weights under the official checkpoint's keys and shapes, as a dict.

    `grid` is the (rows, columns) of the position embedding's patch tokens;
    `classes=0` or None leaves the head out; `linen=True` spells the blocks'
    sub-modules as Linen checkpoints do (MultiHeadDotProductAttention_0, ...).
    """
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
    return arrays


def random_vit_npz(path, variant, grid, classes=1000, pre_logits=None, seed=0, linen=False,
                   prefix=""):
    """Writes `official_vit_arrays(...)` to `path` (keys behind `prefix`); returns the arrays."""
    arrays = official_vit_arrays(variant, grid, classes=classes, pre_logits=pre_logits, seed=seed,
                                 linen=linen)
    np.savez(path, **{prefix + k: v for k, v in arrays.items()})
    return arrays


def timm_vit(variant, image_size, classes, npz_path=None, features=False):
    """A timm VisionTransformer matching `variant` (tanh GELU), loaded from an npz."""
    timm = import_timm()
    import torch
    from timm.models.vision_transformer import VisionTransformer

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
    import torch

    with torch.no_grad():
        x = torch.from_numpy(np.ascontiguousarray(images_nhwc.transpose(0, 3, 1, 2)))
        if features:
            return model.forward_head(model.forward_features(x), pre_logits=True).numpy()
        return model(x).numpy()


def random_hybrid_npz(path, variant, grid, classes=1000, seed=0, gn_shape="4d"):
    """Writes random hybrid weights (ResNetV2 trunk + ViT) in the official layout.

    The trunk keys are spelled out here from the official models_resnet.py
    structure: conv_root (7, 7, 3, 64), gn_root, then block{s}/unit{u}/ with
    conv1 (1, 1, Cin, F), conv2 (3, 3, F, F), conv3 (1, 1, F, 4F), their gn1..gn3,
    and conv_proj (1, 1, Cin, 4F) + gn_proj on unit1. F = 64 * 2**(s - 1).

    Conv kernels have unit-variance entries (standard normal), so that the
    StdConv epsilons of the official code (1e-5 on the std) and timm (1e-8 on
    the variance) both stay negligible. GroupNorm parameters are stored as
    (1, 1, 1, C), as in released files, with gn_shape="4d", else as (C,).
    Returns the arrays.
    """
    arrays = official_vit_arrays(variant, grid, classes=classes, seed=seed)
    rng = np.random.default_rng(seed + 1)
    p, d = variant.patch_size, variant.width

    def gn(prefix, channels):
        shape = (1, 1, 1, channels) if gn_shape == "4d" else (channels,)
        arrays[f"{prefix}/scale"] = (1 + 0.2 * rng.standard_normal(shape)).astype(np.float32)
        arrays[f"{prefix}/bias"] = (0.2 * rng.standard_normal(shape)).astype(np.float32)

    def conv(key, *shape):
        arrays[key] = rng.standard_normal(shape).astype(np.float32)

    conv("conv_root/kernel", 7, 7, 3, 64)
    gn("gn_root", 64)
    channels = 64
    for s, units in enumerate(variant.resnet_stages, start=1):
        f = 64 * 2 ** (s - 1)
        for u in range(1, units + 1):
            unit = f"block{s}/unit{u}"
            conv(f"{unit}/conv1/kernel", 1, 1, channels, f)
            gn(f"{unit}/gn1", f)
            conv(f"{unit}/conv2/kernel", 3, 3, f, f)
            gn(f"{unit}/gn2", f)
            conv(f"{unit}/conv3/kernel", 1, 1, f, 4 * f)
            gn(f"{unit}/gn3", 4 * f)
            if u == 1:
                conv(f"{unit}/conv_proj/kernel", 1, 1, channels, 4 * f)
                gn(f"{unit}/gn_proj", 4 * f)
            channels = 4 * f
    # The patch embedding reads the trunk's output channels, not RGB.
    arrays["embedding/kernel"] = (rng.standard_normal((p, p, channels, d))
                                  / np.sqrt(p * p * channels)).astype(np.float32)
    np.savez(path, **arrays)
    return arrays


def official_hybrid_shapes(variant, grid, classes):
    """{official key: shape} of a hybrid's checkpoint, spelled out from the official structure
    (official-checkpoints.md) without allocating arrays: full-size key sets for free.
    GroupNorm parameters as (C,); released files may store them (1, 1, 1, C)."""
    d, h, m, p = variant.width, variant.heads, variant.mlp_dim, variant.patch_size
    hd = d // h
    shapes = {"conv_root/kernel": (7, 7, 3, 64), "gn_root/scale": (64,), "gn_root/bias": (64,)}
    channels = 64
    for s, units in enumerate(variant.resnet_stages, start=1):
        f = 64 * 2 ** (s - 1)
        for u in range(1, units + 1):
            unit = f"block{s}/unit{u}"
            convs = {"conv1": (1, 1, channels, f), "conv2": (3, 3, f, f), "conv3": (1, 1, f, 4 * f)}
            if u == 1:
                convs["conv_proj"] = (1, 1, channels, 4 * f)
            for conv, shape in convs.items():
                norm = {"conv1": "gn1", "conv2": "gn2", "conv3": "gn3", "conv_proj": "gn_proj"}[conv]
                shapes[f"{unit}/{conv}/kernel"] = shape
                shapes[f"{unit}/{norm}/scale"] = shapes[f"{unit}/{norm}/bias"] = (shape[-1],)
            channels = 4 * f
    shapes.update({"embedding/kernel": (p, p, channels, d), "embedding/bias": (d,),
                   "cls": (1, 1, d), "Transformer/posembed_input/pos_embedding":
                   (1, 1 + grid[0] * grid[1], d),
                   "Transformer/encoder_norm/scale": (d,), "Transformer/encoder_norm/bias": (d,),
                   "head/kernel": (d, classes), "head/bias": (classes,)})
    for i in range(variant.depth):
        b = f"Transformer/encoderblock_{i}"
        mha = f"{b}/MultiHeadDotProductAttention_1"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            shapes[f"{b}/{ln}/scale"] = shapes[f"{b}/{ln}/bias"] = (d,)
        for name in ("query", "key", "value"):
            shapes[f"{mha}/{name}/kernel"], shapes[f"{mha}/{name}/bias"] = (d, h, hd), (h, hd)
        shapes[f"{mha}/out/kernel"], shapes[f"{mha}/out/bias"] = (h, hd, d), (d,)
        shapes[f"{b}/MlpBlock_3/Dense_0/kernel"] = (d, m)
        shapes[f"{b}/MlpBlock_3/Dense_0/bias"] = (m,)
        shapes[f"{b}/MlpBlock_3/Dense_1/kernel"] = (m, d)
        shapes[f"{b}/MlpBlock_3/Dense_1/bias"] = (d,)
    return shapes


def timm_hybrid(variant, image_size, classes, npz_path=None):
    """A timm hybrid ViT matching `variant` (tanh GELU, GroupNorm epsilon 1e-6).

    Built from timm's own ResNetV2 pieces (StdConv2dSame, GroupNormAct, SAME
    max-pool) the way its registered vit_*_r*_ models build them, with the
    transformer size and depth taken from `variant` so reduced-depth variants
    can be compared too. timm's GroupNorm epsilon defaults to 1e-5; the
    official one is 1e-6, so every GroupNorm gets eps=1e-6.
    """
    import_timm()
    import functools

    import torch

    # One thread: on a shared 2-core machine torch's default pool, next to
    # TensorFlow's, oversubscribes the cores and runs ~20x slower.
    torch.set_num_threads(1)

    from timm.layers import GroupNormAct, HybridEmbed, StdConv2dSame
    from timm.models.resnetv2 import ResNetV2, create_resnetv2_stem
    from timm.models.vision_transformer import VisionTransformer

    conv_layer = functools.partial(StdConv2dSame, eps=1e-8)
    norm_layer = functools.partial(GroupNormAct, num_groups=32, eps=1e-6)
    if variant.resnet_stages:
        backbone = ResNetV2(layers=variant.resnet_stages, num_classes=0, global_pool="",
                            preact=False, stem_type="same", conv_layer=conv_layer,
                            norm_layer=norm_layer)
    else:
        backbone = create_resnetv2_stem(3, stem_type="same", preact=False,
                                        conv_layer=conv_layer, norm_layer=norm_layer)
    model = VisionTransformer(
        img_size=image_size, patch_size=variant.patch_size, embed_dim=variant.width,
        depth=variant.depth, num_heads=variant.heads, mlp_ratio=variant.mlp_dim / variant.width,
        num_classes=classes, act_layer="gelu_tanh",
        embed_layer=functools.partial(HybridEmbed, backbone=backbone))
    eps = {m.eps for m in model.modules() if isinstance(m, GroupNormAct)}
    assert eps == {1e-6}, f"timm GroupNorm epsilons {eps}, expected the official 1e-6"
    if npz_path is not None:
        model.load_pretrained(str(npz_path))
    model.eval()
    return model


# BiT (big_transfer's release layout, from official-checkpoints.md): units per stage by depth.
BIT_UNITS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def official_bit_arrays(depth=50, width=1, classes=1000, seed=0):
    """Random BiT ResNetV2 weights under big_transfer's keys and shapes (HWIO kernels, 1-D
    GroupNorm parameters, a (1, 1, C, classes) 1x1 conv head; `classes=None`: no head)."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.05):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    root = 64 * width
    arrays = {"resnet/root_block/standardized_conv2d/kernel": normal(7, 7, 3, root)}
    channels = root
    for s, units in enumerate(BIT_UNITS[depth], start=1):
        mid = root * 2 ** (s - 1)
        for u in range(1, units + 1):
            prefix = f"resnet/block{s}/unit{u:02d}/"
            if u == 1:
                arrays[prefix + "a/proj/standardized_conv2d/kernel"] = normal(1, 1, channels, 4 * mid)
            for part, shape in (("a", (1, 1, channels, mid)), ("b", (3, 3, mid, mid)),
                                ("c", (1, 1, mid, 4 * mid))):
                arrays[f"{prefix}{part}/standardized_conv2d/kernel"] = normal(*shape)
                arrays[f"{prefix}{part}/group_norm/gamma"] = 1 + normal(shape[2], scale=0.1)
                arrays[f"{prefix}{part}/group_norm/beta"] = normal(shape[2], scale=0.1)
            channels = 4 * mid
    arrays["resnet/group_norm/gamma"] = 1 + normal(channels, scale=0.1)
    arrays["resnet/group_norm/beta"] = normal(channels, scale=0.1)
    if classes:
        arrays["resnet/head/conv2d/kernel"] = normal(1, 1, channels, classes, scale=0.01)
        arrays["resnet/head/conv2d/bias"] = normal(classes, scale=0.1)
    return arrays
