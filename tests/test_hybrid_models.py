"""Hybrid ResNet + ViT architectures: parameter counts, image sizes, the trunk's pieces."""

import dataclasses

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.resnet import StdConv2D
from keras_vit.variants import get_variant
from tests.oracle import import_timm

# The official models_test.py counts (1000 classes, 224 px, no pre_logits).
OFFICIAL_COUNTS = {"R+ViT-Ti_16": 6_337_704, "R26+ViT-S_32": 36_431_912,
                   "R50+ViT-B_16": 98_659_112, "R50+ViT-L_32": 328_994_856}
# Not in models_test.py: timm's vit_base_r26_s32_224(num_classes=1000) counts this
# (re-derived from timm by test_r26_b32_count_matches_timm below).
R26_B32_COUNT = 101_383_976


@pytest.mark.parametrize("name", ["R+ViT-Ti_16", "R26+ViT-S_32", "R50+ViT-B_16"])
def test_parameter_count_matches_official(name):
    assert keras_vit.ViT(name).count_params() == OFFICIAL_COUNTS[name]


@pytest.mark.slow
def test_r50_l32_parameter_count_matches_official():
    assert keras_vit.ViT_R50_L32().count_params() == OFFICIAL_COUNTS["R50+ViT-L_32"]


@pytest.mark.slow
def test_r26_b32_count_matches_timm():
    timm = import_timm()
    reference = timm.create_model("vit_base_r26_s32_224", pretrained=False, num_classes=1000)
    expected = sum(p.numel() for p in reference.parameters())
    assert expected == R26_B32_COUNT
    assert keras_vit.ViT_R26_B32().count_params() == expected


def test_names_and_constructors_agree():
    assert get_variant("R50+B/16") is get_variant("R50+ViT-B_16")
    assert keras_vit.ViT_R50_B16.__name__ == "ViT_R50_B16"
    # R+Ti/16 is named after its AugReg sibling; it really is stem /4 times patch 8.
    strides = {"R+Ti/16": 32, "R26+S/32": 32, "R26+B/32": 32, "R50+B/16": 16, "R50+L/32": 32}
    for name, stride in strides.items():
        assert get_variant(name).total_stride == stride


def _small(stages=(1, 1), patch_size=1, depth=1):
    """A cheap hybrid with the real trunk layout: 2 stages of 1 unit, width-64 transformer."""
    return keras_vit.Variant("R-tiny", 64, depth, 128, 2, patch_size, "token", stages)


def test_any_size_works_for_patch_1_hybrids_with_ceil_grids():
    # SAME padding: every stride-2 step gives ceil(size / 2), as in the official model.
    variant = get_variant("R50+B/16")
    assert variant.token_grid((200, 200)) == (13, 13)  # 200 -> 100 -> 50 -> 25 -> 13
    assert variant.token_grid((224, 97)) == (14, 7)
    model = keras_vit.ViT(_small(), image_size=(70, 33), include_top=False, pooling=None)
    assert model.output_shape == (None, 1 + 9 * 5, 64)  # ceil(70/8) x ceil(33/8) + cls
    assert model.get_layer("posembed_input").grid_size == (9, 5)


def test_r_ti16_needs_a_feature_map_its_patch_tiles():
    with pytest.raises(ValueError, match=r"50x50 feature map .* ceil\(size / 4\)"):
        keras_vit.ViT_R_Ti16(image_size=200)
    model = keras_vit.ViT(dataclasses.replace(get_variant("R+Ti/16"), depth=1), image_size=253)
    assert model.get_layer("posembed_input").grid_size == (8, 8)  # ceil(253 / 4) = 64 = 8 * 8


def test_std_conv_matches_the_official_formula():
    """(w - mean) / (std + 1e-5), population std over H, W, Cin; checked in NumPy."""
    rng = np.random.default_rng(0)
    layer = StdConv2D(4, 3, strides=2)
    x = rng.standard_normal((1, 7, 6, 5)).astype(np.float32)
    layer.build(x.shape)
    # A small-scale kernel, where the epsilon's placement matters.
    kernel = (0.001 * rng.standard_normal((3, 3, 5, 4)) + 0.002).astype(np.float32)
    layer.kernel.assign(kernel)
    centred = kernel - kernel.mean(axis=(0, 1, 2))
    standard = centred / (centred.std(axis=(0, 1, 2)) + 1e-5)
    # TF SAME for 7 rows / stride 2: 4 outputs, 2 padding rows split 1 / 1;
    # 6 columns: 3 outputs, 1 padding column after.
    padded = np.pad(x, ((0, 0), (1, 1), (0, 1), (0, 0)))
    expected = np.zeros((1, 4, 3, 4), np.float32)
    for i in range(4):
        for j in range(3):
            patch = padded[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            expected[0, i, j] = np.tensordot(patch, standard, axes=3)
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-4, atol=1e-4)
    assert layer.bias is None


def test_group_norm_is_32_groups_epsilon_1e6():
    """Checked on a low-variance input, where epsilon matters (the parity tests'
    activations are too large to tell 1e-6 from 1e-3)."""
    norm = keras_vit.ResNetV2("R26+S/32").get_layer("resnet").gn_root
    assert norm.groups == 32
    x = (1e-3 * np.random.default_rng(0).standard_normal((1, 3, 3, 64))).astype(np.float32)
    groups = x.reshape(1, 3, 3, 32, 2)
    mean = groups.mean(axis=(1, 2, 4), keepdims=True)
    var = groups.var(axis=(1, 2, 4), keepdims=True)
    expected = ((groups - mean) / np.sqrt(var + 1e-6)).reshape(x.shape)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-3, atol=1e-3)


def test_resnet_features_returns_every_stage_and_matches_the_hybrid_trunk():
    model = keras_vit.ViT(_small(), image_size=40)
    trunk = keras_vit.ResNetV2(_small())
    for ours, theirs in zip(trunk.get_layer("resnet").weights, model.get_layer("resnet").weights):
        ours.assign(np.random.default_rng(0).standard_normal(ours.shape))
        theirs.assign(ours.numpy())
    x = np.random.default_rng(1).uniform(-1, 1, (2, 40, 40, 3)).astype(np.float32)
    features = trunk(x)
    assert {k: tuple(v.shape) for k, v in features.items()} == {
        "stem": (2, 10, 10, 64), "block1": (2, 10, 10, 256), "block2": (2, 5, 5, 512)}
    np.testing.assert_allclose(features["block2"].numpy(),
                               model.get_layer("resnet")(x).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="has no ResNet"):
        keras_vit.ResNetV2("B/16")


def test_mixed_precision_hybrid_runs_with_float32_logits():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras_vit.ViT(_small(), image_size=32, classes=3)
        logits = model(np.zeros((1, 32, 32, 3), np.float32))
        assert model.get_layer("resnet").compute_dtype == "float16"
        assert model.get_layer("resnet").conv_root.kernel.dtype == "float32"
        assert logits.dtype == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")
