"""Any patch size: `resample_patch_embedding` is timm's `resample_patch_embed` (FlexiViT's
pseudo-inverse resize) in Keras' kernel layout, and `ViT(..., patch_size=P)` loads weights of
another patch size through it, with the position grid resized to the new token grid."""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit.variants import get_variant
from tests.oracle import import_timm, official_vit_arrays

# One transformer block is enough: the patch size changes the embedding and the grid only.
TINY = dataclasses.replace(get_variant("Ti/16"), depth=1, name="tiny")
# float32 in both: timm pinv's and multiplies in float32, keras_vit in float64 then rounds;
# 1e-5 of the largest entry is ~100 float32 ulps, room for the two pinv's rounding.
TOL = 1e-5


def _timm_resample(kernel, size):
    """timm's own resize of a Keras-layout (P, P, C, D) kernel, via torch's (D, C, P, P)."""
    import_timm()
    import torch
    from timm.layers import resample_patch_embed

    torch_kernel = torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1)))
    return resample_patch_embed(torch_kernel, [size, size]).numpy().transpose(2, 3, 1, 0)


@pytest.mark.parametrize("size", [8, 24, 32])
def test_resample_patch_embedding_is_timms(size):
    kernel = np.random.default_rng(size).standard_normal((16, 16, 3, 8)).astype(np.float32)
    ours = keras_vit.resample_patch_embedding(kernel, size)
    expected = _timm_resample(kernel, size)
    assert ours.shape == (size, size, 3, 8) and ours.dtype == np.float32
    assert np.abs(ours - expected).max() <= TOL * np.abs(expected).max()


def test_the_resized_kernel_sees_a_resized_patch_as_the_original_sees_the_patch():
    """FlexiViT's defining property, by hand: growing a patch with the resize and applying the
    new kernel gives the original kernel's output (exact when growing: R has full rank, up to
    the float32 resize matrices' rounding, ~1e-7 relative per entry over 16 taps)."""
    rng = np.random.default_rng(0)
    kernel, patch = rng.standard_normal((4, 4, 1, 2)), rng.standard_normal((4, 4))
    import_timm()
    import torch
    import torch.nn.functional as F

    grown = F.interpolate(torch.from_numpy(patch)[None, None], size=(6, 6), mode="bicubic",
                          antialias=True, align_corners=False)[0, 0].numpy()
    new = keras_vit.resample_patch_embedding(kernel, 6)
    np.testing.assert_allclose(np.einsum("hw,hwcd->d", grown, new),
                               np.einsum("hw,hwcd->d", patch, kernel), rtol=1e-5)


def test_the_same_size_is_the_kernel_itself_and_bad_sizes_are_one_line():
    kernel = np.zeros((16, 16, 3, 4), np.float32)
    assert keras_vit.resample_patch_embedding(kernel, 16) is kernel
    for bad in (0, 8.0, True, (8,), "8"):
        with pytest.raises(keras_vit.ArgumentError, match="new_patch_size must be"):
            keras_vit.resample_patch_embedding(kernel, bad)
    with pytest.raises(keras_vit.ArgumentError, match="kernel has shape"):
        keras_vit.resample_patch_embedding(kernel[0], 8)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """An official-layout file of the tiny ViT at patch 16, 32 px (a 2 x 2 grid)."""
    arrays = official_vit_arrays(TINY, (2, 2), classes=5)
    path = tmp_path_factory.mktemp("patch16") / "tiny.npz"
    np.savez(path, **arrays)
    return arrays, str(path)


def test_patch_16_weights_load_at_patch_8(weights):
    arrays, path = weights
    model = keras_vit.ViT(TINY, weights=path, image_size=32, patch_size=8)
    embedding, posembed = model.get_layer("embedding"), model.get_layer("posembed_input")
    np.testing.assert_array_equal(
        np.asarray(embedding.kernel),
        keras_vit.resample_patch_embedding(arrays["embedding/kernel"], 8))
    assert embedding.patch_size == 8 and tuple(posembed.grid_size) == (4, 4)
    # The position grid follows the token grid, as the loader resizes any grid.
    np.testing.assert_allclose(
        np.asarray(posembed.pos_embedding),
        keras_vit.resize_position_embedding(
            arrays["Transformer/posembed_input/pos_embedding"], (2, 2), (4, 4)), rtol=1e-6)
    logits = np.asarray(model(np.zeros((1, 32, 32, 3), np.float32)))
    assert logits.shape == (1, 5) and np.isfinite(logits).all()


@pytest.mark.parametrize("patch_size, problem", [
    (0, "patch_size must be a positive int"), (8.0, "patch_size must be a positive int"),
    (64, "larger than the image")])
def test_an_impossible_patch_size_is_one_line(weights, patch_size, problem):
    with pytest.raises(keras_vit.ArgumentError, match=problem) as raised:
        keras_vit.ViT(TINY, weights=weights[1], image_size=32, patch_size=patch_size)
    assert "\n" not in str(raised.value)
