"""keras-hub presets of the families (SigLIP, CLIP, DINOv2): keras-hub builds a tiny model of
each class with random weights and writes it with its own `save_to_preset`;
`keras_vit.from_pretrained` builds the family from the preset alone and computes what
keras-hub's own forward computes on the same pixels.

Tolerance: relative (to the largest output) 1e-4 in float32, the families' bound
(tests/checkpoints/formats/test_timm_families.py). Both sides are Keras float32 on the same backend,
the same operations in nearly the same order: rounding of ~1e-7 relative per operation over
sums of at most a few hundred terms, so 1e-4 leaves orders of magnitude, while a wrong
mapping (a transposed kernel, tanh for erf GELU, the probe in the wrong place) moves the
output by 1e-2 or more.
"""

import json

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats import inspect_checkpoint
from keras_vit.checkpoints.formats.npz_metadata import VARIANT_ATTRIBUTE
from keras_vit.variants import FAMILIES
from tests.checkpoints.formats.test_formats import _images

RELATIVE_TOLERANCE = 1e-4
SIZE, PATCH = 32, 8
TOWER = dict(patch_size=PATCH, hidden_dim=32, num_layers=2, num_heads=2, intermediate_dim=48,
             image_shape=(SIZE, SIZE, 3))


def _randomise(model, seed=1):
    """Every weight random (LayerNorm scales near 1): a fresh model's zero biases and unit
    scales would hide a mistake in their mapping."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if "position_ids" in w.path:  # an index table, not a weight
            continue
        w.assign((rng.standard_normal(w.shape) * 0.2 + (1.0 if "gamma" in w.path else 0))
                 .astype("float32"))
    return model


def _assert_close(ours, theirs):
    assert ours.shape == theirs.shape
    assert np.abs(theirs).max() > 0.1  # a loaded model, not zeros
    relative = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert relative <= RELATIVE_TOLERANCE, f"relative max difference {relative:.2e}"


def _siglip_tower(keras_hub, activation):
    return keras_hub.models.SigLIPVisionEncoder(**TOWER, intermediate_activation=activation)


# erf GELU is slow: the tanh case reads the same switch (approximate_gelu, asserted) by default.
@pytest.mark.parametrize("activation", ["gelu_approximate",
                                        pytest.param("gelu", marks=pytest.mark.slow)])
def test_a_siglip_vision_encoder_preset_builds_siglip(activation, tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    tower = _randomise(_siglip_tower(keras_hub, activation))
    directory = str(tmp_path / "siglip")
    tower.save_to_preset(directory)
    ours = keras_vit.from_pretrained(directory, include_top=False)
    built = getattr(ours, VARIANT_ATTRIBUTE)
    assert (built.family, built.classifier, built.width, built.mlp_dim) == ("SigLIP", "map", 32, 48)
    assert ours.get_layer("encoderblock_0").mlp.approximate_gelu == (activation != "gelu")
    images = _images(2, (SIZE, SIZE))
    _assert_close(np.asarray(ours(images)), np.asarray(tower({"images": images})))


# slow: test_a_clip_backbone_preset_gives_the_projected_embedding reads a tower nested in a
# two-tower backbone by default, through the same path.
@pytest.mark.slow
def test_a_siglip_backbone_preset_reads_its_image_tower(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    text = keras_hub.models.SigLIPTextEncoder(vocabulary_size=16, embedding_dim=16, hidden_dim=16,
                                              num_layers=1, num_heads=2, intermediate_dim=16,
                                              sequence_length=4)
    backbone = _randomise(keras_hub.models.SigLIPBackbone(
        _siglip_tower(keras_hub, "gelu_approximate"), text))
    directory = str(tmp_path / "siglip-backbone")
    backbone.save_to_preset(directory)
    ours = keras_vit.from_pretrained(directory, include_top=False)
    images = _images(2, (SIZE, SIZE))
    _assert_close(np.asarray(ours(images)), np.asarray(backbone.vision_encoder({"images": images})))


def _clip_tower(keras_hub, activation="quick_gelu"):
    tower = keras_hub.models.CLIPVisionEncoder(**TOWER, intermediate_activation=activation)
    # keras-hub looks positions up by a stored index table, which its converted presets hold
    # as 0, 1, 2, ... but a freshly built CLIP as zeros (every token at position 0): set as in
    # its presets, so that a position embedding read wrong shows.
    ids = tower.embedding.position_ids
    ids.assign(np.arange(ids.shape[-1]).reshape(ids.shape).astype(ids.dtype))
    return tower


# erf GELU is slow: the QuickGELU case reads the same switch (the variant's activation).
@pytest.mark.parametrize("activation", ["quick_gelu", pytest.param("gelu", marks=pytest.mark.slow)])
def test_a_clip_vision_encoder_preset_builds_clip(activation, tmp_path):
    """keras-hub's CLIP features: the class token of its normed sequence (CLIPVisionPooler)."""
    keras_hub = pytest.importorskip("keras_hub")
    tower = _randomise(_clip_tower(keras_hub, activation))
    directory = str(tmp_path / "clip")
    tower.save_to_preset(directory)
    ours = keras_vit.from_pretrained(directory, include_top=False)
    built = getattr(ours, VARIANT_ATTRIBUTE)
    assert (built.family, built.pre_norm, built.patch_bias, built.activation) == \
        ("CLIP", True, False, activation)
    images = _images(2, (SIZE, SIZE))
    _assert_close(np.asarray(ours(images)), np.asarray(tower({"images": images}))[:, 0])


def test_a_clip_backbone_preset_gives_the_projected_embedding(tmp_path):
    """A CLIPBackbone holds the projection: the features are keras-hub's
    get_vision_embeddings, the projected image embedding."""
    keras_hub = pytest.importorskip("keras_hub")
    text = keras_hub.models.CLIPTextEncoder(vocabulary_size=16, embedding_dim=16, hidden_dim=16,
                                            num_layers=1, num_heads=2, intermediate_dim=16,
                                            max_sequence_length=4)
    backbone = _randomise(keras_hub.models.CLIPBackbone(_clip_tower(keras_hub), text,
                                                        projection_dim=12))
    directory = str(tmp_path / "clip-backbone")
    backbone.save_to_preset(directory)
    ours = keras_vit.from_pretrained(directory, include_top=False)
    assert ours.output_shape == (None, 12)
    images = _images(2, (SIZE, SIZE))
    _assert_close(np.asarray(ours(images)), np.asarray(backbone.get_vision_embeddings(images)))


def _dinov2_preset(keras_hub, directory, registers, swiglu, antialias):
    """A DINOv2 backbone built at SIZE whose position embedding is stored at another grid
    (48 px: 6 x 6), so that keras-hub resizes it, written by keras-hub."""
    backbone = _randomise(keras_hub.models.DINOV2Backbone(
        patch_size=PATCH, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=48,
        num_register_tokens=registers, use_swiglu_ffn=swiglu, image_shape=(SIZE, SIZE, 3),
        position_embedding_shape=(48, 48, 3), antialias_in_interpolation=antialias))
    # The table keras-hub computes from the stored one when built (keras-hub's own function),
    # so that its save keeps the stored table.
    embeddings = backbone.embeddings
    embeddings.interpolated_position_embeddings.assign(
        embeddings._interpolate_position_embeddings(
            embeddings.position_embeddings, patch_size=PATCH,
            source_shape=embeddings.position_embedding_shape, target_shape=(SIZE, SIZE),
            antialias=antialias))
    backbone.save_to_preset(directory)
    return backbone


# slow: the default case reads the same rows and switches (the plain MLP's rows, registers,
# the resize); this one adds the SwiGLU's packed rows, no registers and the antialiased resize.
@pytest.mark.parametrize("registers, swiglu, antialias", [
    (2, False, False), pytest.param(0, True, True, marks=pytest.mark.slow)],
    ids=["registers", "swiglu"])
def test_a_dinov2_preset_builds_dinov2_at_its_size_and_another(registers, swiglu, antialias,
                                                                tmp_path):
    """keras-hub's DINOv2 output is its whole normed sequence (class token, registers,
    patches): keras_vit's pooling=None gives the same tokens in the same order, and its
    include_top=False features are the class token of it. At another size, keras-hub's
    `from_preset(..., image_shape=...)` resizes the stored position embedding with
    keras.ops.image.resize (bicubic, not torch's: 0.48 apart on this 6 x 6 grid at 5 x 5),
    and keras_vit resizes it the same way."""
    keras_hub = pytest.importorskip("keras_hub")
    directory = str(tmp_path / "dinov2")
    backbone = _dinov2_preset(keras_hub, directory, registers, swiglu, antialias)
    ours = keras_vit.from_pretrained(directory, include_top=False, pooling=None)
    built = getattr(ours, VARIANT_ATTRIBUTE)
    assert (built.family, built.register_tokens, built.feed_forward, built.image_size) == \
        ("DINOv2", registers, "swiglu" if swiglu else "mlp", SIZE)
    assert ours.get_layer("encoderblock_0").mlp.approximate_gelu is False  # keras' "gelu": erf
    assert ours.get_layer("encoder_norm").epsilon == 1e-6
    images = _images(2, (SIZE, SIZE))
    _assert_close(np.asarray(ours(images)), np.asarray(backbone({"images": images})))
    other = SIZE + PATCH
    theirs = keras_hub.models.Backbone.from_preset(directory, image_shape=(other, other, 3))
    features = keras_vit.from_pretrained(directory, include_top=False, image_size=other)
    images = _images(2, (other, other))
    _assert_close(np.asarray(features(images)), np.asarray(theirs({"images": images}))[:, 0])


def test_a_full_size_config_names_its_row(tmp_path):
    """keras-hub's SigLIP-B/16 and So400m/14 tower configs (as its presets hold them) are the
    rows themselves, read from config.json without building anything."""
    from keras_vit.checkpoints.formats.keras_hub_families import (
        PRESET_FAMILIES,
        preset_family_variant,
    )

    family = PRESET_FAMILIES["SigLIPVisionEncoder"]
    base = dict(patch_size=16, hidden_dim=768, num_layers=12, num_heads=12,
                intermediate_dim=3072, image_shape=[224, 224, 3])
    assert preset_family_variant(base, family) is FAMILIES["SigLIP-B/16"]
    so400m = dict(patch_size=14, hidden_dim=1152, num_layers=27, num_heads=16,
                  intermediate_dim=4304, image_shape=[224, 224, 3])
    assert preset_family_variant(so400m, family) is FAMILIES["SigLIP-So400m/14"]
    # keras-hub's DINOv2 presets (converted from transformers: 518 px, registers or not,
    # the giant's SwiGLU narrowed from 4 x 1536 to 2 x 4096).
    dinov2 = PRESET_FAMILIES["DINOV2Backbone"]
    small = dict(patch_size=14, hidden_dim=384, num_layers=12, num_heads=6, intermediate_dim=1536,
                 image_shape=[518, 518, 3], position_embedding_shape=[518, 518])
    assert preset_family_variant(small, dinov2) is FAMILIES["DINOv2-S/14"]
    giant = dict(patch_size=14, hidden_dim=1536, num_layers=40, num_heads=24,
                 intermediate_dim=6144, image_shape=[518, 518, 3], num_register_tokens=4,
                 use_swiglu_ffn=True)
    assert preset_family_variant(giant, dinov2) is FAMILIES["DINOv2-g/14-reg4"]


def test_a_preset_of_another_class_is_refused_in_one_line(tmp_path):
    """A keras-hub class keras_vit has no rows for (Swin here: its config as save_to_preset
    writes it, without weights, which are never read)."""
    directory = tmp_path / "swin"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({
        "module": "keras_hub.src.models.swin_transformer.swin_transformer_backbone",
        "class_name": "SwinTransformerBackbone", "config": {"patch_size": 4},
        "registered_name": "keras_hub>SwinTransformerBackbone"}))
    with pytest.raises(CheckpointError,
                       match="SwinTransformerBackbone.*SigLIPVisionEncoder.*DINOV3Backbone") \
            as error:
        inspect_checkpoint(str(directory))
    assert "\n" not in str(error.value)
    with pytest.raises(CheckpointError, match="SwinTransformerBackbone"):
        keras_vit.from_pretrained(str(directory))


@pytest.mark.parametrize("change, named", [
    (lambda config: config.pop("hidden_dim"), "hidden_dim is missing"),
    (lambda config: config.update(num_register_tokens=-1), "num_register_tokens is -1"),
    (lambda config: config.update(use_swiglu_ffn="yes"), "use_swiglu_ffn is 'yes'"),
], ids=["missing", "registers", "swiglu"])
def test_a_bad_dinov2_config_is_refused_in_one_line(tmp_path, change, named):
    """Refused from config.json alone, before keras-hub builds anything (no weights written)."""
    config = dict(patch_size=14, hidden_dim=32, num_layers=2, num_heads=2, intermediate_dim=48,
                  image_shape=[28, 28, 3])
    change(config)
    directory = tmp_path / "dinov2"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({
        "module": "keras_hub.src.models.dinov2.dinov2_backbone", "class_name": "DINOV2Backbone",
        "config": config, "registered_name": "keras_hub>DINOV2Backbone"}))
    with pytest.raises(CheckpointError, match=named) as error:
        keras_vit.from_pretrained(str(directory))
    assert "\n" not in str(error.value)
