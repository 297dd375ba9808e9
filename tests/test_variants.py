"""The variant table: exact parameter counts, names, and argument validation."""

import pytest

import keras_vit
from keras_vit.variants import VARIANTS, get_variant

# Counts at 224 px, 1000 classes, no pre_logits. ViT-B_16 is the official
# models_test.py figure; the others were computed by timm's VisionTransformer
# with the same configuration (test_expected_counts_agree_with_timm re-derives
# them on each run where timm is installed).
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
    "R26+ViT-B_32": 101_383_976,  # timm vit_base_r26_s32_224, re-derived by a slow hybrid test
    "R50+ViT-B_16": 98_659_112,
    "R50+ViT-L_32": 328_994_856,
}
LARGE = {"ViT-L_16", "ViT-L_32", "ViT-H_14", "R50+ViT-L_32"}
PLAIN = [n for n in VARIANTS if not VARIANTS[n].is_hybrid]


def test_every_variant_has_an_expected_count():
    assert set(EXPECTED_PARAMS) == set(VARIANTS), "a variant in the table is not covered"


@pytest.mark.parametrize("name", [n for n in PLAIN if n not in LARGE])
def test_parameter_count(name):
    assert keras_vit.ViT(name).count_params() == EXPECTED_PARAMS[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in PLAIN if n in LARGE])
def test_parameter_count_large(name):
    assert keras_vit.ViT(name).count_params() == EXPECTED_PARAMS[name]


def test_expected_counts_agree_with_timm():
    from tests.oracle import import_timm  # noqa: PLC0415

    import_timm()
    import torch  # noqa: PLC0415
    from timm.models.vision_transformer import VisionTransformer  # noqa: PLC0415

    for name in PLAIN:
        v = VARIANTS[name]
        gap = v.classifier == "gap"
        with torch.device("meta"):  # shapes only: no memory, no time
            model = VisionTransformer(
                img_size=224, patch_size=v.patch_size, embed_dim=v.width, depth=v.depth,
                num_heads=v.heads, mlp_ratio=v.mlp_dim / v.width, num_classes=1000,
                class_token=not gap, global_pool="avg" if gap else "token", fc_norm=False)
        assert sum(p.numel() for p in model.parameters()) == EXPECTED_PARAMS[name], name


@pytest.mark.parametrize("spelling,official", [
    ("B/16", "ViT-B_16"), ("ViT-B_16", "ViT-B_16"), ("vit-b/16", "ViT-B_16"),
    ("ViT-B_16-gap-norep", "ViT-B_16-gap-norep"), ("B/16-gap", "ViT-B_16-gap-norep"),
    ("R50+ViT-B_16", "R50+ViT-B_16"), ("R50+B/16", "R50+ViT-B_16"), ("Ti/16", "ViT-Ti_16"),
])
def test_names(spelling, official):
    assert get_variant(spelling).name == official


def test_named_constructors_build_their_variant():
    assert keras_vit.ViT_S32(image_size=64).name == "ViT-S_32"
    assert keras_vit.ViT_Ti16.__name__ == "ViT_Ti16"


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


def test_missing_weights_file_is_named():
    with pytest.raises(FileNotFoundError, match="nothere.npz"):
        keras_vit.ViT("Ti/16", weights="/tmp/nothere.npz")


@pytest.mark.parametrize("pooling,shape", [("token", (2, 192)), ("gap", (2, 192)),
                                           (None, (2, 1 + 12, 192))])
def test_feature_shapes(pooling, shape):
    import numpy as np  # noqa: PLC0415

    model = keras_vit.ViT("Ti/16", image_size=(48, 64), include_top=False, pooling=pooling)
    assert model.predict(np.zeros((2, 48, 64, 3)), verbose=0).shape == shape
