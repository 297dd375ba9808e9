"""The families from timm's own files: timm builds each with random weights at depth 2 and a
small image, writes its state dict (safetensors), and keras_vit's model of the same name,
loading that file through the timm format's rows, computes what timm's forward computes.

Tolerance: relative (to the largest output) 1e-4 in float32, the issue's bound. Two float32
implementations of the same two blocks differ by rounding, ~1e-7 relative per operation over
sums of at most a few thousand terms (measured: 3e-7 to 8e-7), so 1e-4 leaves two orders of
magnitude while any wrong mapping (a transposed kernel, a missing LayerScale, tanh for erf
GELU, a register token in the wrong place) moves the outputs by 1e-3 or more.
"""

import dataclasses

import keras
import numpy as np
import pytest

import keras_vit
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.oracle import import_timm, run_timm

RELATIVE_TOLERANCE = 1e-4
DEPTH = 2


def _timm_file(tmp_path, architecture, size, **kwargs):
    """timm's model with random weights, written by safetensors from its own state dict."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file  # here: importing torch at collection costs every worker

    model = timm.create_model(architecture, pretrained=False, depth=DEPTH, img_size=size, **kwargs)
    _randomise(model, torch)
    path = tmp_path / f"{architecture}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model, str(path)


def _assert_close(ours, theirs):
    assert ours.shape == theirs.shape
    assert np.abs(theirs).max() > 0.1  # a loaded model, not zeros
    relative = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert relative <= RELATIVE_TOLERANCE, f"relative max difference {relative:.2e}"


def _ours(architecture, path, size, **kwargs):
    variant = dataclasses.replace(keras_vit.get_variant(architecture), depth=DEPTH)
    return keras_vit.ViT(variant, weights=path, image_size=size, **kwargs)


# (timm architecture, image size, keyword arguments for timm): each a multiple of its patch.
CASES = [
    ("deit_small_distilled_patch16_224", 64, {}),
    ("deit3_small_patch16_224", 64, {}),
    ("vit_small_patch14_dinov2", 56, {}),
    ("vit_small_patch14_reg4_dinov2", 56, {}),
    ("vit_base_patch16_siglip_224", 48, {}),
    ("vit_base_patch16_clip_quickgelu_224", 48, {}),
    # Slow: test_flexivit_at_another_patch_size_computes_what_timm_computes loads the same
    # kind of file (and resizes it too) in the default run.
    pytest.param("flexivit_small", 48, {}, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("architecture,size,kwargs", CASES,
                         ids=[(c.values if hasattr(c, "values") else c)[0] for c in CASES])
def test_the_family_computes_what_timm_computes(architecture, size, kwargs, tmp_path):
    theirs, path = _timm_file(tmp_path, architecture, size, **kwargs)
    ours = _ours(architecture, path, size, include_top=theirs.num_classes > 0)
    images = _images(2, (size, size))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))
    if theirs.num_classes:  # and the features before the head
        features = _ours(architecture, path, size, include_top=False)
        _assert_close(np.asarray(features(images)), run_timm(theirs, images, features=True))


def test_the_swiglu_giant_computes_what_timm_computes(tmp_path):
    # DINOv2-g's SwiGLU at its full width (1536) but one block, 28 px and a 10-class head.
    theirs, path = _timm_file(tmp_path, "vit_giant_patch14_dinov2", 28, num_classes=10)
    variant = dataclasses.replace(keras_vit.get_variant("DINOv2-g/14"), depth=DEPTH)
    ours = keras_vit.ViT(variant, weights=path, image_size=28)
    images = _images(2, (28, 28))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_each_distilled_head_is_reachable_and_is_timms(tmp_path):
    """The model's output is the mean of its two heads (DeiT at inference); each head's logits
    are a layer output, equal to timm's `head` on the class token and `head_dist` on the
    distillation token, for a distillation loss in training."""
    import torch

    theirs, path = _timm_file(tmp_path, "deit_small_distilled_patch16_224", 64)
    ours = _ours("deit_small_distilled_patch16_224", path, 64)
    both = keras.Model(ours.input, [ours.get_layer("head").output,
                                    ours.get_layer("head_dist").output])
    images = _images(2, (64, 64))
    with torch.no_grad():
        tokens = theirs.forward_features(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()))
        expected = [theirs.head(tokens[:, 0]).numpy(), theirs.head_dist(tokens[:, 1]).numpy()]
    head, head_dist = (np.asarray(t) for t in both(images))
    _assert_close(head, expected[0])
    _assert_close(head_dist, expected[1])
    assert np.abs(head - head_dist).max() > 0.1  # two different heads, not one read twice
    np.testing.assert_allclose(np.asarray(ours(images)), (head + head_dist) / 2, rtol=0, atol=1e-6)


@pytest.mark.parametrize("architecture,size", [("vit_small_patch14_reg4_dinov2", 28),
                                               ("vit_base_patch16_siglip_224", 32),
                                               ("deit_small_distilled_patch16_224", 32),
                                               ("vit_base_patch16_clip_quickgelu_224", 32)])
def test_save_safetensors_writes_what_timm_loads_strictly(architecture, size, tmp_path):
    """keras_vit's model written back through the same rows loads into timm's model with
    `strict=True` (no key missing or left over) and computes the same."""
    timm = import_timm()
    import torch
    from safetensors.torch import load_file

    theirs, path = _timm_file(tmp_path, architecture, size)
    ours = _ours(architecture, path, size, include_top=theirs.num_classes > 0)
    written = keras_vit.save_safetensors(ours, str(tmp_path / "back.safetensors"))
    again = timm.create_model(architecture, pretrained=False, depth=DEPTH, img_size=size)
    again.load_state_dict(load_file(written), strict=True)
    images = _images(2, (size, size))
    np.testing.assert_array_equal(run_timm(again.eval(), images), run_timm(theirs, images))
    del torch


@pytest.fixture(scope="module")
def flexivit_file(tmp_path_factory):
    """A tiny timm FlexiViT (width 64, 2 heads) at its stored patch 16 and 240 pixels."""
    return _timm_file(tmp_path_factory.mktemp("flexivit"), "flexivit_small", 240, embed_dim=64,
                      num_heads=2)


@pytest.mark.parametrize("patch_size", [8, 20, 30])
def test_flexivit_at_another_patch_size_computes_what_timm_computes(flexivit_file, patch_size):
    """FlexiViT's point: its patch-16 file used at patch 8, 20 or 30 on 240 pixels. timm builds
    that model from the file by its own pretrained path, whose FlexiViT filter resizes the
    kernel by the pseudo-inverse of big_vision's bilinear resize and the position embedding
    bilinearly (no antialiasing), from 15 x 15 to 30 x 30, 12 x 12 or 8 x 8; keras_vit's
    ViT(..., patch_size=P) computes the same."""
    timm = import_timm()
    path = flexivit_file[1]
    theirs = timm.create_model("flexivit_small", pretrained=True, depth=DEPTH, embed_dim=64,
                               num_heads=2, patch_size=patch_size,
                               pretrained_cfg_overlay={"file": path, "custom_load": False})
    variant = dataclasses.replace(keras_vit.get_variant("flexivit_small"), depth=DEPTH,
                                  width=64, heads=2, mlp_dim=256)
    ours = keras_vit.ViT(variant, weights=path, patch_size=patch_size)
    assert tuple(ours.get_layer("posembed_input").grid_size) == (240 // patch_size,) * 2
    images = _images(2, (240, 240))
    _assert_close(np.asarray(ours(images)), run_timm(theirs.eval(), images))


@pytest.mark.slow  # full size; the default test above is the same path at width 64, depth 2
@pytest.mark.parametrize("patch_size", [8, 30])
def test_a_full_size_flexivit_base_at_another_patch_size_is_timms(patch_size, tmp_path):
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    source = _randomise(timm.create_model("flexivit_base", pretrained=False), torch)
    path = str(tmp_path / "flexivit_base.safetensors")
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, path)
    theirs = timm.create_model("flexivit_base", pretrained=True, patch_size=patch_size,
                               pretrained_cfg_overlay={"file": path, "custom_load": False})
    ours = keras_vit.ViT("FlexiViT-B/16", weights=path, patch_size=patch_size)
    images = _images(2, (240, 240))
    _assert_close(np.asarray(ours(images)), run_timm(theirs.eval(), images))


# --- SigLIP So400m/14: an MLP of 4304, not 4 x 1152, and 16 heads of 72 ------------------------
SO400M = "vit_so400m_patch14_siglip_224"


def test_the_so400m_shape_computes_what_timm_computes(tmp_path):
    """The So400m row's new point, an MLP width that is no multiple of the width (timm's
    mlp_ratio 3.7362), in the blocks and in the MAP head, at a tiny width: timm's
    architecture at width 64 and 4 heads has MLPs of int(64 * 3.7362) = 239.

    Built as timm's 384-pixel So400m is, at a size that is no multiple of the patch: 44 pixels
    give timm a 3 x 3 grid and its convolution leaves the last 2 rows and columns out (384
    gives 27 x 27 = 378 pixels so); the file builds keras_vit's model at its grid's 42 pixels,
    which computes timm's output on the same pixels less those."""
    theirs, path = _timm_file(tmp_path, "vit_so400m_patch14_siglip_384", 44, embed_dim=64,
                              num_heads=4)
    assert theirs.blocks[0].mlp.fc1.out_features == theirs.attn_pool.mlp.fc1.out_features == 239
    variant = dataclasses.replace(keras_vit.get_variant("vit_so400m_patch14_siglip_384"),
                                  width=64, heads=4, mlp_dim=239, depth=DEPTH)
    ours = keras_vit.ViT(variant, weights=path, include_top=False)
    assert ours.input_shape[1:3] == (42, 42)
    images = _images(2, (44, 44))
    _assert_close(np.asarray(ours(images[:, :42, :42])), run_timm(theirs, images))


def _timm_shapes(architecture, **kwargs):
    """{official key: shape} of timm's full-width model on the meta device (no memory), through
    the timm format's rows with the heads split."""
    timm = import_timm()
    import torch

    from keras_vit.checkpoints.formats.base import shape_stand_ins
    from keras_vit.checkpoints.formats.timm import timm_to_official

    with torch.device("meta"):
        model = timm.create_model(architecture, pretrained=False, **kwargs)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    heads = model.blocks[0].attn.num_heads
    return {k: a.shape for k, a in timm_to_official(shape_stand_ins(shapes), heads).items()}


def _keras_shapes(model):
    from keras_vit.checkpoints.layout import layout

    return {key: tuple(shape) for row in layout(model)
            for key, shape in zip(row.keys, row.shapes)}


def test_the_full_size_so400m_key_set_maps_exactly():
    """Every key of timm's full So400m (27 blocks, on the meta device: shapes only) is one of
    keras_vit's model of the row (built with one block, whose keys every block repeats), with
    the same shape, and none is left over; the only row its shapes fit is SigLIP-So400m/14."""
    import re

    from keras_vit.models.pretrained import fitting_variants

    variant = keras_vit.get_variant(SO400M)
    # Headless, as timm builds it (its pretrained configuration says num_classes=0).
    one = _keras_shapes(keras_vit.ViT(dataclasses.replace(variant, depth=1), include_top=False))
    expected = {re.sub(r"encoderblock_0/", f"encoderblock_{i}/", k): s
                for i in range(variant.depth) for k, s in one.items()}
    theirs = _timm_shapes(SO400M)
    assert theirs == expected
    assert fitting_variants(theirs) == [variant]
    block = "Transformer/encoderblock_26/MlpBlock_3/Dense_0/kernel"
    assert theirs[block] == theirs["MAPHead_0/MlpBlock_0/Dense_0/kernel"] == (1152, 4304)
    assert theirs["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"] \
        == (1152, 16, 72)


@pytest.mark.parametrize("architecture,size", [
    ("deit_small_distilled_patch16_224", 32), ("deit3_small_patch16_224", 32),
    ("vit_small_patch14_dinov2", 28), ("vit_small_patch14_reg4_dinov2", 28),
    ("vit_base_patch16_siglip_224", 32), ("vit_base_patch16_clip_quickgelu_224", 32),
    ("flexivit_small", 48)])
def test_pooling_none_gives_timms_tokens_for_every_family(architecture, size, tmp_path):
    """pooling=None: the whole normalised token sequence, timm's forward_features (prefix
    tokens first); a file's MAP head (SigLIP) is left unread."""
    import torch

    theirs, path = _timm_file(tmp_path, architecture, size)
    ours = _ours(architecture, path, size, include_top=False, pooling=None)
    images = _images(2, (size, size))
    with torch.no_grad():
        expected = theirs.forward_features(
            torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()
    _assert_close(np.asarray(ours(images)), expected)
