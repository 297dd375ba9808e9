"""Every entry of the variant table, through one harness; names, constructors, geometry.

The harness runs on each entry of `keras_vit.VARIANTS` (plain, gap and hybrid):

    (a) the exact parameter count at full size, from `EXPECTED_PARAMS`;
    (b) a forward pass, with every shape along the way checked;
    (d) a strict load of a random official-layout file written by the
        independent oracle (tests/oracle.py), values checked against the file.

(c), the `.keras` round trip, is tests/model_checks.py's, run over every table by
tests/models/test_tables.py with `save_npz` -> strict reload and the counts.

(b) and (d) run on a one-block copy of a variant (same width, patch, pooling and
ResNet trunk) at a small image size, and on the full variant under `-m slow`.
The default suite runs them on `DEFAULT_HARNESS`, one variant for each way the
model is put together (class token, global average pool, hybrid with and
without ResNet stages); the other variants differ from these only in sizes,
and run under `-m slow`. (a) runs at full size by default on `DEFAULT_HARNESS` too
(and on ViT-B_16, in tests/models/test_applications_arguments.py); every count is
checked by default through a one-block copy (test_parameter_count_of_a_one_block_copy),
and at full size under `-m slow`.
"""

import dataclasses
import inspect
import pathlib
import re

import numpy as np
import pytest

import keras_vit
from keras_vit.variants import DEMO_VARIANT, VARIANTS, get_variant, variant_names
from tests.conftest import BIG_MEMORY_BYTES
from tests.oracle import import_timm, random_hybrid_npz, random_vit_npz, timm_hybrid

# Counts at 224 px, 1000 classes, no pre_logits. ViT-B_16 is the official
# models_test.py figure; the other plain ones were computed by timm's
# VisionTransformer with the same configuration (test_expected_counts_agree_with_timm
# re-derives every count of this table on each run where timm is installed).
# tools/make_models_page.py imports this table for docs/models-and-weights.md.
EXPECTED_PARAMS = {
    "ViT-Ti_16": 5_717_416,
    "ViT-S_16": 22_050_664,
    "ViT-S_32": 22_878_952,
    "ViT-B_8": 86_576_872,
    "ViT-B_16": 86_567_656,
    "ViT-B_32": 88_224_232,
    "ViT-L_16": 304_326_632,
    "ViT-L_32": 306_535_400,
    "ViT-H_14": 632_045_800,
    "ViT-S_16-gap-norep": 22_049_896,
    "ViT-S_32-gap-norep": 22_878_184,
    "ViT-B_16-gap-norep": 86_566_120,
    "ViT-B_32-gap-norep": 88_222_696,
    # Hybrids: the official models_test.py figures; R26+ViT-B_32 from timm.
    "R+ViT-Ti_16": 6_337_704,
    "R26+ViT-S_32": 36_431_912,
    "R26+ViT-B_32": 101_383_976,  # timm vit_base_r26_s32_224, re-derived by a slow test below
    "R50+ViT-B_16": 98_659_112,
    "R50+ViT-L_32": 328_994_856,
}
NAMES = list(VARIANTS)
# One variant per way of putting the model together: class token, global average pool, a
# hybrid whose trunk is the root alone, a hybrid with ResNet stages.
DEFAULT_HARNESS = {"ViT-Ti_16", "ViT-S_32-gap-norep", "R+ViT-Ti_16", "R26+ViT-S_32"}
# Every variant as a one-block copy at a small size, and at full size (slow).
def _big_memory(name):
    """The big_memory mark for a variant of over a gigabyte of float32 weights (tests/conftest.py)."""
    return (pytest.mark.big_memory,) if EXPECTED_PARAMS[name] * 4 > BIG_MEMORY_BYTES else ()


HARNESS = [pytest.param(n, False, id=f"{n}-depth1",
                        marks=() if n in DEFAULT_HARNESS else pytest.mark.slow) for n in NAMES] + \
          [pytest.param(n, True, id=f"{n}-full", marks=(pytest.mark.slow, *_big_memory(n)))
           for n in NAMES]


def _assembly(variant):
    """How a variant is put together, sizes aside."""
    trunk = None if not variant.is_hybrid else ("stages" if variant.resnet_stages else "root")
    return variant.classifier, trunk


def test_the_default_harness_covers_every_assembly_in_the_table():
    assert {_assembly(VARIANTS[n]) for n in DEFAULT_HARNESS} == {_assembly(v) for v in VARIANTS.values()}


def _one_block(name):
    """The variant with one transformer block: same width, patch, pooling and trunk."""
    return dataclasses.replace(VARIANTS[name], depth=1)


def _small_size(variant):
    """The smallest multiple of the variant's stride that is >= 32 px and two tokens across."""
    stride = variant.total_stride
    return stride * max(2, -(-32 // stride))


def _harness_variant(name, full):
    """(variant, square image size) of a harness case."""
    if full:
        return VARIANTS[name], 224
    variant = _one_block(name)
    return variant, _small_size(variant)


def _images(n, size, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *size, 3)).astype(np.float32)


# --- (a) exact parameter counts -------------------------------------------------------------

def test_every_variant_has_an_expected_count():
    assert set(EXPECTED_PARAMS) == set(VARIANTS), "a variant in the table is not covered"


# Built at full size by default: one variant per way of putting the model together
# (DEFAULT_HARNESS, the smallest of each but for R26+ViT-S_32, the smallest with ResNet
# stages). ViT-B_16, the official models_test.py figure, is built at full size and counted by
# tests/models/test_applications_arguments.py::test_vit_b16_with_input_shape. Every other
# count is checked by default through a one-block copy (test_parameter_count_of_a_one_block_copy,
# whose per-block count these full-size builds confirm); at full size under `-m slow`.
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n in DEFAULT_HARNESS else pytest.mark.slow) for n in NAMES])
def test_parameter_count(name):
    assert keras_vit.ViT(name).count_params() == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_of_a_one_block_copy(name):
    """Cheap for every variant: one built block, plus depth - 1 blocks counted by hand
    (two LayerNorms, the fused qkv and output projections, the two MLP layers)."""
    variant = VARIANTS[name]
    d, m = variant.width, variant.mlp_dim
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * m + m) + (m * d + d)
    one_block = keras_vit.ViT(_one_block(name)).count_params()
    assert one_block + (variant.depth - 1) * block == EXPECTED_PARAMS[name]


def test_expected_counts_agree_with_timm():
    import_timm()
    import torch
    from timm.models.vision_transformer import VisionTransformer

    for name, v in VARIANTS.items():
        gap = v.classifier == "gap"
        with torch.device("meta"):  # shapes only: no memory, no time
            if v.is_hybrid:  # timm's own ResNetV2 pieces, as its vit_*_r*_ models build them
                model = timm_hybrid(v, 224, 1000)
            else:
                model = VisionTransformer(
                    img_size=224, patch_size=v.patch_size, embed_dim=v.width, depth=v.depth,
                    num_heads=v.heads, mlp_ratio=v.mlp_dim / v.width, num_classes=1000,
                    class_token=not gap, global_pool="avg" if gap else "token", fc_norm=False,
                    weight_init="skip")  # no initialiser: it changes values, not shapes
        assert sum(p.numel() for p in model.parameters()) == EXPECTED_PARAMS[name], name


@pytest.mark.slow
def test_r26_b32_count_matches_timm():
    # Not in models_test.py: timm's registered vit_base_r26_s32_224 is the source.
    timm = import_timm()
    reference = timm.create_model("vit_base_r26_s32_224", pretrained=False, num_classes=1000)
    expected = sum(p.numel() for p in reference.parameters())
    assert expected == EXPECTED_PARAMS["R26+ViT-B_32"]
    assert keras_vit.ViT_R26_B32().count_params() == expected


# --- (b) forward pass -----------------------------------------------------------------------

@pytest.mark.parametrize("name,full", HARNESS)
def test_forward_pass_shapes(name, full):
    variant, size = _harness_variant(name, full)
    stride = variant.total_stride
    image_size = (size, size + stride)  # rectangular: rows and columns kept apart
    model = keras_vit.ViT(variant, image_size=image_size, classes=7)
    rows, cols = variant.token_grid(image_size)
    assert (rows, cols) == (size // stride, size // stride + 1)
    assert model.get_layer("posembed_input").grid_size == (rows, cols)
    prefix = int(variant.classifier == "token")
    assert model.get_layer("posembed_input").output.shape == (None, prefix + rows * cols, variant.width)
    assert model.get_layer(f"{variant.classifier}_pool").output.shape == (None, variant.width)
    if variant.is_hybrid:
        assert model.get_layer("resnet").output.shape == (
            None, *(variant.feature_size(s) for s in image_size), variant.trunk_channels)
    else:
        assert "resnet" not in [layer.name for layer in model.layers]
    logits = model(_images(2, image_size)).numpy()
    assert logits.shape == (2, 7) and np.all(np.isfinite(logits))


# --- (d) strict load of an official-layout file --------------------------------------------

@pytest.mark.parametrize("name,full", HARNESS)
def test_strict_load_of_an_official_file(name, full, tmp_path):
    variant, size = _harness_variant(name, full)
    path = tmp_path / "official.npz"
    write = random_hybrid_npz if variant.is_hybrid else random_vit_npz
    arrays = write(path, variant, variant.token_grid((size, size)), classes=7)
    model = keras_vit.ViT(variant, image_size=size, classes=7)
    keras_vit.load_weights(model, str(path))  # strict: raises on any missing or extra key

    last = variant.depth - 1
    block = model.get_layer(f"encoderblock_{last}")
    prefix = f"Transformer/encoderblock_{last}"
    checks = {
        "embedding/kernel": model.get_layer("embedding").kernel,
        "Transformer/posembed_input/pos_embedding": model.get_layer("posembed_input").pos_embedding,
        f"{prefix}/MlpBlock_3/Dense_1/kernel": block.mlp.dense_1.kernel,
        f"{prefix}/MultiHeadDotProductAttention_1/out/bias": block.attention.out_bias,
        "Transformer/encoder_norm/scale": model.get_layer("encoder_norm").gamma,
        "head/kernel": model.get_layer("head").kernel,
        "head/bias": model.get_layer("head").bias,
    }
    if variant.classifier == "token":
        checks["cls"] = model.get_layer("cls").cls
    else:
        assert "cls" not in arrays and "cls" not in [layer.name for layer in model.layers]
    if variant.is_hybrid:
        trunk = model.get_layer("resnet")
        checks["conv_root/kernel"] = trunk.conv_root.kernel
        checks["gn_root/scale"] = trunk.gn_root.gamma
        if variant.resnet_stages:
            s, u, unit = trunk.units[-1]
            assert (s, u) == (len(variant.resnet_stages), variant.resnet_stages[-1])
            checks[f"block{s}/unit{u}/conv3/kernel"] = unit.conv3.kernel
            checks[f"block{s}/unit{u}/gn3/bias"] = unit.gn3.beta
    for key, variable in checks.items():
        np.testing.assert_array_equal(variable.numpy(), arrays[key].reshape(variable.shape),
                                      err_msg=key)
    # The fused qkv kernel holds the query, key and value kernels as column blocks.
    d = variant.width
    qkv = block.attention.qkv_kernel.numpy()
    for i, part in enumerate(("query", "key", "value")):
        np.testing.assert_array_equal(
            qkv[:, i * d:(i + 1) * d],
            arrays[f"{prefix}/MultiHeadDotProductAttention_1/{part}/kernel"].reshape(d, d))


# --- names and constructors -----------------------------------------------------------------

@pytest.mark.parametrize("spelling,official", [
    ("B/16", "ViT-B_16"), ("ViT-B_16", "ViT-B_16"), ("vit-b/16", "ViT-B_16"),
    ("ViT-B_16-gap-norep", "ViT-B_16-gap-norep"), ("B/16-gap", "ViT-B_16-gap-norep"),
    ("R50+ViT-B_16", "R50+ViT-B_16"), ("R50+B/16", "R50+ViT-B_16"), ("Ti/16", "ViT-Ti_16"),
])
def test_names(spelling, official):
    assert get_variant(spelling).name == official


def test_every_short_name_round_trips():
    for name, variant in VARIANTS.items():
        assert get_variant(variant.short_name) is variant, name
    assert get_variant("R50+B/16") is get_variant("R50+ViT-B_16")


def test_every_non_gap_variant_has_one_named_constructor(monkeypatch):
    """ViT-B_16 -> ViT_B16, R50+ViT-B_16 -> ViT_R50_B16, R+ViT-Ti_16 -> ViT_R_Ti16; gap
    variants have none. Each shows ViT's full signature minus `variant`."""
    from keras_vit.models import vit as vit_module

    vit_parameters = list(inspect.signature(keras_vit.ViT).parameters.values())
    assert vit_parameters[0].name == "variant"
    constructors = {n: getattr(keras_vit, n) for n in dir(keras_vit) if n.startswith("ViT_")}
    calls = []
    # Record what each constructor asks ViT for, without building anything.
    monkeypatch.setattr(vit_module, "ViT", lambda variant, **kwargs: calls.append((variant, kwargs)))
    by_variant = {}
    for attribute, constructor in constructors.items():
        assert constructor.__name__ == attribute
        assert attribute in keras_vit.__all__, attribute
        assert list(inspect.signature(constructor).parameters.values()) == vit_parameters[1:], attribute
        calls.clear()
        constructor(image_size=-1)  # invalid on purpose: fails fast if ViT was not intercepted
        assert len(calls) == 1, attribute
        variant, kwargs = calls[0]
        assert kwargs == {"weights": None, "image_size": -1}, attribute
        by_variant.setdefault(get_variant(variant).name, []).append(attribute)
    expected = {n for n, v in VARIANTS.items() if v.classifier != "gap"}
    assert set(by_variant) == expected
    for name, attributes in by_variant.items():
        assert attributes == [constructor_name(name)], name


def constructor_name(official):
    """ViT-B_16 -> ViT_B16, R50+ViT-B_16 -> ViT_R50_B16: the spelling of 0.1's constructors."""
    return "ViT_" + re.sub(r"_(\d+)$", r"\1", official.replace("ViT-", "")).replace("+", "_")


def test_constructors_all_and_the_api_page_agree_with_the_variant_table():
    """Each non-gap row of VARIANTS, and each row of BIT_VARIANTS, in table order, is one
    constructor in keras_vit and keras_vit.models, in both `__all__`s, and one entry of
    docs/api.md's Models section: a row added to a table without its docs entry fails here."""
    import keras_vit.models
    from keras_vit.variants import BIT_VARIANTS

    expected = [constructor_name(n) for n, v in VARIANTS.items() if v.classifier != "gap"]
    assert [v.constructor_name for v in VARIANTS.values() if v.constructor_name] == expected
    # BiT-R50x1 -> BiT_R50x1, spelled here independently of BiTVariant.constructor_name.
    bit_expected = [n.replace("-", "_") for n in BIT_VARIANTS]
    assert [v.constructor_name for v in BIT_VARIANTS.values()] == bit_expected
    for module in (keras_vit, keras_vit.models):
        for prefix, names in (("ViT_", expected), ("BiT_", bit_expected)):
            assert [n for n in module.__all__ if n.startswith(prefix)] == names, module.__name__
            assert sorted(n for n in dir(module) if n.startswith(prefix)) == sorted(names)
    for name in [*expected, *bit_expected]:
        assert getattr(keras_vit, name) is getattr(keras_vit.models, name)
        assert getattr(keras_vit, name).__name__ == name
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    models = page.split("\n## Models\n")[1].split("\n## ")[0]
    entries = re.findall(r"^::: keras_vit\.(\S+)$", models, flags=re.M)
    assert entries == ["ViT", *expected, "ResNetV2", "BiT", *bit_expected], \
        "docs/api.md's Models section"


def test_the_demo_variant_is_found_by_name_and_is_not_official():
    """No named constructor, no weights, not in VARIANTS; `get_variant("demo")` finds it."""
    from keras_vit.checkpoints import catalogue

    assert get_variant("demo") is DEMO_VARIANT and get_variant("ViT-demo_4") is DEMO_VARIANT
    assert DEMO_VARIANT.name not in VARIANTS and DEMO_VARIANT not in VARIANTS.values()
    assert DEMO_VARIANT.name not in variant_names()
    assert DEMO_VARIANT.constructor_name is None
    assert not hasattr(keras_vit, constructor_name(DEMO_VARIANT.name))
    assert [c.tag for c in catalogue() if c.variant == DEMO_VARIANT.name] == []


def test_named_constructors_build_their_variant():
    assert keras_vit.ViT_S32(image_size=64).name == "ViT-S_32"
    assert keras_vit.ViT_Ti16.__name__ == "ViT_Ti16"
    assert keras_vit.ViT_R50_B16.__name__ == "ViT_R50_B16"


# --- arguments ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    (dict(variant="B/17"), "Unknown ViT variant"),
    (dict(variant="Ti/16", image_size=100), "not divisible"),
    (dict(variant="Ti/16", image_size=(64, 70)), "not divisible"),
    (dict(variant="Ti/16", image_size=0), "positive"),
    (dict(variant="Ti/16", pooling="max"), "pooling"),
    (dict(variant="Ti/16", pooling=None), "include_top=True needs pooled"),
    (dict(variant="B/16-gap", pooling="token"), "no class token"),
    (dict(variant="Ti/16", classes=0), "classes"),
    (dict(variant="Ti/16", dropout=1.5), "dropout"),
    (dict(variant="Ti/16", include_top=False, classifier_activation="softmax"), "include_top"),
    (dict(variant="Ti/16", weights="imagenet22k"), "Unknown weights"),
    (dict(variant="Ti/16", weights="imagenet21k"), "no 'imagenet21k' weights for ViT-Ti_16"),
])
def test_bad_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(**kwargs)


# Hostile construction arguments (issue 17): a clear ValueError naming the argument...
TINY = keras_vit.Variant("ViT-args_16", width=32, depth=1, mlp_dim=64, heads=2, patch_size=16)


@pytest.mark.parametrize("kwargs,message", [
    (dict(image_size=32.0), r"image_size must be a positive int or \(height, width\) of ints, "
                            r"got 32.0"),
    (dict(image_size=(32, 32.5)), "image_size must be"),
    (dict(image_size=True), "image_size must be"),
    (dict(classes=True), "classes must be a positive int, got True"),
    (dict(classes=10.0), "classes must be a positive int, got 10.0"),
    (dict(channels=0), "channels must be a positive int, got 0"),
    (dict(channels=-3), "channels must be a positive int, got -3"),
    (dict(include_top=False, classes=5), "classes=5 sets the size of the head, which "
                                         "include_top=False leaves out"),
])
def test_hostile_construction_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(TINY, **kwargs)


# ... or what a Keras user expects: NumPy integers are integers.
def test_numpy_integers_are_accepted():
    model = keras_vit.ViT(TINY, image_size=np.int64(32), classes=np.int64(10),
                          channels=np.int32(1))
    assert model.input_shape == (None, 32, 32, 1) and model.output_shape == (None, 10)
    assert type(model.get_layer("head").units) is int
    wide = keras_vit.ViT(TINY, image_size=(np.int32(32), np.int64(48)))
    assert wide.input_shape == (None, 32, 48, 3)


def test_missing_weights_file_is_named():
    with pytest.raises(FileNotFoundError, match="nothere.npz"):
        keras_vit.ViT("Ti/16", weights="/tmp/nothere.npz")


@pytest.mark.parametrize("pooling,shape", [("token", (2, 192)), ("gap", (2, 192)),
                                           (None, (2, 1 + 12, 192))])
def test_feature_shapes(pooling, shape):
    # A one-block Ti/16, called directly: the features' shape is the width and the token
    # count, which the depth does not change.
    model = keras_vit.ViT(_one_block("ViT-Ti_16"), image_size=(48, 64), include_top=False,
                          pooling=pooling)
    assert np.asarray(model(np.zeros((2, 48, 64, 3), np.float32))).shape == shape


# --- geometry: strides, token grids, the sizes a hybrid takes ------------------------------

def _tiny_hybrid(stages=(1, 1), patch_size=1, depth=1):
    """A cheap hybrid with the real trunk layout: 2 stages of 1 unit, width-64 transformer."""
    return keras_vit.Variant("R-tiny", 64, depth, 128, 2, patch_size, "token", stages)


def test_strides():
    # R+Ti/16 is named after its AugReg sibling; it really is stem /4 times patch 8.
    strides = {"R+Ti/16": 32, "R26+S/32": 32, "R26+B/32": 32, "R50+B/16": 16, "R50+L/32": 32}
    for name, stride in strides.items():
        assert get_variant(name).total_stride == stride
    for name, variant in VARIANTS.items():
        if not variant.is_hybrid:
            assert (variant.resnet_stride, variant.trunk_channels) == (1, None), name
            assert variant.total_stride == variant.patch_size == int(name.split("_")[1].split("-")[0])
        else:  # the name's "/16" or "/32" is the total stride, but for R+Ti/16 (above)
            if name != "R+ViT-Ti_16":
                assert variant.total_stride == int(name.split("_")[1]), name
            assert variant.total_stride == variant.resnet_stride * variant.patch_size, name


def test_any_size_works_for_patch_1_hybrids_with_ceil_grids():
    # SAME padding: every stride-2 step gives ceil(size / 2), as in the official model.
    variant = get_variant("R50+B/16")
    assert variant.token_grid((200, 200)) == (13, 13)  # 200 -> 100 -> 50 -> 25 -> 13
    assert variant.token_grid((224, 97)) == (14, 7)
    model = keras_vit.ViT(_tiny_hybrid(), image_size=(70, 33), include_top=False, pooling=None)
    assert model.output_shape == (None, 1 + 9 * 5, 64)  # ceil(70/8) x ceil(33/8) + cls
    assert model.get_layer("posembed_input").grid_size == (9, 5)


def test_r_ti16_needs_a_feature_map_its_patch_tiles():
    with pytest.raises(ValueError, match=r"50x50 feature map .* ceil\(size / 4\)"):
        keras_vit.ViT_R_Ti16(image_size=200)
    model = keras_vit.ViT(dataclasses.replace(get_variant("R+Ti/16"), depth=1), image_size=253)
    assert model.get_layer("posembed_input").grid_size == (8, 8)  # ceil(253 / 4) = 64 = 8 * 8
