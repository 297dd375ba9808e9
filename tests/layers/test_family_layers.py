"""The families' layers against NumPy written out by hand (their config, `.keras`, shape,
bfloat16 and training-flag checks are tests/layers/test_layers.py's shared ones): LayerScale,
PrefixTokens' order, QuickGELU, the packed SwiGLU, MAPHead, and LayerScale in the block."""

import math

import keras
import numpy as np
import pytest

import keras_vit

ATOL = 1e-5  # float32 sums of at most 16 products of O(1) values: rounding ~1e-6


def _rng():
    return np.random.default_rng(0)


def _assign(layer, rng):
    for w in layer.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))


def test_layer_scale_multiplies_each_channel_and_starts_at_its_init_value():
    x = _rng().normal(size=(2, 3, 4)).astype("float32")
    layer = keras_vit.LayerScale(1e-6)
    np.testing.assert_allclose(np.asarray(layer(x)), x * 1e-6, rtol=1e-6)
    layer.scale.assign(np.array([1, 2, 3, 4], "float32"))
    np.testing.assert_allclose(np.asarray(layer(x)), x * [1, 2, 3, 4], rtol=1e-6)


def test_prefix_tokens_then_the_class_token_give_timms_order():
    x = np.zeros((2, 3, 4), "float32")
    registers = keras_vit.PrefixTokens(2)
    cls = keras_vit.ClassToken()
    out = cls(registers(x))
    registers.tokens.assign(np.arange(8, dtype="float32").reshape(1, 2, 4) + 1)
    cls.cls.assign(np.full((1, 1, 4), -1.0, "float32"))
    out = np.asarray(cls(registers(x)))
    assert out.shape == (2, 6, 4)
    np.testing.assert_array_equal(out[:, 0], -1)  # class token first
    np.testing.assert_array_equal(out[:, 1:3], np.broadcast_to(np.asarray(registers.tokens), (2, 2, 4)))
    np.testing.assert_array_equal(out[:, 3:], 0)  # then the patches


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_prefix_tokens_refuse_a_bad_count(bad):
    with pytest.raises(keras_vit.ArgumentError, match="num_tokens"):
        keras_vit.PrefixTokens(bad)


def _mlp_reference(layer, x, hidden):
    k0, b0 = (np.asarray(w) for w in (layer.dense_0.kernel, layer.dense_0.bias))
    k1, b1 = (np.asarray(w) for w in (layer.dense_1.kernel, layer.dense_1.bias))
    return hidden(x @ k0 + b0) @ k1 + b1


def test_quick_gelu_is_x_times_sigmoid_of_1_702_x():
    x = _rng().normal(size=(2, 5, 8)).astype("float32")
    layer = keras_vit.MlpBlock(16, activation="quick_gelu")
    layer(x)
    _assign(layer, _rng())
    expected = _mlp_reference(layer, x, lambda h: h / (1 + np.exp(-1.702 * h)))
    np.testing.assert_allclose(np.asarray(layer(x)), expected, atol=ATOL)


def test_swiglu_gates_the_second_half_by_silu_of_the_first():
    x = _rng().normal(size=(2, 5, 8)).astype("float32")
    layer = keras_vit.MlpBlock(16, activation="swiglu")
    layer(x)
    assert tuple(layer.dense_1.kernel.shape) == (8, 8)  # reads mlp_dim // 2 features
    _assign(layer, _rng())

    def swiglu(h):
        gate, value = h[..., :8], h[..., 8:]
        return gate / (1 + np.exp(-gate)) * value

    np.testing.assert_allclose(np.asarray(layer(x)), _mlp_reference(layer, x, swiglu), atol=ATOL)


def test_an_unknown_activation_or_an_odd_swiglu_is_refused():
    with pytest.raises(keras_vit.ArgumentError, match="activation must be one of"):
        keras_vit.MlpBlock(16, activation="relu")
    with pytest.raises(keras_vit.ArgumentError, match="odd"):
        keras_vit.MlpBlock(15, activation="swiglu")


def _layer_norm(x, gamma, beta, eps):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu(h):  # exact, erf
    return 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))


def test_map_head_is_big_visions_attention_pooling():
    """probe -> multi-head attention over the tokens -> y + MLP(LN(y)), per big_vision's
    MAPHead, in NumPy."""
    heads, d, n = 2, 8, 5
    x = _rng().normal(size=(3, n, d)).astype("float32")
    layer = keras_vit.MAPHead(heads, 16, approximate_gelu=False)
    layer(x)
    _assign(layer, _rng())
    w = {k: np.asarray(getattr(layer, k)) for k in ("probe", "query_kernel", "query_bias",
                                                     "kv_kernel", "kv_bias", "out_kernel", "out_bias")}
    hd = d // heads
    q = (w["probe"][0] @ w["query_kernel"] + w["query_bias"]).reshape(1, heads, hd)
    kv = x @ w["kv_kernel"] + w["kv_bias"]
    k, v = kv[..., :d].reshape(3, n, heads, hd), kv[..., d:].reshape(3, n, heads, hd)
    scores = np.einsum("qhc,bnhc->bhqn", q, k) / math.sqrt(hd)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    attended = np.einsum("bhqn,bnhc->bqhc", weights, v).reshape(3, d)
    y = attended @ w["out_kernel"] + w["out_bias"]
    normed = _layer_norm(y, np.asarray(layer.norm.gamma), np.asarray(layer.norm.beta), 1e-6)
    expected = y + _mlp_reference(layer.mlp, normed, _gelu)
    np.testing.assert_allclose(np.asarray(layer(x)), expected, atol=ATOL)


def test_layer_scale_in_the_block_scales_both_branches():
    """With both scales zero the block is the identity; with one branch's scale the output
    moves by exactly that scaled branch."""
    x = _rng().normal(size=(2, 5, 8)).astype("float32")
    block = keras_vit.TransformerBlock(2, 16, layer_scale=1e-5)
    block(x)
    _assign(block, _rng())
    block.layer_scale_1.scale.assign(np.zeros(8, "float32"))
    block.layer_scale_3.scale.assign(np.zeros(8, "float32"))
    np.testing.assert_array_equal(np.asarray(block(x)), x)
    plain = keras_vit.TransformerBlock(2, 16)
    plain(x)
    for name in ("norm_0", "attention", "norm_2", "mlp"):
        getattr(plain, name).set_weights(getattr(block, name).get_weights())
    block.layer_scale_1.scale.assign(np.ones(8, "float32"))
    block.layer_scale_3.scale.assign(np.ones(8, "float32"))
    np.testing.assert_allclose(np.asarray(block(x)), np.asarray(plain(x)), atol=ATOL)


def test_a_model_saves_and_reloads_every_family_layer(tmp_path):
    """A SigLIP-shaped model (MAPHead) and a DINOv2-with-registers-shaped one reload from
    .keras with safe mode on (no Lambda), the same outputs."""
    import dataclasses

    for name in ("SigLIP-B/16", "DINOv2-S/14-reg4"):
        variant = dataclasses.replace(keras_vit.get_variant(name), depth=1)
        model = keras_vit.ViT(variant, image_size=2 * variant.patch_size, classes=3)
        _assign(model, _rng())
        path = tmp_path / "m.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)
        x = _rng().uniform(-1, 1, (1, *model.input_shape[1:])).astype("float32")
        np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))
