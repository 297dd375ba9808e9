"""A checkpoint's pixel normalisation travels with the model: a DeiT folder written by timm
(ImageNet mean/std) matches timm on 0-255 pixels with include_preprocessing=True, the model
records it (config, .keras file, save_npz, export), and a model fed otherwise warns once."""

import dataclasses
import os
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.formats import inspect_checkpoint
from keras_vit.normalization import (
    IMAGENET_MEAN_STD,
    OFFICIAL_NORMALIZATION,
    input_normalization,
    model_input,
)
from keras_vit.variants import timm_variant
from tests.checkpoints.formats.test_formats import TOL, _randomise
from tests.oracle import import_timm

ARCHITECTURE = "deit_tiny_patch16_224"


@pytest.fixture(scope="module")
def deit_folder(tmp_path_factory):
    """A timm Hub folder of a depth-2 DeiT-Ti, written by timm's own save_for_hf."""
    timm = import_timm()
    import torch
    from timm.models._hub import save_for_hf

    model = timm.create_model(ARCHITECTURE, pretrained=False, depth=2, num_classes=5).eval()
    _randomise(model, torch)
    folder = tmp_path_factory.mktemp("deit") / ARCHITECTURE
    save_for_hf(model, str(folder), safe_serialization=True)
    return model, str(folder)


def _variant():
    return dataclasses.replace(timm_variant(ARCHITECTURE), depth=2)


def _timm_logits(model, pixels):
    """timm's own path on 0-255 pixels: (x / 255 - mean) / std, NCHW."""
    import torch

    mean, std = (np.asarray(v, np.float32).reshape(1, 3, 1, 1) for v in IMAGENET_MEAN_STD)
    x = (pixels.transpose(0, 3, 1, 2) / 255.0 - mean) / std
    with torch.no_grad():
        return model(torch.from_numpy(x.astype(np.float32))).numpy()


def _pixels(n=2, seed=5):
    return np.random.default_rng(seed).integers(0, 256, (n, 224, 224, 3)).astype(np.float32)


def test_the_folder_records_imagenet_normalisation(deit_folder):
    _, folder = deit_folder
    assert os.path.exists(os.path.join(folder, "config.json"))  # timm wrote its config
    info = inspect_checkpoint(folder)
    np.testing.assert_allclose(info.normalization, IMAGENET_MEAN_STD, rtol=1e-7)
    assert info.heads == 3


def test_include_preprocessing_matches_timm_on_raw_pixels(deit_folder, tmp_path):
    model, folder = deit_folder
    ours = keras_vit.ViT(_variant(), weights=folder, include_preprocessing=True)
    pixels = _pixels()
    expected = _timm_logits(model, pixels)
    np.testing.assert_allclose(np.asarray(ours(pixels)), expected, atol=TOL)
    # The [-1, 1] of before is far off: the normalisation is what makes it match.
    wrong = keras_vit.ViT(_variant(), weights=folder)
    assert np.abs(np.asarray(wrong(keras_vit.preprocess_input(pixels))) - expected).max() > 10 * TOL
    # Saved and reloaded, the model still normalises so (its config records it).
    path = str(tmp_path / "deit.keras")
    ours.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(np.asarray(reloaded(pixels)), expected, atol=TOL)


def test_a_model_fed_otherwise_warns_once_and_records_what_it_expects(deit_folder, tmp_path):
    model, folder = deit_folder
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            ours = keras_vit.ViT(_variant(), weights=folder)
    said = [str(w.message) for w in caught if "normalised" in str(w.message)]
    assert len(said) == 1, said
    assert "0.485" in said[0] and "0.229" in said[0] and "include_preprocessing=True" in said[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keras_vit.ViT(_variant(), weights=folder, include_preprocessing=True)
    assert not [w for w in caught if "normalised" in str(w.message)]
    # The record: the model's config, what export and predict feed it, and save_npz's file.
    np.testing.assert_allclose(input_normalization(ours), IMAGENET_MEAN_STD, rtol=1e-7)
    pixels = _pixels(1)
    np.testing.assert_allclose(np.asarray(ours(model_input(ours)(pixels))),
                               _timm_logits(model, pixels), atol=TOL)
    npz = keras_vit.save_npz(ours, str(tmp_path / "deit.npz"))
    np.testing.assert_allclose(inspect_checkpoint(npz).normalization, IMAGENET_MEAN_STD,
                               rtol=1e-7)
    again = keras_vit.ViT(_variant(), weights=npz, include_preprocessing=True)
    np.testing.assert_allclose(np.asarray(again(pixels)), _timm_logits(model, pixels), atol=TOL)
    # The paper's ViT of the same size, without weights, keeps the official normalisation,
    # recorded as nothing special; the DeiT row without weights expects its family's own.
    paper = dataclasses.replace(keras_vit.get_variant("Ti/16"), depth=2)
    assert input_normalization(keras_vit.ViT(paper)) == OFFICIAL_NORMALIZATION
    np.testing.assert_allclose(input_normalization(keras_vit.ViT(_variant())),
                               IMAGENET_MEAN_STD, rtol=1e-7)


def test_the_training_pipeline_feeds_what_the_weights_expect():
    import tensorflow as tf

    from keras_vit.data.pipeline import make_pipeline

    pixels = _pixels(2)[:, :32, :32]
    data = tf.data.Dataset.from_tensor_slices((pixels.astype(np.uint8), np.zeros(2, np.int32)))
    official, = make_pipeline(data, 32, 2, training=False).take(1)
    imagenet, = make_pipeline(data, 32, 2, training=False,
                              normalization=IMAGENET_MEAN_STD).take(1)
    np.testing.assert_allclose(official[0].numpy(), pixels / 127.5 - 1, atol=1e-5)
    mean, std = (np.asarray(v, np.float32) for v in IMAGENET_MEAN_STD)
    # float32 rounding of values of magnitude <= 2.7: a few ulps
    np.testing.assert_allclose(imagenet[0].numpy(), (pixels / 255 - mean) / std, atol=1e-5)
