"""Strict checkpoint loading: layouts, resizing, and every kind of bad file."""

import dataclasses
import zipfile

import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from keras_vit import CheckpointError, resize_position_embedding
from keras_vit.variants import get_variant
from tests.oracle import random_vit_npz, run_timm, timm_vit

TINY = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny-ti")


def _images(n, size, seed=3):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *size, 3)).astype(np.float32)


def _weights(model):
    return [v.numpy().copy() for v in model.weights]


def _assert_unchanged(model, before):
    after = _weights(model)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def _assert_load_refused(path, match):
    """Loading `path` into a fresh model raises `match` and changes no weight; returns the error."""
    model = keras_vit.ViT(TINY, classes=10)
    before = _weights(model)
    with pytest.raises(CheckpointError, match=match) as error:
        keras_vit.load_weights(model, str(path))
    _assert_unchanged(model, before)
    return error.value


# --- the position-embedding resize --------------------------------------------------------

@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((14, 14), (7, 7)),
                                     ((14, 14), (12, 20)), ((4, 6), (9, 5)), ((3, 3), (3, 3))])
def test_resize_equals_scipy_zoom(old, new):
    rng = np.random.default_rng(0)
    pos = rng.standard_normal((1, 1 + old[0] * old[1], 16)).astype(np.float32)
    resized = resize_position_embedding(pos, old, new, num_prefix_tokens=1)
    grid = pos[0, 1:].reshape(*old, 16)
    expected = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert resized.shape == (1, 1 + new[0] * new[1], 16)
    np.testing.assert_array_equal(resized[:, :1], pos[:, :1])  # class token unchanged
    np.testing.assert_allclose(resized[0, 1:].reshape(*new, 16), expected, atol=1e-5)


def test_resize_rejects_a_wrong_token_count():
    with pytest.raises(ValueError, match="needs 197 positions"):
        resize_position_embedding(np.zeros((1, 190, 8)), (14, 14), (24, 24))


def test_model_at_384_from_224_checkpoint_equals_timm_on_resized_file(tmp_path):
    """keras_vit resizes at load; timm gets a file already resized by the same function."""
    variant = dataclasses.replace(get_variant("Ti/16"), depth=3, name="ti-depth3")
    path = tmp_path / "224.npz"
    arrays = random_vit_npz(path, variant, (14, 14), classes=10)
    ours = keras_vit.ViT(variant, weights=str(path), image_size=384)

    key = "Transformer/posembed_input/pos_embedding"
    resized = dict(arrays, **{key: resize_position_embedding(arrays[key], (14, 14), (24, 24))})
    grid = resized[key][0, 1:].reshape(14 * 0 + 24, 24, -1)
    zoomed = scipy.ndimage.zoom(arrays[key][0, 1:].reshape(14, 14, -1), (24 / 14, 24 / 14, 1), order=1)
    np.testing.assert_allclose(grid, zoomed, atol=1e-5)  # the file timm gets is the official resize
    np.savez(tmp_path / "384.npz", **resized)
    theirs = timm_vit(variant, 384, 10, tmp_path / "384.npz")
    images = _images(1, (384, 384))
    np.testing.assert_allclose(ours.predict(images, verbose=0), run_timm(theirs, images), atol=1e-4)


def test_rectangular_image_resizes_rows_and_columns_separately(tmp_path):
    path = tmp_path / "ckpt.npz"
    arrays = random_vit_npz(path, TINY, (4, 4), classes=10)
    model = keras_vit.ViT(TINY, weights=str(path), image_size=(48, 96))
    loaded = model.get_layer("posembed_input").pos_embedding.numpy()
    pos = arrays["Transformer/posembed_input/pos_embedding"]
    expected = scipy.ndimage.zoom(pos[0, 1:].reshape(4, 4, -1), (3 / 4, 6 / 4, 1), order=1)
    np.testing.assert_allclose(loaded[0, 1:].reshape(3, 6, -1), expected, atol=1e-5)
    np.testing.assert_array_equal(loaded[:, :1], pos[:, :1])


# --- accepted layouts ----------------------------------------------------------------------

@pytest.mark.parametrize("layout", [dict(linen=True), dict(prefix="opt/target/"),
                                    dict(prefix="params/")])
def test_alternative_layouts_load_the_same_model(layout, tmp_path):
    random_vit_npz(tmp_path / "a.npz", TINY, (4, 4), classes=10)
    random_vit_npz(tmp_path / "b.npz", TINY, (4, 4), classes=10, **layout)
    images = _images(2, (64, 64))
    a = keras_vit.ViT(TINY, weights=str(tmp_path / "a.npz")).predict(images, verbose=0)
    b = keras_vit.ViT(TINY, weights=str(tmp_path / "b.npz")).predict(images, verbose=0)
    np.testing.assert_array_equal(a, b)


def test_new_class_count_zero_initialises_the_head(tmp_path):
    path = tmp_path / "ckpt.npz"
    random_vit_npz(path, TINY, (4, 4), classes=10)
    model = keras_vit.ViT(TINY, weights=str(path), classes=5)
    assert model.get_layer("head").kernel.shape == (192, 5)
    assert not np.any(model.get_layer("head").kernel.numpy())
    assert not np.any(model.get_layer("head").bias.numpy())
    assert np.any(model.get_layer("embedding").kernel.numpy())  # the backbone did load


def test_defaults_follow_the_file(tmp_path):
    path = tmp_path / "ckpt.npz"
    random_vit_npz(path, TINY, (6, 6), classes=7, pre_logits=192)
    model = keras_vit.ViT(TINY, weights=str(path))
    assert model.input_shape == (None, 96, 96, 3)
    assert model.output_shape == (None, 7)
    assert model.get_layer("pre_logits").units == 192


# --- bad checkpoints: a clear error, and the model untouched ---------------------------------

def _corrupt(tmp_path, edit):
    path = tmp_path / "bad.npz"
    arrays = random_vit_npz(tmp_path / "good.npz", TINY, (4, 4), classes=10)
    edit(arrays)  # mutates in place
    np.savez(path, **arrays)
    return path


BLOCK = "Transformer/encoderblock_1/MlpBlock_3/Dense_0"


@pytest.mark.parametrize("edit,message", [
    (lambda a: a.pop(f"{BLOCK}/kernel"), f"missing keys:\n    {BLOCK}/kernel"),
    (lambda a: a.update(extra=np.zeros(3)), "unexpected keys:\n    extra"),
    (lambda a: a.update({f"{BLOCK}/bias": np.zeros(5)}),
     rf"{BLOCK}/bias: expected \(768,\), found \(5,\)"),
    (lambda a: a.update(cls=np.array(["a", "b"])), "non-numeric arrays"),
])
def test_bad_checkpoint_raises_and_leaves_model_unchanged(edit, message, tmp_path):
    path = _corrupt(tmp_path, edit)
    error = _assert_load_refused(path, message)
    assert "No weights were changed" in str(error)


def test_truncated_file(tmp_path):
    good = tmp_path / "good.npz"
    random_vit_npz(good, TINY, (4, 4), classes=10)
    data = good.read_bytes()
    bad = tmp_path / "truncated.npz"
    bad.write_bytes(data[: len(data) // 2])
    _assert_load_refused(bad, "truncated.npz is not a readable .npz")
    with pytest.raises(CheckpointError, match="not a readable"):
        keras_vit.ViT(TINY, weights=str(bad))


def test_object_array_needing_pickle(tmp_path):
    path = tmp_path / "pickled.npz"
    arrays = random_vit_npz(tmp_path / "good.npz", TINY, (4, 4), classes=10)
    arrays["cls"] = np.array([{"evil": 1}], dtype=object)
    np.savez(path, **arrays)
    _assert_load_refused(path, "object arrays, which need pickle")


def test_another_variants_file_is_named(tmp_path):
    other = dataclasses.replace(get_variant("S/16"), depth=2, name="small")
    path = tmp_path / "s16.npz"
    random_vit_npz(path, other, (4, 4), classes=10)
    _assert_load_refused(path, r"(?s)shape mismatches.*width 384, depth 2, patch 16")


def test_a_failure_late_in_the_file_leaves_early_variables_untouched(tmp_path):
    """The last key is wrong; the first variables must not have been assigned."""
    path = _corrupt(tmp_path, lambda a: a.update({"Transformer/encoder_norm/scale": np.zeros(7)}))
    _assert_load_refused(path, "encoder_norm/scale")


def test_non_zip_file(tmp_path):
    path = tmp_path / "text.npz"
    path.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable"):
        keras_vit.load_weights(keras_vit.ViT(TINY), str(path))
    assert not zipfile.is_zipfile(path)


def test_a_full_official_file_is_recognised_by_name():
    from keras_vit.checkpoints import describe_architecture  # noqa: PLC0415

    arrays = {"embedding/kernel": np.zeros((32, 32, 3, 384)), "cls": np.zeros((1, 1, 384))}
    arrays.update({f"Transformer/encoderblock_{i}/LayerNorm_0/scale": np.zeros(1) for i in range(12)})
    assert describe_architecture(arrays).startswith("ViT-S_32 ")
