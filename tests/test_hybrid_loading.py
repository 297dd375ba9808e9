"""Strict loading of hybrid checkpoints, and saving hybrids to `.keras`."""

import numpy as np
import pytest

import keras
import keras_vit
from tests.oracle import random_hybrid_npz


def _small():
    """The real trunk layout in miniature: 2 stages of 2 units, a 1-block width-64 transformer."""
    return keras_vit.Variant("R-tiny", 64, 1, 128, 2, 1, "token", (2, 2))


def _weights(model):
    return [w.numpy().copy() for w in model.weights]


@pytest.fixture
def checkpoint(tmp_path):
    variant = _small()
    path = tmp_path / "hybrid.npz"
    arrays = random_hybrid_npz(path, variant, variant.token_grid((32, 32)), classes=5)
    return variant, path, arrays


def _broken(tmp_path, arrays, drop=(), replace=None):
    arrays = {k: v for k, v in arrays.items() if not k.startswith(drop)} if drop else dict(arrays)
    arrays.update(replace or {})
    path = tmp_path / "broken.npz"
    np.savez(path, **arrays)
    return str(path)


def test_a_hybrid_checkpoint_loads_every_trunk_array(checkpoint):
    variant, path, arrays = checkpoint
    model = keras_vit.ViT(variant, weights=str(path))
    trunk = model.get_layer("resnet")
    np.testing.assert_array_equal(trunk.conv_root.kernel.numpy(), arrays["conv_root/kernel"])
    unit = dict(((s, u), layer) for s, u, layer in trunk.units)[(2, 1)]
    np.testing.assert_array_equal(unit.gn_proj.gamma.numpy(),
                                  arrays["block2/unit1/gn_proj/scale"].reshape(-1))
    assert unit.conv_proj is not None and dict(
        ((s, u), layer) for s, u, layer in trunk.units)[(2, 2)].conv_proj is None


@pytest.mark.parametrize("problem", ["missing unit", "wrong channels"])
def test_a_failed_hybrid_load_names_the_problem_and_changes_nothing(problem, checkpoint, tmp_path):
    variant, _, arrays = checkpoint
    if problem == "missing unit":
        path = _broken(tmp_path, arrays, drop=("block2/unit2/",))
        expected = r"missing keys:\n    block2/unit2/conv1/kernel"
    else:
        path = _broken(tmp_path, arrays, replace={
            "block1/unit2/conv1/kernel": np.ones((1, 1, 128, 64), np.float32)})
        expected = r"block1/unit2/conv1/kernel: expected \(1, 1, 256, 64\), found \(1, 1, 128, 64\)"
    model = keras_vit.ViT(variant, image_size=32, classes=5)
    before = _weights(model)
    with pytest.raises(keras_vit.CheckpointError, match=expected) as error:
        keras_vit.load_weights(model, path)
    assert "No weights were changed" in str(error.value)
    for old, new in zip(before, _weights(model)):
        np.testing.assert_array_equal(old, new)
    # The trunk-only loader is as strict.
    trunk = keras_vit.ResNetV2(variant)
    before = _weights(trunk)
    with pytest.raises(keras_vit.CheckpointError, match=expected):
        keras_vit.load_resnet_weights(trunk, path)
    for old, new in zip(before, _weights(trunk)):
        np.testing.assert_array_equal(old, new)


def test_an_extra_unit_is_reported(checkpoint, tmp_path):
    variant, _, arrays = checkpoint
    extra = {k.replace("unit2", "unit3"): v for k, v in arrays.items() if "block2/unit2/" in k}
    path = _broken(tmp_path, arrays, replace=extra)
    with pytest.raises(keras_vit.CheckpointError, match="unexpected keys:\n    block2/unit3/"):
        keras_vit.ViT(variant, weights=path)


def test_resnet_features_load_the_trunk_of_a_hybrid_file(checkpoint):
    variant, path, _ = checkpoint
    hybrid = keras_vit.ViT(variant, weights=str(path))
    trunk = keras_vit.ResNetV2(variant, weights=str(path))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    np.testing.assert_allclose(trunk(x)["block2"].numpy(),
                               hybrid.get_layer("resnet")(x).numpy(), atol=1e-6)


def test_keras_round_trip_keeps_outputs(checkpoint, tmp_path):
    variant, path, _ = checkpoint
    model = keras_vit.ViT(variant, weights=str(path))
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    file = tmp_path / "hybrid.keras"
    model.save(file)
    restored = keras.saving.load_model(file)  # safe_mode stays on: no Lambda, no pickles
    np.testing.assert_array_equal(restored(x).numpy(), model(x).numpy())
    layer = restored.get_layer("resnet")
    assert type(layer).__name__ == "ResNetStem" and layer.stages == (2, 2)
    trunk = keras_vit.ResNetV2(variant, weights=str(path))
    trunk.save(tmp_path / "trunk.keras")
    again = keras.saving.load_model(tmp_path / "trunk.keras")
    np.testing.assert_array_equal(again(x)["block2"].numpy(), trunk(x)["block2"].numpy())


def test_position_embedding_resizes_to_the_hybrid_grid(checkpoint):
    variant, path, _ = checkpoint  # saved for 32 px: a 4 x 4 grid at stride 8
    model = keras_vit.ViT(variant, weights=str(path), image_size=50)  # ceil(50 / 8) = 7
    posembed = model.get_layer("posembed_input")
    assert posembed.grid_size == (7, 7)
    assert tuple(posembed.pos_embedding.shape) == (1, 1 + 49, 64)


def test_a_mismatch_report_recognises_the_hybrid_file():
    from keras_vit.checkpoints import describe_architecture  # noqa: PLC0415

    def keys(stages_channels, depth=12):
        arrays = {"embedding/kernel": np.zeros((1, 1, stages_channels, 768)), "cls": 0,
                  "conv_root/kernel": 0}
        arrays.update({f"Transformer/encoderblock_{i}/x": 0 for i in range(depth)})
        return arrays

    assert describe_architecture(keys(1024)).startswith("R50+ViT-B_16")
    assert describe_architecture(keys(2048)).startswith("R26+ViT-B_32")
