"""Any image size at call time: `ViT(..., dynamic_image_size=True)` computes what timm's
`dynamic_img_size=True, dynamic_img_pad=True` computes on the same weights (its position
embedding resized inside the call by torch's antialiased bicubic, sizes off the patch padded),
saves to `.keras`, and exports to a SavedModel that serves more than one size. An official
.npz resizes by the official linear zoom instead, in the call as at load."""

import dataclasses

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.interpolation import bicubic_resize_matrix
from keras_vit.variants import timm_variant
from tests.checkpoints.formats.test_formats import _randomise
from tests.oracle import import_timm

ARCHITECTURE = "vit_tiny_patch16_224"
VARIANT = dataclasses.replace(timm_variant(ARCHITECTURE), depth=2, name="tiny")
# Three non-square sizes: the last is no multiple of 16, so it is padded (timm's
# dynamic_img_pad). 224 x 224 is the stored grid; none of these is.
SIZES = [(160, 240), (96, 208), (120, 200)]
# The bound, relative to the largest logit: float32 through two blocks and a resize.
RELATIVE = 1e-4


@pytest.fixture(scope="module")
def timm_file(tmp_path_factory):
    """A depth-2 timm ViT-Ti/16 with dynamic sizes, and its state dict written by safetensors'
    torch writer."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    model = timm.create_model(ARCHITECTURE, pretrained=False, depth=2, num_classes=5,
                              dynamic_img_size=True, dynamic_img_pad=True).eval()
    _randomise(model, torch)
    path = tmp_path_factory.mktemp("timm") / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model, str(path)


@pytest.fixture(scope="module")
def dynamic_model(timm_file):
    return keras_vit.ViT(VARIANT, weights=timm_file[1], dynamic_image_size=True)


def _timm(model, images):
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, *size, 3)).astype(np.float32)


def _close(ours, expected):
    return np.abs(np.asarray(ours) - expected).max() <= RELATIVE * np.abs(expected).max()


@pytest.mark.parametrize("size", SIZES, ids=[f"{h}x{w}" for h, w in SIZES])
def test_equals_timms_dynamic_img_size(timm_file, dynamic_model, size):
    images = _images(size)
    expected = _timm(timm_file[0], images)
    assert _close(dynamic_model(images), expected)


def test_the_run_time_resize_is_torchs_antialiased_bicubic():
    """The matrix that resizes the embedding inside the call, against F.interpolate on a basis
    (timm's resample_abs_pos_embed: bicubic, antialias=True in timm 1.0)."""
    import_timm()
    import torch
    import torch.nn.functional as F

    for old, new in [(14, 10), (14, 15), (14, 7), (14, 28)]:
        basis = torch.eye(old).reshape(old, 1, 1, old)
        expected = F.interpolate(basis, size=(1, new), mode="bicubic", antialias=True,
                                 align_corners=False)[:, 0, 0].T.numpy()
        # float32 weights of magnitude <= 1.1: a few ulps apart.
        np.testing.assert_allclose(keras.ops.convert_to_numpy(bicubic_resize_matrix(old, new)),
                                   expected, atol=1e-6)


def test_a_fixed_size_model_differs_where_the_grid_differs(timm_file, dynamic_model, tmp_path):
    """The check above can fail: the same weights as an official .npz, loaded at a fixed
    160 x 240, are resized at load with the official linear zoom, which is not timm's
    bicubic (measured: 2.0e-4 of the largest logit, against 5e-7 for the dynamic model;
    seeded, so the same on every machine). The timm file itself is resized as timm
    resizes (tests/checkpoints/test_position_resize.py), and so computes timm's output."""
    images = _images(SIZES[0])
    expected = _timm(timm_file[0], images)
    assert _close(keras_vit.ViT(VARIANT, weights=timm_file[1], image_size=SIZES[0])(images),
                  expected)
    official = str(tmp_path / "official.npz")
    keras_vit.save_npz(keras_vit.ViT(VARIANT, weights=timm_file[1]), official)
    assert not _close(keras_vit.ViT(VARIANT, weights=official, image_size=SIZES[0])(images),
                      expected)
    # At the stored size both are the same model: no resize at all.
    square = _images((224, 224))
    np.testing.assert_allclose(np.asarray(dynamic_model(square)),
                               np.asarray(keras_vit.ViT(VARIANT, weights=timm_file[1])(square)),
                               atol=1e-5)


def test_an_official_file_resizes_in_the_call_as_at_load(timm_file, tmp_path):
    """An official .npz is resized by the official linear zoom (vit_jax's and big_vision's
    resize), at load and, with dynamic_image_size, inside the call: the dynamic model at a size
    is the model loaded at that size (float32 in the call, float64 at load: 1e-5 of the largest
    logit), and not timm's bicubic (test_a_fixed_size_model_differs_where_the_grid_differs)."""
    official = str(tmp_path / "official.npz")
    keras_vit.save_npz(keras_vit.ViT(VARIANT, weights=timm_file[1]), official)
    dynamic = keras_vit.ViT(VARIANT, weights=official, dynamic_image_size=True)
    assert dynamic.get_layer("posembed_input").resize == "linear"
    for size in SIZES[:2]:
        images = _images(size)
        fixed = np.asarray(keras_vit.ViT(VARIANT, weights=official, image_size=size)(images))
        assert np.abs(np.asarray(dynamic(images)) - fixed).max() <= 1e-5 * np.abs(fixed).max()


def test_saves_and_reloads_as_keras(dynamic_model, tmp_path):
    path = str(tmp_path / "dynamic.keras")
    dynamic_model.save(path)
    reloaded = keras.saving.load_model(path)
    for size in SIZES[:2]:
        images = _images(size, seed=1)
        np.testing.assert_allclose(np.asarray(reloaded(images)), np.asarray(dynamic_model(images)),
                                   atol=1e-6)


def test_the_saved_model_serves_two_sizes(dynamic_model, tmp_path):
    import tensorflow as tf

    folder = keras_vit.export_saved_model(dynamic_model, str(tmp_path / "served"))
    served = tf.saved_model.load(folder)
    for size in SIZES[:2]:
        pixels = np.random.default_rng(2).uniform(0, 255, (1, *size, 3)).astype(np.float32)
        logits = served.signatures["serving_default"](images=tf.constant(pixels))["logits"]
        expected = dynamic_model(keras_vit.preprocess_input(pixels))
        np.testing.assert_allclose(logits.numpy(), np.asarray(expected), atol=1e-5)


@pytest.mark.parametrize("kwargs, problem", [
    ({"input_shape": (224, 224, 3)}, "not input_shape or input_tensor"),
    ({"variant": "R+Ti/16"}, "is for plain ViTs"),
    ({"dynamic_image_size": "yes"}, "dynamic_image_size must be True or False")])
def test_what_cannot_be_dynamic_is_one_line(kwargs, problem):
    arguments = {"variant": VARIANT, "dynamic_image_size": True, **kwargs}
    with pytest.raises(keras_vit.ArgumentError, match=problem) as raised:
        keras_vit.ViT(**arguments)
    assert "\n" not in str(raised.value)
