"""AttentionProbe: attention and tokens from real models, without touching them."""

import dataclasses

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.analysis import AttentionProbe, pooled_features
from keras_vit.layers import AddPositionEmbedding, ClassToken, PatchEncoder, TokenPooling, TransformerBlock

TINY = keras_vit.Variant("ViT-tiny_8", width=32, depth=2, mlp_dim=64, heads=4, patch_size=8)
TINY_GAP = keras_vit.Variant("ViT-tiny_8-gap", width=32, depth=2, mlp_dim=64, heads=4,
                             patch_size=8, classifier="gap")
# A class-token model computes only the class token in its last block; the probe
# computes every token there (it needs the whole attention map), so their logits
# agree to float32 rounding, not bit for bit. Batch sizes also change the last bits.
CLASS_TOKEN_TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


def _randomise_head(model, seed=0):
    # The head starts at zero; random values make the logits a real check.
    head = model.get_layer("head")
    rng = np.random.default_rng(seed)
    head.kernel.assign(rng.normal(size=head.kernel.shape).astype("float32"))
    head.bias.assign(rng.normal(size=head.bias.shape).astype("float32"))
    return model


def _images(shape, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype("float32")


@pytest.fixture(scope="module")
def non_square():
    return _randomise_head(keras_vit.ViT(TINY, image_size=(32, 48), classes=5))


def test_logits_equal_the_model_and_attention_is_well_formed(non_square):
    images = _images((3, 32, 48, 3))
    expected = non_square.predict(images, batch_size=2, verbose=0)
    out = AttentionProbe(non_square)(images, batch_size=2)
    np.testing.assert_allclose(out.outputs, expected, **CLASS_TOKEN_TOLERANCE)
    tokens = 1 + 4 * 6
    assert out.attention.shape == (2, 3, 4, tokens, tokens)
    assert out.tokens.shape == (2, 3, tokens, 32)
    np.testing.assert_allclose(out.attention.sum(axis=-1), 1.0, atol=1e-5)
    assert np.all(out.attention >= 0)


def test_attention_matches_the_block_called_directly(non_square):
    images = _images((2, 32, 48, 3))
    to_block_0 = keras.Model(non_square.inputs[0], non_square.get_layer("encoderblock_0").input)
    x = to_block_0(images)
    block_out, weights = non_square.get_layer("encoderblock_0")(x, return_attention_scores=True)
    weights_1 = non_square.get_layer("encoderblock_1")(block_out, return_attention_scores=True)[1]
    out = AttentionProbe(non_square)(images)
    np.testing.assert_allclose(out.attention[0], keras.ops.convert_to_numpy(weights), atol=1e-6)
    np.testing.assert_allclose(out.attention[1], keras.ops.convert_to_numpy(weights_1), atol=1e-6)
    np.testing.assert_allclose(out.tokens[0], keras.ops.convert_to_numpy(block_out), atol=1e-6)


def test_the_model_is_left_unchanged():
    model = _randomise_head(keras_vit.ViT(TINY, image_size=32, classes=3))
    images = _images((2, 32, 32, 3))
    before = model.predict(images, verbose=0)
    config, layers = model.get_config(), list(model.layers)
    outputs, operations = list(model.outputs), list(model.operations)
    weights = [w.numpy().copy() for w in model.weights]
    probe = AttentionProbe(model)
    probe(images)
    assert model.get_config() == config
    assert list(model.layers) == layers and list(model.operations) == operations
    assert all(a is b for a, b in zip(model.outputs, outputs))
    assert all(np.array_equal(w.numpy(), v) for w, v in zip(model.weights, weights))
    # The probe calls the model's own layers: no copy, no extra weights.
    assert all(a is b for a, b in zip(probe._chain, model.layers[1:]))
    np.testing.assert_array_equal(model.predict(images, verbose=0), before)
    # A normal call still returns a tensor, not (tensor, attention).
    assert keras.ops.shape(model(images)) == (2, 3)


def test_gap_model_without_head():
    model = keras_vit.ViT(TINY_GAP, image_size=(48, 32), include_top=False, pooling="gap")
    images = _images((2, 48, 32, 3))
    probe = AttentionProbe(model)
    out = probe(images)
    assert probe.num_prefix_tokens == 0 and probe.grid_size == (6, 4) and probe.stride == (8, 8)
    assert out.attention.shape == (2, 2, 4, 24, 24)
    np.testing.assert_allclose(out.outputs, model.predict(images, verbose=0),
                               atol=1e-6)
    rollout = probe.attention_rollout(images)
    assert rollout.heatmap.shape == (2, 6, 4) and rollout.upsampled.shape == (2, 48, 32)
    distance = probe.mean_attention_distance(images, batch_size=1)
    assert distance.shape == (2, 4) and np.all(distance > 0)


# DINOv2 with registers (5 prefix tokens, the embedding on the patches only) is probed against
# timm's own attention in tests/cli/test_family_commands.py.
@pytest.mark.parametrize("row,prefix,class_token", [
    ("DeiT3-S/16", 1, True),  # a class token after the embedding covering patches only
    ("DeiT-S/16-distilled", 2, True),  # class and distillation tokens, both embedded
    ("SigLIP-B/16", 0, False)])
def test_the_families_prefix_tokens_are_counted_from_their_token_layers(row, prefix,
                                                                       class_token):
    """The prefix tokens are the model's token layers' (timm's num_prefix_tokens for each
    architecture), not its position embedding's, which covers the patches alone in DeiT III
    and DINOv2 with registers; rollout and distance then run and leave them out. A distilled
    DeiT's branching head is computed by the model, after the probe's chain of blocks."""
    variant = dataclasses.replace(keras_vit.get_variant(row), width=32, depth=2, heads=2,
                                  mlp_dim=64)
    size = 2 * variant.patch_size
    model = keras_vit.ViT(variant, image_size=size, include_top=False)
    probe = AttentionProbe(model)
    assert (probe.num_prefix_tokens, probe.has_class_token) == (prefix, class_token)
    images = _images((2, size, size, 3))
    out = probe(images)
    assert out.attention.shape == (2, 2, 2, prefix + 4, prefix + 4)
    # The distilled head branches (two poolings averaged): the model itself computes it.
    np.testing.assert_allclose(out.outputs, model.predict(images, verbose=0),
                               **CLASS_TOKEN_TOLERANCE)
    assert probe.attention_rollout(images).joint.shape == (2, class_token + 4, class_token + 4)
    assert probe.mean_attention_distance(images).shape == (2, 2)


@pytest.mark.parametrize("row", ["DINOv3-S/16-qkvb", "EVA02-Ti/14"])
def test_a_rope_model_is_probed_with_its_grid(row):
    """Each RoPE block is called with the patch grid: on a 2 x 3 grid the probe's logits are
    the model's (a square grid read from the token count would not even fit the 6 tokens)."""
    variant = dataclasses.replace(keras_vit.get_variant(row), width=32, depth=2, heads=2,
                                  mlp_dim=64)
    p = variant.patch_size
    model = _randomise_head(keras_vit.ViT(variant, image_size=(2 * p, 3 * p), classes=5))
    probe = AttentionProbe(model)
    assert tuple(probe.grid_size) == (2, 3)
    images = _images((2, 2 * p, 3 * p, 3))
    out = probe(images)
    prefix = variant.num_prefix_tokens
    assert out.attention.shape == (2, 2, 2, prefix + 6, prefix + 6)
    np.testing.assert_allclose(out.outputs, model.predict(images, verbose=0),
                               **CLASS_TOKEN_TOLERANCE)


def test_rollout_and_distance_on_a_non_square_model(non_square):
    images = _images((5, 32, 48, 3))
    probe = AttentionProbe(non_square)
    rollout = probe.attention_rollout(images, batch_size=2)
    assert rollout.heatmap.shape == (5, 4, 6)
    assert rollout.upsampled.shape == (5, 32, 48)
    assert rollout.upsampled.min() >= 0 and rollout.upsampled.max() <= 1
    # The class token's row of the joint attention, over the patches.
    np.testing.assert_allclose(rollout.heatmap.reshape(5, -1), rollout.joint[:, 0, 1:])
    # Batched accumulation equals one pass over all images.
    from keras_vit.analysis import mean_attention_distance
    full = mean_attention_distance(probe(images).attention, (4, 6), 8)
    np.testing.assert_allclose(probe.mean_attention_distance(images, batch_size=2), full,
                               rtol=1e-6)
    # Bounded by the largest patch-centre distance on a 4x6 grid of 8-pixel patches.
    assert np.all(full > 0) and np.all(full < np.hypot(3 * 8, 5 * 8))


def _model_with_a_stem(stem):
    """A ViT chain with a downsampling layer named "resnet" before the embedding."""
    images = keras.Input((32, 48, 3), name="images")
    x = stem(images)
    x = PatchEncoder(16, 2, name="embedding")(x)
    x = ClassToken(name="cls")(x)
    x = AddPositionEmbedding((4, 6), name="posembed_input")(x)
    for i in range(2):
        x = TransformerBlock(2, 32, name=f"encoderblock_{i}")(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")(x)
    x = TokenPooling("token", name="token_pool")(x)
    x = keras.layers.Dense(4, name="head")(x)
    return keras.Model(images, x)


def test_layers_before_the_embedding_are_handled():
    stem = keras.layers.Conv2D(8, 4, strides=4, name="resnet")
    model = _model_with_a_stem(stem)
    images = _images((2, 32, 48, 3))
    probe = AttentionProbe(model)
    assert probe.stride == (8, 8)  # 4 from the stem times patch 2
    out = probe(images)
    np.testing.assert_allclose(out.outputs, model.predict(images, verbose=0),
                               atol=1e-6)
    assert probe.attention_rollout(images).upsampled.shape == (2, 32, 48)
    assert probe.mean_attention_distance(images).shape == (2, 2)


def test_hybrid_model():
    pytest.importorskip("keras_vit.layers.resnet")
    hybrid = keras_vit.Variant("R+ViT-tiny", width=32, depth=2, mlp_dim=64, heads=4,
                               patch_size=1, resnet_stages=())
    model = _randomise_head(keras_vit.ViT(hybrid, image_size=(32, 48), classes=3))
    images = _images((2, 32, 48, 3))
    probe = AttentionProbe(model)
    assert probe.stride == (hybrid.total_stride,) * 2
    out = probe(images)
    np.testing.assert_allclose(out.outputs, model.predict(images, verbose=0),
                               **CLASS_TOKEN_TOLERANCE)
    assert probe.attention_rollout(images).upsampled.shape == (2, 32, 48)
    assert probe.mean_attention_distance(images).shape == (2, 4)


def test_pooled_features(non_square):
    images = _images((2, 32, 48, 3))
    features = pooled_features(non_square, images)
    head = non_square.get_layer("head")
    logits = features @ head.kernel.numpy() + head.bias.numpy()
    np.testing.assert_allclose(logits, non_square.predict(images, verbose=0), atol=1e-5)


def test_clear_errors(non_square):
    with pytest.raises(ValueError, match=r"shape \(batch, 32, 48, 3\)"):
        AttentionProbe(non_square)(_images((1, 32, 32, 3)))
    with pytest.raises(ValueError, match="not a keras_vit ViT"):
        AttentionProbe(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))
    with pytest.raises(TypeError, match="keras.Model"):
        AttentionProbe("ViT-B_16")
    with pytest.raises(ValueError, match="batch_size"):
        AttentionProbe(non_square)(_images((1, 32, 48, 3)), batch_size=0)


def test_a_block_called_symbolically_returns_its_attention():
    block = TransformerBlock(2, 16)
    tokens = keras.Input((5, 8))
    output, weights = block(tokens, return_attention_scores=True)
    assert output.shape == (None, 5, 8) and weights.shape == (None, 2, 5, 5)
    values = keras.Model(tokens, weights)(np.ones((1, 5, 8), "float32"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(values).sum(-1), 1.0, atol=1e-6)
