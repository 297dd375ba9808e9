"""The family rows of the variant table (keras_vit.variants.FAMILIES) against timm's own
models: every switch, the default resolution and normalisation timm's pretrained config
records, and the exact parameter count of every named size; names and constructors; and
each family through the model checks every table passes (tests/model_checks.py).

timm builds the full-size models on torch's "meta" device (shapes, no memory); keras_vit's
count comes from one- and two-block copies at full width, since a count is affine in the
depth (every block has the same parameters): count(depth) = c1 + (depth - 1) * (c2 - c1).
"""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit.variants import FAMILIES, get_variant
from keras_vit.variants.timm_names import TIMM_ARCHITECTURES
from tests.model_checks import check_model
from tests.oracle import import_timm

# Counts at each row's default resolution with a 1000-class head, as timm's model of the
# row counts them (timm 1.0.31, on the meta device; test_the_tables_counts_are_timms re-derives
# each where timm is installed). tools/make_models_page.py shows them.
FAMILY_PARAMS = {
    "DeiT-Ti/16": 5_717_416,
    "DeiT-S/16": 22_050_664,
    "DeiT-B/16": 86_567_656,
    "DeiT-Ti/16-distilled": 5_910_800,
    "DeiT-S/16-distilled": 22_436_432,
    "DeiT-B/16-distilled": 87_338_192,
    "DeiT3-S/16": 22_059_496,
    "DeiT3-B/16": 86_585_320,
    "DeiT3-L/16": 304_374_760,
    "DINOv2-S/14": 22_441_192,
    "DINOv2-B/14": 87_348_712,
    "DINOv2-L/14": 305_392_616,
    "DINOv2-g/14": 1_138_016_232,
    "DINOv2-S/14-reg4": 22_442_344,
    "DINOv2-B/14-reg4": 87_351_016,
    "DINOv2-L/14-reg4": 305_395_688,
    "DINOv2-g/14-reg4": 1_138_020_840,
    "SigLIP-B/16": 93_653_224,
    "SigLIP-So400m/14": 428_833_704,
    "SigLIP2-B/16-naflex": 93_699_304,
    "SigLIP2-So400m/16-naflex": 429_041_064,
    "CLIP-B/32": 88_225_000,
    "CLIP-B/16": 86_568_424,
    "CLIP-L/14": 304_204_776,
    "FlexiViT-S/16": 22_061_416,
    "FlexiViT-B/16": 86_589_160,
    "FlexiViT-L/16": 304_355_304,
    "DINOv3-Ti/16-qkvb": 5_682_664,
    "DINOv3-S/16": 21_971_944,
    "DINOv3-S/16-qkvb": 21_981_160,
    "DINOv3-S+/16": 29_068_264,
    "DINOv3-S+/16-qkvb": 29_077_480,
    "DINOv3-B/16": 86_410_216,
    "DINOv3-B/16-qkvb": 86_428_648,
    "DINOv3-L/16": 304_104_424,
    "DINOv3-L/16-qkvb": 304_153_576,
    "DINOv3-H+/16": 841_790_440,
    "DINOv3-H+/16-qkvb": 841_872_360,
    "DINOv3-7B/16": 6_720_127_976,
    "EVA02-Ti/14": 5_695_144,
    "EVA02-S/14": 22_006_120,
    "EVA02-B/14": 86_527_720,
    "EVA02-L/14": 304_293_800,
    "AIMv2-L/14": 310_222_824,
    "AIMv2-H/14": 682_388_968,
    "AIMv2-1B/14": 1_237_007_336,
    "AIMv2-3B/14": 2_723_731_432,
    "PE-Core-Ti/16": 6_235_240,
    "PE-Core-S/16": 23_971_048,
    "PE-Core-B/16": 93_655_528,
    "PE-Core-L/14": 317_127_656,
    "PE-Core-G/14": 1_881_603_560,
    "PE-Lang-L/14": 292_440_040,
    "PE-Lang-G/14": 1_742_459_624,
    "PE-Spatial-Ti/16": 5_876_200,
    "PE-Spatial-S/16": 22_368_232,
    "PE-Spatial-B/16": 87_202_792,
    "PE-Spatial-L/14": 304_989_160,
    "PE-Spatial-G/14": 1_853_424_104,
}
# Each family row and timm's architecture of it (the table's inverse, checked complete below).
TIMM_NAME = {official: base for base, (official, _) in TIMM_ARCHITECTURES.items()
             if official in FAMILIES}
# Too heavy for the default run at full width (their one- and two-block copies hold 30M to
# 100M parameters, and timm's meta build of the giant is slow to construct). So400m's key set
# and shapes at full size are checked by default in tests/checkpoints/formats/test_timm_families.py
# (test_the_full_size_so400m_key_set_maps_exactly), which is its count parameter by parameter.
HEAVY = {n for n, v in FAMILIES.items() if v.width >= 1024}


def _timm_model(name, **kwargs):
    timm = import_timm()
    import torch

    base = TIMM_NAME[name]
    sized = f"{base}_{FAMILIES[name].image_size}"  # 224 px, or the row's own (PE-core's)
    registered = sized if timm.list_models(sized) else base
    with torch.device("meta"):
        return timm.create_model(registered, pretrained=False, **kwargs)


def _ours_count(variant, classes=1000):
    def count(depth):
        model = keras_vit.ViT(dataclasses.replace(variant, depth=depth), classes=classes)
        return model.count_params()

    one, two = count(1), count(2)
    return one + (variant.depth - 1) * (two - one)


def test_every_family_row_has_its_timm_architecture():
    assert set(TIMM_NAME) == set(FAMILIES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n in HEAVY else ())
                                  for n, v in FAMILIES.items() if v.patch_input == "image"])
def test_the_row_is_what_timm_builds(name):
    import torch

    variant = FAMILIES[name]
    model = _timm_model(name)
    if type(model).__name__ == "Eva":
        return _check_eva_row(model, variant)
    block = model.blocks[0]
    assert model.embed_dim == variant.width and len(model.blocks) == variant.depth
    assert block.attn.num_heads == variant.heads
    mlp = type(block.mlp).__name__
    first = block.mlp.fc1_g if mlp == "SwiGLU" else block.mlp.fc1
    assert first.out_features * (2 if mlp == "SwiGLU" else 1) == variant.mlp_dim
    assert model.patch_embed.patch_size == (variant.patch_size,) * 2
    assert (model.patch_embed.proj.bias is not None) == variant.patch_bias
    assert (model.cls_token is not None) == variant.has_class_token
    assert (getattr(model, "dist_token", None) is not None) == variant.distilled
    assert model.num_reg_tokens == variant.register_tokens
    assert model.no_embed_class == (not variant.embed_prefix_tokens)
    assert model.global_pool == {"token": "token", "gap": "avg", "map": "map"}[variant.classifier]
    assert (not isinstance(model.norm_pre, torch.nn.Identity)) == variant.pre_norm
    # AIMv2: RmsNorm everywhere and on the patch embedding, the final one before the pooling,
    # no bias on the query/key/value, the attention's output or the MLP's layers
    assert type(block.norm1).__name__ == {"layer": "LayerNorm", "rms": "RmsNorm"}[variant.norm]
    assert type(model.norm).__name__ == type(block.norm1).__name__  # not fc_norm
    assert (not isinstance(model.patch_embed.norm, torch.nn.Identity)) == variant.embedding_norm
    assert (block.attn.qkv.bias is not None) == (variant.qkv_bias == "qkv")
    assert (block.attn.proj.bias is not None) == variant.proj_bias
    assert all((layer.bias is not None) == variant.proj_bias
               for layer in (first, block.mlp.fc2))
    scale = getattr(block.ls1, "gamma", None)
    assert (scale is not None) == (variant.layer_scale is not None)
    assert mlp == {"mlp": "Mlp", "swiglu": "GluMlp", "swiglu_split": "SwiGLU"}[variant.feed_forward]
    # A SwiGLU row's gate is SiLU on the first half (timm's SwiGLUPacked: GluMlp with nn.SiLU,
    # gate_last=False), as keras_vit's MlpBlock "swiglu" computes; the row's `activation` names
    # a plain MLP's and is not used there.
    if variant.feed_forward == "swiglu":
        assert type(block.mlp.act).__name__ == "SiLU" and not block.mlp.gate_last
    elif mlp == "SwiGLU":  # timm's split SwiGLU: SiLU on fc1_g, the gate
        assert type(block.mlp.act).__name__ == "SiLU"
    else:
        expected = {"gelu": "GELU", "quick_gelu": "QuickGELU"}[variant.activation]
        assert type(block.mlp.act).__name__ == expected
    assert block.norm1.eps == (variant.layer_norm_epsilon or 1e-6)
    cfg = model.pretrained_cfg
    assert cfg["input_size"][1:] == (variant.image_size,) * 2
    expected = variant.normalization or ((0.5,) * 3, (0.5,) * 3)
    np.testing.assert_allclose(np.asarray([cfg["mean"], cfg["std"]]), expected, rtol=1e-6)


def _check_eva_row(model, variant):
    """A row timm builds with its Eva class (DINOv3, EVA-02): the same switches, spelled as
    Eva spells them."""
    import torch

    block, attn = model.blocks[0], model.blocks[0].attn
    assert model.embed_dim == variant.width and len(model.blocks) == variant.depth
    assert attn.num_heads == variant.heads
    assert model.patch_embed.patch_size == (variant.patch_size,) * 2
    assert (model.patch_embed.proj.bias is not None) == variant.patch_bias
    assert (model.cls_token is not None) == variant.has_class_token
    assert model.num_prefix_tokens == variant.num_prefix_tokens
    assert (model.pos_embed is not None) == variant.position_embedding
    assert (model.pos_embed is None or model.no_embed_class) == (not variant.embed_prefix_tokens)
    rope = type(model.rope).__name__ if model.rope is not None else None
    assert rope == {None: None, "dinov3": "RotaryEmbeddingDinoV3",
                    "eva": "RotaryEmbeddingCat"}[variant.rope]
    if rope is not None:
        assert (model.rope.grid_offset, model.rope.grid_indexing) == (
            variant.rope_grid_offset, variant.rope_grid_indexing)
        reference = getattr(model.rope, "ref_feat_shape", None)
        assert reference == (None if variant.rope_reference_grid is None
                             else (variant.rope_reference_grid,) * 2)
    assert (not isinstance(model.norm_pre, torch.nn.Identity)) == variant.pre_norm
    # the final norm before the pooling (timm's norm), after it (fc_norm), or none (PE's towers)
    norms = (not isinstance(model.norm, torch.nn.Identity),
             not isinstance(model.fc_norm, torch.nn.Identity))
    assert norms == (variant.final_norm and not variant.norm_after_pooling,
                     variant.final_norm and variant.norm_after_pooling)
    if model.attn_pool is not None:  # PE-core's attention pooling: its own heads, a 4 D MLP
        assert model.attn_pool.num_heads == variant.pooling_heads
        assert model.attn_pool.mlp.fc1.out_features == variant.pooling_mlp_dim
        assert isinstance(model.attn_pool.mlp.act, torch.nn.GELU)
    if attn.qkv is not None and not hasattr(attn, "q_bias"):  # AttentionRope (PE-core): qkv's own
        biases = (attn.qkv.bias is not None,) * 3
    elif attn.qkv is not None:
        biases = (attn.q_bias is not None, attn.q_bias is not None, attn.v_bias is not None)
    else:
        biases = tuple(p.bias is not None for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    # timm's fused Eva attention keeps a zero key bias (a buffer, not a weight) beside q_bias
    expected = {"qkv": (True,) * 3, "qv": (True, True, True) if attn.qkv is not None
                else (True, False, True), "none": (False,) * 3}[variant.qkv_bias]
    assert biases == expected
    assert (block.gamma_1 is not None) == (variant.layer_scale is not None)
    mlp = type(block.mlp).__name__
    assert mlp == {"mlp": "Mlp", "swiglu": "GluMlp", "swiglu_split": "SwiGLU"}[variant.feed_forward]
    first = block.mlp.fc1_g if mlp == "SwiGLU" else block.mlp.fc1
    assert first.out_features * (2 if mlp == "SwiGLU" else 1) == variant.mlp_dim
    assert (not isinstance(block.mlp.norm, torch.nn.Identity)) == variant.mlp_norm
    assert model.global_pool == {"token": "token", "gap": "avg", "map": "map"}[variant.classifier]
    assert block.norm1.eps == (variant.layer_norm_epsilon or 1e-6)
    assert isinstance(block.mlp.act, torch.nn.SiLU) if mlp != "Mlp" else \
        isinstance(block.mlp.act, torch.nn.GELU)
    cfg = model.pretrained_cfg
    assert cfg["input_size"][1:] == (variant.image_size,) * 2
    expected = variant.normalization or ((0.5,) * 3, (0.5,) * 3)
    np.testing.assert_allclose(np.asarray([cfg["mean"], cfg["std"]]), expected, rtol=1e-6)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n in HEAVY else ())
                                  for n, v in FAMILIES.items() if v.patch_input == "naflex"])
def test_the_naflex_row_is_what_timm_builds(name):
    # timm's NaFlexVit: a Linear on flattened patches, the position grid of the row's image
    # size, no class token, the MAP head with the encoder's heads, tanh GELU.
    variant = FAMILIES[name]
    model = _timm_model(name)
    block = model.blocks[0]
    assert model.embed_dim == variant.width and len(model.blocks) == variant.depth
    assert block.attn.num_heads == variant.heads == model.attn_pool.num_heads
    assert block.mlp.fc1.out_features == variant.mlp_dim
    assert type(model.embeds.proj).__name__ == "Linear"
    assert model.embeds.proj.in_features == variant.patch_size ** 2 * 3
    assert tuple(model.embeds.pos_embed.shape[1:3]) == variant.token_grid((variant.image_size,) * 2)
    assert model.embeds.cls_token is None and not variant.has_class_token
    assert model.global_pool == variant.classifier == "map"
    assert type(block.mlp.act).__name__ == "GELUTanh" and variant.approximate_gelu
    assert block.norm1.eps == 1e-6


def test_every_row_has_a_count():
    assert set(FAMILY_PARAMS) == set(FAMILIES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n in HEAVY else ())
                                  for n in FAMILIES])
def test_the_tables_counts_are_timms(name):
    variant = FAMILIES[name]
    theirs = _timm_model(name, num_classes=1000, img_size=variant.image_size)
    assert sum(p.numel() for p in theirs.parameters()) == FAMILY_PARAMS[name]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n in HEAVY else ())
                                  for n in FAMILIES])
def test_the_parameter_count_is_timms(name):
    assert _ours_count(FAMILIES[name]) == FAMILY_PARAMS[name]


def test_the_depth_extrapolation_is_the_count_of_a_built_model():
    # The affine rule above, checked where building is cheap: DeiT-Ti/16-distilled, 12 blocks.
    variant = FAMILIES["DeiT-Ti/16-distilled"]
    assert _ours_count(variant) == keras_vit.ViT(variant).count_params()


@pytest.mark.parametrize("spelling,name", [
    ("DINOv2-S/14-reg4", "DINOv2-S/14-reg4"), ("dinov2-s/14-reg4", "DINOv2-S/14-reg4"),
    ("vit_small_patch14_reg4_dinov2", "DINOv2-S/14-reg4"), ("DeiT3-B/16", "DeiT3-B/16"),
    ("deit3_base_patch16_224", "DeiT3-B/16"), ("deit_small_distilled_patch16_224",
                                               "DeiT-S/16-distilled"),
    ("vit_base_patch16_siglip_224", "SigLIP-B/16"), ("clip-l/14", "CLIP-L/14"),
    ("SigLIP-So400m/14", "SigLIP-So400m/14"), ("vit_so400m_patch14_siglip_224", "SigLIP-So400m/14"),
    # The same architecture at timm's other resolutions and under its weights' tags: SigLIP 2's
    # fixed-resolution towers (".v2_webli") are timm's same functions.
    ("vit_so400m_patch14_siglip_384.webli", "SigLIP-So400m/14"),
    ("vit_so400m_patch14_siglip_378.v2_webli", "SigLIP-So400m/14"),
    ("vit_base_patch16_siglip_512.v2_webli", "SigLIP-B/16"),
    ("flexivit_small", "FlexiViT-S/16"), ("FlexiViT-B/16", "FlexiViT-B/16"),
    ("vit_small_plus_patch16_dinov3_qkvb.lvd1689m", "DINOv3-S+/16-qkvb"),
    ("dinov3-h+/16", "DINOv3-H+/16"), ("vit_base_patch16_dinov3", "DINOv3-B/16"),
    ("eva02_large_patch14_448.mim_m38m_ft_in1k", "EVA02-L/14"), ("eva02_tiny_patch14_336", "EVA02-Ti/14"),
    ("vit_pe_core_tiny_patch16_384.fb", "PE-Core-Ti/16"), ("pe-core-b/16", "PE-Core-B/16"),
    ("vit_pe_core_large_patch14_336", "PE-Core-L/14"),
    ("vit_pe_core_gigantic_patch14_448.fb", "PE-Core-G/14"),
    ("vit_pe_lang_gigantic_patch14_448.fb_tiling", "PE-Lang-G/14"),
    ("vit_pe_spatial_tiny_patch16_512.fb", "PE-Spatial-Ti/16"),
    ("pe-spatial-l/14", "PE-Spatial-L/14"),
])
def test_names(spelling, name):
    assert get_variant(spelling) is FAMILIES[name]


def test_every_row_has_one_named_constructor_with_the_table_name():
    for variant in FAMILIES.values():
        constructor = getattr(keras_vit, variant.constructor_name)
        assert variant.constructor_name in keras_vit.__all__
        # "DINOv2-S/14-reg4" -> DINOv2_S14_reg4, spelled here by hand for a few.
    assert keras_vit.DINOv2_S14_reg4.__name__ == "DINOv2_S14_reg4"
    assert keras_vit.DeiT_S16_distilled.__name__ == "DeiT_S16_distilled"
    assert keras_vit.DeiT3_B16.__name__ == "DeiT3_B16"
    assert keras_vit.SigLIP_B16.__name__ == "SigLIP_B16"
    assert keras_vit.SigLIP_So400m14.__name__ == "SigLIP_So400m14"
    assert keras_vit.DINOv3_Splus16_qkvb.__name__ == "DINOv3_Splus16_qkvb"
    assert keras_vit.PE_Core_B16.__name__ == "PE_Core_B16"
    del constructor


def test_defaults_follow_the_family():
    variant = dataclasses.replace(FAMILIES["DINOv2-S/14-reg4"], depth=1)
    model = keras_vit.ViT(variant)
    assert model.input_shape[1:3] == (518, 518)  # 37 x 37 patches of 14
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 37 * 37, 384)
    assert model.get_layer("reg_token").tokens.shape == (1, 4, 384)
    assert model.name == "DINOv2-S_14-reg4"
    from keras_vit.normalization import IMAGENET_MEAN_STD, input_normalization

    np.testing.assert_allclose(input_normalization(model), IMAGENET_MEAN_STD)
    clip = keras_vit.ViT(dataclasses.replace(FAMILIES["CLIP-B/32"], depth=1))
    assert clip.get_layer("encoderblock_0").layer_norm_epsilon == 1e-5
    assert clip.get_layer("encoderblock_0").mlp.activation == "quick_gelu"


def test_a_pooling_the_family_lacks_is_refused_in_one_line():
    siglip = dataclasses.replace(FAMILIES["SigLIP-B/16"], depth=1)
    with pytest.raises(keras_vit.ArgumentError, match="no class token"):
        keras_vit.ViT(siglip, pooling="token")
    with pytest.raises(keras_vit.ArgumentError, match="no attention-pooling"):
        keras_vit.ViT(dataclasses.replace(FAMILIES["DeiT-S/16"], depth=1), pooling="map")


# One small model of each way a family is put together, through the shared model checks.
ASSEMBLIES = ["DeiT-Ti/16-distilled", "DeiT3-S/16", "DINOv2-S/14-reg4", "SigLIP-B/16", "CLIP-B/32",
              "DINOv3-S+/16-qkvb", "EVA02-B/14", "PE-Core-Ti/16"]


@pytest.mark.parametrize("name", ASSEMBLIES)
def test_the_model_checks(name, tmp_path):
    variant = dataclasses.replace(FAMILIES[name], depth=1)
    p = variant.patch_size
    size = (2 * p, 3 * p)
    # The count is checked against timm's above; here it only has to survive the round trips.
    expected = keras_vit.ViT(variant, image_size=size, classes=7).count_params()
    check_model(lambda **kw: keras_vit.ViT(variant, **kw), image_size=size, classes=7,
                expected_params=expected, tmp_path=tmp_path)
