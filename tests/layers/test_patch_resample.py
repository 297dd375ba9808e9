"""Any patch size: `resample_patch_embedding` is FlexiViT's pseudo-inverse resize (the paper's,
big_vision's `resample_patchemb`: bilinear without antialiasing, k' = pinv(B^T) k), in Keras'
kernel layout, timm's `resample_patch_embed` with its defaults by name; and
`ViT(..., patch_size=P)` loads weights of another patch size through it, with the position
grid resized to the new token grid."""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit.variants import get_variant
from tests.oracle import import_timm, official_vit_arrays

# One transformer block is enough: the patch size changes the embedding and the grid only.
TINY = dataclasses.replace(get_variant("Ti/16"), depth=1, name="tiny")
# float32 kernels: timm pinv's and multiplies in float32, keras_vit and the NumPy reference in
# float64 then round; 1e-5 of the largest entry is ~100 float32 ulps, room for the pinv's
# rounding (B is well conditioned: its smallest singular value is >= 0.3 for these sizes).
TOL = 1e-5
# FlexiViT's patch sizes from its stored 16 (the paper's 8 to 48; 20 and 30 tile 240 px, as 8).
SIZES = [8, 20, 30, (12, 20)]


def _bilinear(image, size):
    """The paper's resize of one patch: bilinear sampling at the new pixels' centres (half-pixel
    centres, edges clamped, no antialiasing), as tf.image.resize computes, in float64."""
    def axis(n_in, n_out):
        x = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        low = np.floor(x).astype(int)
        return low, np.minimum(low + 1, n_in - 1), x - low

    (r0, r1, fr), (c0, c1, fc) = axis(image.shape[0], size[0]), axis(image.shape[1], size[1])
    top = image[r0][:, c0] * (1 - fc) + image[r0][:, c1] * fc
    bottom = image[r1][:, c0] * (1 - fc) + image[r1][:, c1] * fc
    return top * (1 - fr[:, None]) + bottom * fr[:, None]


def _pseudo_inverse_resize(kernel, size):
    """FlexiViT's resize written from the paper: B's columns are the resized basis patches;
    the new kernel is pinv(B^T) applied to each (channel, width) slice of the old one."""
    old = kernel.shape[:2]
    basis = np.eye(old[0] * old[1]).reshape(-1, *old)
    resize = np.stack([_bilinear(e, size).reshape(-1) for e in basis], axis=1)  # new x old
    flat = kernel.reshape(old[0] * old[1], -1).astype(np.float64)
    return (np.linalg.pinv(resize.T) @ flat).reshape(*size, *kernel.shape[2:])


def _timm_resample(kernel, size, **method):
    """timm's own resize of a Keras-layout (P, P, C, D) kernel, via torch's (D, C, P, P)."""
    import_timm()
    import torch
    from timm.layers import resample_patch_embed

    torch_kernel = torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1)))
    return resample_patch_embed(torch_kernel, list(size), **method).numpy().transpose(2, 3, 1, 0)


def _pair(size):
    return size if isinstance(size, tuple) else (size, size)


def _assert_close(ours, expected):
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= TOL * np.abs(expected).max()


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_the_default_is_the_papers_pseudo_inverse_resize(size):
    kernel = np.random.default_rng(0).standard_normal((16, 16, 3, 8)).astype(np.float32)
    ours = keras_vit.resample_patch_embedding(kernel, size)
    assert ours.shape == (*_pair(size), 3, 8) and ours.dtype == np.float32
    _assert_close(ours, _pseudo_inverse_resize(kernel, _pair(size)))
    # timm's FlexiViT loading resizes so too (bilinear, antialias=False).
    _assert_close(ours, _timm_resample(kernel, _pair(size), interpolation="bilinear",
                                       antialias=False))


@pytest.mark.parametrize("size", [8, 24, 32])
def test_bicubic_is_timms_resample_patch_embed_defaults(size):
    kernel = np.random.default_rng(size).standard_normal((16, 16, 3, 8)).astype(np.float32)
    ours = keras_vit.resample_patch_embedding(kernel, size, method="bicubic")
    _assert_close(ours, _timm_resample(kernel, (size, size)))
    # ... which is not the paper's resize: the two tests above tell the methods apart.
    paper = _pseudo_inverse_resize(kernel, (size, size))
    assert np.abs(ours - paper).max() > 100 * TOL * np.abs(paper).max()


@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
def test_the_resized_kernel_sees_a_resized_patch_as_the_original_sees_the_patch(method):
    """FlexiViT's defining property, by hand: growing a patch with the resize and applying the
    new kernel gives the original kernel's output (exact when growing: R has full rank, up to
    rounding, ~1e-7 relative per entry over 16 taps)."""
    rng = np.random.default_rng(0)
    kernel, patch = rng.standard_normal((4, 4, 1, 2)), rng.standard_normal((4, 4))
    import_timm()
    import torch
    import torch.nn.functional as F

    grown = F.interpolate(torch.from_numpy(patch)[None, None], size=(6, 6), mode=method,
                          antialias=method == "bicubic", align_corners=False)[0, 0].numpy()
    new = keras_vit.resample_patch_embedding(kernel, 6, method=method)
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
    with pytest.raises(keras_vit.ArgumentError, match="method must be one of") as raised:
        keras_vit.resample_patch_embedding(kernel, 8, method="nearest")
    assert "\n" not in str(raised.value)


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
