"""transformers' ViTHybrid folders (R50+ViT-B/16 as google/vit-hybrid-base-bit-384 is saved),
against transformers itself.

transformers 5 no longer has ViTHybrid, so the reference ran once, in transformers 4.57.6
(tests/fixtures/make_vit_hybrid_fixture.py says how to run it again): a small random
ViTHybridForImageClassification saved with save_pretrained (tests/fixtures/vit_hybrid_tiny/),
its logits on two images (tests/fixtures/vit_hybrid_tiny_expected.npz), and the (name, shape)
list of a full-size one (tests/fixtures/vit_hybrid_r50_b16_keys.json).

Tolerance: both sides compute in float32 (unit roundoff u = 6e-8). A layer's output
carries a relative error of about u * sqrt(n) for its longest reduction (n = 3 * 3 * 128 =
1152 in the trunk: 2e-6); the errors of the ~12 normalised layers (stem, two units of four
convolutions, two blocks) add as a random walk (x 3.5), and the two libraries' errors are
independent (x 1.4): 1e-5 relative, 2e-5 on logits of magnitude 2. TOL = 1e-4 leaves a
factor 5; measured: 4.8e-7. The fixture's weights sit where the trunk's numerics show: the
official numerics instead of transformers' move the logits by 4.5e-3 (GroupNorm epsilon
alone) to 5e-2, so the tolerance tells them apart (test_each_of_the_trunk_numerics_matters).
"""

import copy
import json
import pathlib
import shutil

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats import detect_format, inspect_checkpoint
from keras_vit.checkpoints.formats.base import Source, shape_stand_ins
from keras_vit.checkpoints.formats.transformers_hybrid import (
    TRUNK_NUMERICS,
    hybrid_variant,
    read_hybrid_config,
    vit_hybrid_to_official,
)
from keras_vit.variants import VARIANTS, Variant
from tests.checkpoints.test_loader import _assert_unchanged, _weights
from tests.oracle import official_hybrid_shapes

DATA = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
FOLDER = DATA / "vit_hybrid_tiny"
TOL = 1e-4
TINY = Variant("R1-1+ViT-32x2", width=32, depth=2, mlp_dim=64, heads=2, patch_size=1,
               resnet_stages=(1, 1))


@pytest.fixture(scope="module")
def expected():
    with np.load(DATA / "vit_hybrid_tiny_expected.npz") as arrays:
        return {k: arrays[k] for k in arrays.files}


@pytest.fixture(scope="module")
def model():
    return keras_vit.ViT(inspect_checkpoint(str(FOLDER)).variant, weights=str(FOLDER))


def test_a_vit_hybrid_folder_matches_transformers(model, expected):
    assert model.output_shape == (None, 5) and model.input_shape == (None, 56, 56, 3)
    np.testing.assert_allclose(np.asarray(model(expected["images"])), expected["logits"],
                               atol=TOL, rtol=0)


def test_inspect_checkpoint_reports_the_format_architecture_and_numerics():
    info = inspect_checkpoint(str(FOLDER))
    assert detect_format(str(FOLDER)) == info.format == "transformers_hybrid"
    assert info.variant == TINY
    assert (info.heads, info.classes, info.resolution(info.variant)) == (2, 5, 56)
    assert (info.layer_norm_epsilon, info.approximate_gelu) == (1e-12, False)
    assert info.trunk_numerics == {"group_norm_epsilon": 1e-5, "std_conv_epsilon": 1e-8,
                                   "std_conv_epsilon_on": "variance"} == TRUNK_NUMERICS


def test_the_model_records_transformers_numerics_and_keeps_them_in_keras_files(
        model, expected, tmp_path):
    trunk = model.get_layer("resnet")
    assert {k: trunk.get_config()[k] for k in TRUNK_NUMERICS} == TRUNK_NUMERICS
    norms = [trunk.gn_root] + [getattr(u, n) for _, _, u in trunk.units
                               for n in ("gn1", "gn2", "gn3", "gn_proj")]
    convs = [trunk.conv_root] + [getattr(u, n) for _, _, u in trunk.units
                                 for n in ("conv1", "conv2", "conv3", "conv_proj")]
    assert {n.epsilon for n in norms} == {1e-5}
    assert {(c.epsilon, c.epsilon_on) for c in convs} == {(1e-8, "variance")}
    block = model.get_layer("encoderblock_1")
    assert (block.mlp.approximate_gelu, block.norm_0.epsilon, block.norm_2.epsilon,
            model.get_layer("encoder_norm").epsilon) == (False, 1e-12, 1e-12, 1e-12)
    model.save(tmp_path / "hybrid.keras")
    reloaded = keras.saving.load_model(tmp_path / "hybrid.keras")
    np.testing.assert_allclose(np.asarray(reloaded(expected["images"])), expected["logits"],
                               atol=TOL, rtol=0)


@pytest.mark.parametrize("change", [{"group_norm_epsilon": 1e-6},
                                    {"std_conv_epsilon": 1e-5, "std_conv_epsilon_on": "std"}])
def test_each_of_the_trunk_numerics_matters(model, expected, change):
    """The same weights in a trunk with one of the official numerics instead of
    transformers': the logits move by far more than TOL, so the match above shows them."""
    config = copy.deepcopy(model.get_config())
    next(layer for layer in config["layers"] if layer["name"] == "resnet")["config"].update(change)
    other = keras.Model.from_config(config)
    other.set_weights(model.get_weights())
    assert np.abs(np.asarray(other(expected["images"])) - expected["logits"]).max() > 10 * TOL


def test_loading_into_a_trunk_of_other_numerics_warns_naming_them(model, expected):
    official = keras_vit.ViT(TINY, image_size=56, classes=5)
    with pytest.warns(UserWarning, match="computed with the ResNet numerics .*'variance'"):
        keras_vit.load_weights(official, str(FOLDER))
    for ours, theirs in zip(official.weights, model.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_trunk_alone_loads_from_the_folder_with_its_numerics(model):
    trunk = keras_vit.ResNetV2(TINY, weights=str(FOLDER))
    layer = trunk.get_layer("resnet")
    assert {k: layer.get_config()[k] for k in TRUNK_NUMERICS} == TRUNK_NUMERICS
    for ours, theirs in zip(layer.weights, model.get_layer("resnet").weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_a_vithybridmodel_folder_loads_too(model, tmp_path):
    """ViTHybridModel (no classifier) saves its keys without the "vit." prefix."""
    def as_base_model(arrays):
        for key in list(arrays):
            value = arrays.pop(key)
            if not key.startswith("classifier."):
                arrays[key.removeprefix("vit.")] = value

    folder = _edited_copy(tmp_path, arrays=as_base_model)
    features = keras_vit.ViT(TINY, weights=str(folder), include_top=False)
    assert features.output_shape == (None, 32)
    assert len(features.weights) == len(model.weights) - 2  # all but the head's kernel, bias
    for ours, theirs in zip(features.weights, model.weights):  # the head is last in `model`
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_full_size_r50_b16_key_set_maps_to_the_official_layout(tmp_path):
    """Every (name, shape) of transformers' R50+ViT-B/16 at 384 (google/vit-hybrid-base-bit-384's
    configuration) becomes exactly the official R50+ViT-B_16 keys and shapes, and its config
    the official variant."""
    record = json.loads((DATA / "vit_hybrid_r50_b16_keys.json").read_text())
    shapes = {name: tuple(shape) for name, shape in record["keys"]}
    variant = VARIANTS["R50+ViT-B_16"]
    translated = vit_hybrid_to_official(shape_stand_ins(shapes), heads=variant.heads)
    assert len(translated) == len(shapes)
    assert {k: v.shape for k, v in translated.items()} == official_hybrid_shapes(
        variant, variant.token_grid((384, 384)), 1000)
    (tmp_path / "config.json").write_text(json.dumps(record["config"]))
    source = Source(tmp_path)
    try:
        assert hybrid_variant(read_hybrid_config(source)) is variant
    finally:
        source.close()


def _edited_copy(tmp_path, arrays=None, config=None):
    """A copy of the fixture folder with its arrays or config.json edited in place."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "hybrid"
    shutil.copytree(FOLDER, folder)
    if arrays is not None:
        weights = load_file(str(folder / "model.safetensors"))
        arrays(weights)
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if config is not None:
        values = json.loads((folder / "config.json").read_text())
        config(values)
        (folder / "config.json").write_text(json.dumps(values))
    return folder


_CONV2 = "vit.embeddings.patch_embeddings.backbone.bit.encoder.stages.1.layers.0.conv2.weight"


@pytest.mark.parametrize("edit, named", [
    (lambda a: a.pop(_CONV2), "1 missing keys:\n    block2/unit1/conv2/kernel"),
    (lambda a: a.update({_CONV2.replace("weight", "bias"): np.zeros(128, np.float16)}),
     f"1 unexpected keys:\n    transformers:{_CONV2.replace('weight', 'bias')}"),
    (lambda a: a.update({_CONV2: a[_CONV2][:, :64]}),
     "block2/unit1/conv2/kernel: expected (3, 3, 128, 128), found (3, 3, 64, 128)"),
], ids=["missing", "extra", "shape"])
def test_a_folder_with_a_wrong_key_is_refused_naming_it_and_nothing_changes(
        model, tmp_path, edit, named):
    folder = _edited_copy(tmp_path, arrays=edit)
    before = _weights(model)
    with pytest.raises(CheckpointError) as error:
        keras_vit.load_weights(model, str(folder))
    assert str(error.value).startswith(f"{folder} does not fit model") and named in str(error.value)
    _assert_unchanged(model, before)


def _set_backbone(field, value):
    def edit(config):
        config["backbone_config"][field] = value
    return edit


def _set(field, value):
    def edit(config):
        config[field] = value
    return edit


@pytest.mark.parametrize("edit, named", [
    (_set_backbone("layer_type", "preactivation"), "backbone_config.layer_type"),
    (_set_backbone("global_padding", None), "backbone_config.global_padding"),
    (_set_backbone("embedding_dynamic_padding", False), "backbone_config.embedding_dynamic_padding"),
    (_set_backbone("num_groups", 16), "backbone_config.num_groups"),
    (_set_backbone("output_stride", 4), "backbone_config.output_stride"),
    (_set_backbone("out_features", ["stage1"]), "backbone_config.out_features"),
    (_set_backbone("hidden_sizes", [256, 1024]), "backbone_config.hidden_sizes"),
    (_set("qkv_bias", False), "qkv_bias"),
    (_set("hidden_act", "relu"), "hidden_act"),
    (_set("layer_norm_eps", float("nan")), "layer_norm_eps"),
    (_set("model_type", "vit"), "'vit' model"),
])
def test_a_config_keras_vit_cannot_compute_exactly_is_refused_in_one_line(tmp_path, edit, named):
    folder = _edited_copy(tmp_path, config=edit)
    with pytest.raises(CheckpointError) as error:
        inspect_checkpoint(str(folder))
    message = str(error.value)
    assert "\n" not in message and str(folder / "config.json") in message and named in message
