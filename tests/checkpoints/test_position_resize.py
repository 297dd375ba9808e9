"""A file loaded at another image size gets its position embedding resized as its own library
resizes it: timm's files (DINOv2's 518-pixel ones among them) by timm's antialiased bicubic
`resample_abs_pos_embed`, the official .npz by the official linear zoom, keras-hub's DINOv2
presets by keras.ops.image.resize. Which one is a property of the format
(`CheckpointFormat.position_resize`), not of the loader.

The reference is timm itself: its model built at 224 from the 518-pixel state dict through its
own `checkpoint_filter_fn`, which is what `timm.create_model(..., img_size=224,
pretrained=True)` runs. Tolerance: the issue's relative 1e-4 on the outputs (two float32
forward passes of two blocks differ by ~1e-6, test_timm_families.py); the embedding itself,
float32 (timm) against a float64 matrix (ours) over at most 8 taps a row, to 1e-5 absolute
on values of order 1.
"""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.formats import FORMATS
from keras_vit.checkpoints.formats.base import Resizes
from keras_vit.checkpoints.formats.transformers_families import FAMILY_SOURCES
from keras_vit.layers.tokens import POSITION_RESIZES
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.checkpoints.formats.test_timm_families import _assert_close
from tests.oracle import import_timm, run_timm

DEPTH = 2
FORMATS_BY_NAME = {f.name: f for f in FORMATS}
POSEMBED = "Transformer/posembed_input/pos_embedding"


def _posembed(model):
    return np.asarray(model.get_layer("posembed_input").pos_embedding)


# With registers (no prefix token in the embedding) is slow: the default
# test_bicubic_resize_is_timms_resample_abs_pos_embed covers the prefix-free resize.
@pytest.mark.parametrize("architecture", [
    "vit_small_patch14_dinov2",
    pytest.param("vit_small_patch14_reg4_dinov2", marks=pytest.mark.slow)])
def test_a_518_pixel_dinov2_file_at_224_computes_what_timm_computes_at_224(architecture,
                                                                          tmp_path):
    timm = import_timm()
    import torch
    from safetensors.torch import save_file  # here: importing torch at collection costs every worker
    from timm.models.vision_transformer import checkpoint_filter_fn

    # The release's geometry: 518 px, a 37 x 37 grid (the class token inside the embedding
    # for DINOv2, outside it for DINOv2 with registers).
    source = _randomise(timm.create_model(architecture, pretrained=False, depth=DEPTH), torch)
    assert source.patch_embed.grid_size == (37, 37)
    with torch.no_grad():  # of order 1, as the bounds below on the embedding assume
        source.pos_embed.copy_(torch.randn(source.pos_embed.shape,
                                           generator=torch.Generator().manual_seed(1)))
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    path = tmp_path / "dinov2_518.safetensors"
    save_file(state, str(path))
    theirs = timm.create_model(architecture, pretrained=False, depth=DEPTH, img_size=224)
    theirs.load_state_dict(checkpoint_filter_fn(dict(state), theirs), strict=True)
    theirs.eval()

    variant = dataclasses.replace(keras_vit.get_variant(architecture), depth=DEPTH)
    ours = keras_vit.ViT(variant, weights=str(path), image_size=224, include_top=False)
    assert tuple(ours.get_layer("posembed_input").grid_size) == (16, 16)
    np.testing.assert_allclose(_posembed(ours), theirs.pos_embed.detach().numpy(),
                               rtol=0, atol=1e-5)
    images = _images(2, (224, 224))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))

    # The official linear zoom is a different embedding, by far more than the bound above:
    # the test tells the two resizes apart.
    prefix = ours.get_layer("posembed_input").num_prefix_tokens
    linear = keras_vit.resize_position_embedding(state["pos_embed"].numpy(), 37, 16, prefix)
    assert np.abs(linear - theirs.pos_embed.detach().numpy()).max() > 1e-1


@pytest.mark.parametrize("old,new,prefix", [((37, 37), (16, 16), 1), ((6, 9), (11, 4), 0)])
def test_bicubic_resize_is_timms_resample_abs_pos_embed(old, new, prefix):
    import_timm()
    import torch
    from timm.layers import resample_abs_pos_embed

    embedding = np.random.default_rng(0).standard_normal(
        (1, prefix + old[0] * old[1], 8)).astype(np.float32)
    expected = resample_abs_pos_embed(torch.from_numpy(embedding), new_size=list(new),
                                      old_size=list(old), num_prefix_tokens=prefix).numpy()
    ours = keras_vit.resize_position_embedding(embedding, old, new, prefix, method="bicubic")
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("antialias", [False, True])
def test_keras_bicubic_resize_is_keras_hubs_dinov2_interpolation(antialias):
    """keras-hub's DINOv2 resize (`DINOV2Embedding._interpolate_position_embeddings`, the class
    position kept, the grid through keras.ops.image.resize): TensorFlow's bicubic as a float64
    matrix, against TensorFlow's float32 kernel (1e-5, the module's bound for float32 against
    float64 over at most 8 taps); torch's bicubic (method "bicubic") is another cubic and is
    not."""
    pytest.importorskip("keras_hub")
    from keras_hub.src.models.dinov2.dinov2_layers import DINOV2Embedding

    embedding = np.random.default_rng(0).standard_normal((1, 1 + 6 * 6, 8)).astype(np.float32)
    expected = np.asarray(DINOV2Embedding._interpolate_position_embeddings(
        embedding, patch_size=8, source_shape=(48, 48), target_shape=(40, 40),
        antialias=antialias))
    method = "keras_bicubic_antialias" if antialias else "keras_bicubic"
    ours = keras_vit.resize_position_embedding(embedding, 6, 5, 1, method=method)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5)
    if not antialias:
        torch_cubic = keras_vit.resize_position_embedding(embedding, 6, 5, 1, method="bicubic")
        assert np.abs(torch_cubic - expected).max() > 0.1


def test_each_format_records_a_known_resize_and_the_official_npz_keeps_the_linear_zoom():
    resizes = {f.name: f.position_resize for f in FORMATS}
    assert set(resizes.values()) <= set(POSITION_RESIZES)
    assert resizes["npz"] == "linear" and resizes["timm"] == "bicubic"
    # ... at load, in the call and for the patch kernel, for every family.
    for found in FORMATS:
        for family in {row.family for row in keras_vit.FAMILIES.values()} | {None}:
            assert set(dataclasses.astuple(found.resizes(family))) <= set(POSITION_RESIZES)
    assert FORMATS_BY_NAME["timm"].resizes("FlexiViT") == Resizes("bilinear", "bicubic",
                                                                   "bilinear")
    assert {s.position_resize for s in FAMILY_SOURCES.values()} <= set(POSITION_RESIZES)


def test_an_unknown_resize_method_is_one_line():
    with pytest.raises(keras_vit.ArgumentError, match="method must be one of") as raised:
        keras_vit.resize_position_embedding(np.zeros((1, 5, 2)), 2, 3, method="nearest")
    assert "\n" not in str(raised.value)
