"""The token norms (keras_vit/layers/norms.py) and the bias switches AIMv2 brought: the RMSNorm
computes timm's RmsNorm (the epsilon inside the root, in float32 also under bfloat16), and a
block built without projection biases has none of those weights."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.norms import token_norm
from tests.oracle import import_timm

EPSILON = 1e-5  # AIMv2's


def _timm_rms_norm(x, scale):
    timm = import_timm()
    import torch

    norm = timm.layers.RmsNorm(x.shape[-1], eps=EPSILON)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(np.array(scale)))
        return norm(torch.from_numpy(np.array(x))).numpy()


def _inputs():
    rng = np.random.default_rng(0)
    # tiny features too: there the epsilon's place (inside the root, not added to it) shows
    x = rng.standard_normal((2, 5, 16)).astype("float32") * np.array([1.0, 1e-3])[:, None, None]
    return x.astype("float32"), (1 + 0.2 * rng.standard_normal(16)).astype("float32")


def test_the_rms_norm_is_timms_in_float32():
    x, scale = _inputs()
    norm = token_norm("rms", EPSILON)
    norm.build(x.shape)
    norm.scale.assign(scale)
    theirs = _timm_rms_norm(x, scale)
    # float32 rounding of a mean of 16 squares and one rsqrt: a few ulps of the output
    np.testing.assert_allclose(np.asarray(norm(x)), theirs, rtol=1e-6, atol=1e-6)
    # where the epsilon sits matters at the small inputs: x / (sqrt(mean) + eps) is 0.3% off
    small = x[1]
    wrong = small / (np.sqrt((small ** 2).mean(-1, keepdims=True)) + EPSILON) * scale
    assert np.abs(wrong - theirs[1]).max() > 1e-3


def test_the_rms_norm_computes_in_float32_under_bfloat16():
    """Its statistics in float32, as timm's under autocast: under a mixed_bfloat16 policy the
    output is timm's float32 RmsNorm of the same (bfloat16) input and scale (Keras casts every
    weight to the compute dtype), rounded to bfloat16 once: within one bfloat16 step, 2 ** -8
    relative (statistics in bfloat16 would add several such roundings)."""
    x, scale = _inputs()
    bf16 = lambda a: np.asarray(keras.ops.cast(keras.ops.cast(a, "bfloat16"), "float32"))  # noqa: E731
    x = bf16(x)
    norm = token_norm("rms", EPSILON, dtype="mixed_bfloat16")
    norm.build(x.shape)
    norm.scale.assign(scale)
    assert norm.scale.dtype == "float32"
    ours = np.asarray(keras.ops.cast(norm(x), "float32"))
    np.testing.assert_allclose(ours, bf16(_timm_rms_norm(x, bf16(scale))), rtol=2 ** -8, atol=0)


def test_an_unknown_norm_is_refused_in_one_line():
    with pytest.raises(keras_vit.ArgumentError, match="norm must be one of layer, rms"):
        token_norm("batch", EPSILON)


def test_a_block_without_projection_biases_has_no_bias_weight():
    block = keras_vit.TransformerBlock(2, 16, qkv_bias="none", norm="rms", proj_bias=False,
                                       activation="swiglu", split_gate=True)
    block(np.zeros((1, 3, 8), "float32"))
    assert sorted(w.path.split("/", 1)[1] for w in block.weights) == [
        "LayerNorm_0/scale", "LayerNorm_2/scale", "MlpBlock_3/Dense_0/kernel",
        "MlpBlock_3/Dense_1/kernel", "MlpBlock_3/Dense_value/kernel",
        "MultiHeadDotProductAttention_1/out_kernel", "MultiHeadDotProductAttention_1/qkv_kernel"]
