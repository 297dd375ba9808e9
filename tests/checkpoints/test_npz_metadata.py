"""keras_vit's record in the `.npz` files save_npz writes: numerics and grid read back."""

import dataclasses
import zipfile

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY
from keras_vit.variants import get_variant
from tests.checkpoints.formats.test_formats import _assert_refused, _randomised_keras

TINY = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")


def _without_metadata(path, out):
    """The same file minus keras_vit's record: what a file of another writer looks like."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename != METADATA_KEY + ".npy":
                target.writestr(info, source.read(info))
    return out


def test_exact_gelu_and_its_epsilon_round_trip_through_save_npz(tmp_path):
    model = _randomised_keras(keras_vit.ViT(TINY, image_size=32, classes=5, approximate_gelu=False,
                                            layer_norm_epsilon=1e-5))
    path = keras_vit.save_npz(model, tmp_path / "exact.npz")
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = np.asarray(model(images))
    again = keras_vit.ViT(TINY, weights=path, image_size=32)
    block = again.get_layer("encoderblock_0")
    assert (block.mlp.approximate_gelu, block.norm_0.epsilon) == (False, 1e-5)
    np.testing.assert_allclose(np.asarray(again(images)), expected, atol=1e-6)
    # The control: without the record the file reads as an official one (tanh GELU, 1e-6),
    # and the outputs move by more than the bound above.
    bare = _without_metadata(path, tmp_path / "bare.npz")
    official = keras_vit.ViT(TINY, weights=str(bare), image_size=32)
    assert official.get_layer("encoderblock_0").mlp.approximate_gelu is True
    assert np.abs(np.asarray(official(images)) - expected).max() > 1e-5
    # An explicit argument still wins over the record.
    chosen = keras_vit.ViT(TINY, weights=path, image_size=32, approximate_gelu=True)
    assert chosen.get_layer("encoderblock_0").mlp.approximate_gelu is True


def test_a_recorded_non_square_grid_refuses_the_transposed_size(tmp_path):
    model = _randomised_keras(keras_vit.ViT(TINY, image_size=(64, 96), classes=5))
    path = keras_vit.save_npz(model, tmp_path / "wide.npz")
    tall = keras_vit.ViT(TINY, image_size=(96, 64), classes=5)  # 6 x 4: the same 24 tokens
    _assert_refused(tall, path, r"grid is 4 x 6 tokens .* pass image_size=\(64, 96\)")
    same = keras_vit.ViT(TINY, weights=path, image_size=(64, 96))
    np.testing.assert_array_equal(same.get_layer("posembed_input").pos_embedding.numpy(),
                                  model.get_layer("posembed_input").pos_embedding.numpy())
    # Another grid is resized from the recorded one, not from a guessed square.
    larger = keras_vit.ViT(TINY, weights=path, image_size=(128, 192))
    assert larger.get_layer("posembed_input").grid_size == (8, 12)


def test_an_unrecorded_non_square_grid_asks_for_the_image_size(tmp_path):
    model = keras_vit.ViT(TINY, image_size=(64, 96), classes=5)
    bare = _without_metadata(keras_vit.save_npz(model, tmp_path / "wide.npz"), tmp_path / "bare.npz")
    with pytest.raises(keras_vit.CheckpointError, match=r"does not record its grid.*pass "
                                                        r"image_size=\(height, width\)"):
        keras_vit.ViT(TINY, weights=str(bare))


@pytest.mark.parametrize("record,words", [
    (b'{"grid": [4, "6"]}', "grid is [4, '6']"),
    (b'{"layer_norm_epsilon": NaN}', "layer_norm_epsilon is nan"),
    (b'{"approximate_gelu": "yes"}', "approximate_gelu is 'yes'"),
    (b"[1, 2]", "not keras_vit's record"),
])
def test_a_bad_record_is_refused_in_one_line(tmp_path, record, words):
    model = keras_vit.ViT(TINY, image_size=32, classes=5)
    path = _without_metadata(keras_vit.save_npz(model, tmp_path / "m.npz"), tmp_path / "bad.npz")
    with zipfile.ZipFile(path, "a") as archive, archive.open(METADATA_KEY + ".npy", "w") as f:
        np.lib.format.write_array(f, np.frombuffer(record, np.uint8))
    with pytest.raises(keras_vit.CheckpointError) as error:
        keras_vit.ViT(TINY, weights=str(path), image_size=32)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_the_map_heads_own_count_round_trips_and_is_checked(tmp_path):
    # A SigLIP whose MAP head has 4 heads under 12: the record builds it back (the route the
    # refusal below names), and a row of 12 is refused naming the setting.
    variant = dataclasses.replace(get_variant("SigLIP-B/16"), depth=1, map_heads=4)
    assert variant.map_heads == 4 and dataclasses.replace(variant, map_heads=12).map_heads is None
    model = _randomised_keras(keras_vit.ViT(variant, image_size=32, include_top=False))
    path = keras_vit.save_npz(model, tmp_path / "map4.npz")
    again = keras_vit.from_pretrained(path, include_top=False)
    assert again.get_layer("map_pool").num_heads == 4
    assert again.get_layer("encoderblock_0").attention.num_heads == 12
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(again(images)), np.asarray(model(images)), atol=1e-6)
    with pytest.raises(keras_vit.CheckpointError, match="MAP head has 4 attention heads; "
                       r"SigLIP-B/16's has 12\. Build keras_vit\.from_pretrained"):
        keras_vit.ViT(dataclasses.replace(variant, map_heads=None), weights=path, include_top=False)


def test_ropes_grid_options_round_trip_and_are_checked(tmp_path):
    """PE-core's RoPE options (grid offset 1, xy indexing) are Variant fields the record keeps:
    from_pretrained builds them back; a recorded offset that is not a finite number, or an
    indexing keras_vit does not compute, is refused in one line."""
    import json

    variant = dataclasses.replace(get_variant("PE-Core-Ti/16"), depth=1)
    model = _randomised_keras(keras_vit.ViT(variant, image_size=64, include_top=False))
    path = keras_vit.save_npz(model, tmp_path / "pe.npz")
    again = keras_vit.from_pretrained(path, include_top=False)
    rotary = again.get_layer("encoderblock_0").attention.rotary
    assert (rotary.grid_offset, rotary.grid_indexing) == (1.0, "xy")
    images = np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(again(images)), np.asarray(model(images)), atol=1e-6)
    with zipfile.ZipFile(path) as archive, archive.open(METADATA_KEY + ".npy") as f:
        record = json.loads(np.lib.format.read_array(f).tobytes())
    for field, value, words in [("rope_grid_offset", "one", "rope_grid_offset is one: not a finite"),
                                ("rope_grid_indexing", "yx", "rope_grid_indexing is yx: not one of")]:
        edited = {**record, "variant": {**record["variant"], field: value}}
        bad = _without_metadata(path, tmp_path / f"{field}.npz")
        with zipfile.ZipFile(bad, "a") as archive, archive.open(METADATA_KEY + ".npy", "w") as f:
            np.lib.format.write_array(f, np.frombuffer(json.dumps(edited).encode(), np.uint8))
        with pytest.raises(keras_vit.CheckpointError) as error:
            keras_vit.from_pretrained(str(bad), include_top=False)
        assert words in str(error.value) and "\n" not in str(error.value)
