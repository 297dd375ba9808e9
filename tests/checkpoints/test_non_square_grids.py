"""Issue 32, regression 1: non-square position grids in official-layout files.

A file that does not record its grid takes the grid of the model it is loaded into when the
token count fits it (no resize), else the square grid; a non-square count that the model does
not fit is refused in one line. Files written by save_npz record their grid."""
import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import CheckpointError
from keras_vit.variants import get_variant
from tests.oracle import random_vit_npz, run_timm, timm_vit

TOLERANCE = 1e-4  # test_official_parity.py's
SIZE = (224, 320)  # a 14 x 20 grid at patch 16
# A two-block Ti/16: the grid is the position embedding's, which no block changes.
VARIANT = dataclasses.replace(get_variant("Ti/16"), depth=2)


def _posembed(model):
    return model.get_layer("posembed_input").get_weights()[0]


def _images(size):
    return np.random.default_rng(1).uniform(-1, 1, (1, *size, 3)).astype(np.float32)


def test_official_non_square_file_loads_exactly_and_matches_timm(tmp_path):
    path = tmp_path / "official.npz"
    arrays = random_vit_npz(path, VARIANT, (14, 20), classes=10)
    assert set(np.load(path).files) == set(arrays)  # the official layout, no metadata
    ours = keras_vit.ViT(VARIANT, weights=str(path), image_size=SIZE, classes=10)
    np.testing.assert_array_equal(_posembed(ours), arrays["Transformer/posembed_input/pos_embedding"])
    theirs = timm_vit(VARIANT, SIZE, 10, path)
    images = _images(SIZE)
    logits, reference = ours(images).numpy(), run_timm(theirs, images)
    assert np.abs(reference).max() > 0.1
    np.testing.assert_allclose(logits, reference, atol=TOLERANCE, rtol=0)


def test_save_npz_non_square_file_loads_exactly(tmp_path):
    source = tmp_path / "official.npz"
    random_vit_npz(source, VARIANT, (14, 20), classes=10)
    model = keras_vit.ViT(VARIANT, weights=str(source), image_size=SIZE, classes=10)
    path = tmp_path / "saved.npz"
    keras_vit.save_npz(model, path)
    loaded = keras_vit.ViT(VARIANT, weights=str(path), image_size=SIZE, classes=10)
    np.testing.assert_array_equal(_posembed(loaded), _posembed(model))
    images = _images(SIZE)
    np.testing.assert_allclose(loaded(images).numpy(), model(images).numpy(), atol=1e-6, rtol=0)


def test_non_square_file_into_other_non_square_grid_resizes(tmp_path):
    path = tmp_path / "official.npz"
    arrays = random_vit_npz(path, VARIANT, (14, 20), classes=10)
    # 14 x 20 = 280 tokens; the model's 16 x 8 = 128 does not fit it, and 280 is not square:
    # the file's grid is ambiguous without image_size, so save it with its grid recorded.
    model = keras_vit.ViT(VARIANT, weights=str(path), image_size=SIZE, classes=10)
    saved = tmp_path / "saved.npz"
    keras_vit.save_npz(model, saved)
    other = keras_vit.ViT(VARIANT, weights=str(saved), image_size=(256, 128), classes=10)
    expected = keras_vit.resize_position_embedding(
        arrays["Transformer/posembed_input/pos_embedding"], (14, 20), (16, 8), 1)
    np.testing.assert_allclose(_posembed(other), expected, atol=1e-6, rtol=0)


def test_official_file_into_model_whose_grid_fits_is_not_resized(tmp_path):
    # 256 tokens: square 16 x 16, but the model's 8 x 32 fits them too; the model decides.
    path = tmp_path / "official.npz"
    arrays = random_vit_npz(path, VARIANT, (8, 32), classes=10)
    ours = keras_vit.ViT(VARIANT, weights=str(path), image_size=(128, 512), classes=10)
    np.testing.assert_array_equal(_posembed(ours), arrays["Transformer/posembed_input/pos_embedding"])


def test_ambiguous_non_square_file_is_refused_in_one_line(tmp_path):
    path = tmp_path / "official.npz"
    random_vit_npz(path, VARIANT, (14, 20), classes=10)
    with pytest.raises(CheckpointError) as caught:
        keras_vit.ViT(VARIANT, weights=str(path), image_size=(256, 128), classes=10)
    message = str(caught.value)
    assert "\n" not in message
    assert "280" in message and "16 x 8" in message


def test_recorded_non_square_grid_gives_the_default_image_size(tmp_path):
    # No image_size: a file that records its 14 x 20 grid builds a 224 x 320 model, unresized.
    source = tmp_path / "official.npz"
    random_vit_npz(source, VARIANT, (14, 20), classes=10)
    model = keras_vit.ViT(VARIANT, weights=str(source), image_size=SIZE, classes=10)
    path = tmp_path / "saved.npz"
    keras_vit.save_npz(model, path)
    loaded = keras_vit.ViT(VARIANT, weights=str(path), classes=10)
    assert tuple(loaded.input_shape[1:3]) == SIZE
    np.testing.assert_array_equal(_posembed(loaded), _posembed(model))
