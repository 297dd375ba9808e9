"""Run as a script under any KERAS_BACKEND: keras_vit's attention, both paths
(keras.ops.dot_product_attention and the explicit matmul-softmax-matmul), in float32
and bfloat16, against attention written out in NumPy float64, with an error bound
derived for each output from the inputs' magnitudes. Prints one JSON line (RESULT ...)."""

import json

import keras
import numpy as np

from keras_vit.layers import MultiHeadSelfAttention, transformer
from keras_vit.layers.transformer import use_fused_attention
from keras_vit.models import ViT
from keras_vit.variants import Variant

BATCH, TOKENS, WIDTH, HEADS = 2, 17, 64, 4
HEAD_DIM = WIDTH // HEADS  # 16: the scale 1/4 is a power of two, so scaling rounds nothing
rng = np.random.default_rng(0)
x = rng.standard_normal((BATCH, TOKENS, WIDTH))
weights = {"qkv_kernel": rng.standard_normal((WIDTH, 3 * WIDTH)) * 0.2,
           "qkv_bias": rng.standard_normal(3 * WIDTH) * 0.1,
           "out_kernel": rng.standard_normal((WIDTH, WIDTH)) * 0.2,
           "out_bias": rng.standard_normal(WIDTH) * 0.1}

# Unit roundoff u of round-to-nearest: half the spacing of the numbers just above 1.
# bfloat16 keeps 8 significant bits (7 stored, 1 implicit): u = 2^-8; float32 keeps 24.
UNIT_ROUNDOFF = {"bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}


def heads(t):
    """(batch, tokens, width) -> (batch, heads, tokens, head_dim)."""
    return t.reshape(BATCH, -1, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)


def merge(t):
    """(batch, heads, tokens, head_dim) -> (batch, tokens, width)."""
    return t.transpose(0, 2, 1, 3).reshape(BATCH, -1, WIDTH)


def reference(x, weights, first_token_only=False):
    """Multi-head self-attention by hand, float64: (output, softmax weights)."""
    q, k, v = np.split(x @ weights["qkv_kernel"] + weights["qkv_bias"], 3, axis=-1)
    if first_token_only:
        q = q[:, :1]
    scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(HEAD_DIM)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    attended = merge(probabilities @ heads(v))
    return attended @ weights["out_kernel"] + weights["out_bias"], probabilities


def gamma(n, u):
    """Higham's gamma_n = n u / (1 - n u): the relative error of n roundings in a row."""
    assert n * u < 1
    return n * u / (1 - n * u)


def error_bound(x, weights, first_token_only, u, u_acc):
    """Elementwise bounds on |computed - float64 exact| for (output, softmax weights).

    Forward error analysis, stage by stage, for values of storage precision u (each
    stored intermediate rounded once: |fl(v) - v| <= u |v|) and dot products accumulated
    with unit roundoff u_acc (|fl(a . b) - a . b| <= gamma_n(u_acc) sum |a_i||b_i| for
    length n). Each stage's error E in, its exact value v (float64) out:
      rounding:       E' = E + u (|v| + E)
      product A B:    E' = E_A |B| + |A| E_B + E_A E_B + gamma_n(u_acc) (|A| + E_A)(|B| + E_B)
      softmax:        scores s_j off by d_j, |d_j| <= e_j, scale weight i by
                      exp(d_i) / sum_j p_j exp(d_j), between exp(-e_i) / sum_j p_j exp(e_j)
                      and exp(e_i) / sum_j p_j exp(-e_j); computing it (subtract max, exp,
                      sum of T, divide) adds gamma_{3T+4}(u_acc) relative (T + 4 roundings
                      for the plain algorithm, 2 more per block for a fused kernel's
                      running rescale). The softmax runs in float32 on both paths.
    Rounding an intermediate is an added term, so a path that keeps one in float32 (fused
    kernels keep the scores) or fuses the bias add stays inside the bound; the scale 1/4
    is exact wherever it is applied. The bound holds for either path, on any CPU whose
    accumulator `accumulation_roundoff` measured. It is a worst case (every rounding
    against us): in bfloat16 it sits 50 to 100 times above the errors seen, so a gross
    mistake (no scale, keys and values swapped) exceeds it but a small one may not; the
    float32 check, the same derivation with u = 2^-24, is the sharp one.
    """
    a = np.abs

    def rounded(value, error):
        return error + u * (a(value) + error)

    def product(left, e_left, right, e_right, n):
        return (e_left @ a(right) + a(left) @ e_right + e_left @ e_right
                + gamma(n, u_acc) * ((a(left) + e_left) @ (a(right) + e_right)))

    kernel, bias = weights["qkv_kernel"], weights["qkv_bias"]
    flat = x @ kernel
    e_flat = rounded(flat, product(x, 0 * x, kernel, 0 * kernel, WIDTH))
    qkv = flat + bias
    e_qkv = rounded(qkv, e_flat)
    (q, k, v), (e_q, e_k, e_v) = np.split(qkv, 3, -1), np.split(e_qkv, 3, -1)
    if first_token_only:
        q, e_q = q[:, :1], e_q[:, :1]
    scale = 1 / np.sqrt(HEAD_DIM)
    q, e_q = heads(q) * scale, rounded(heads(q) * scale, heads(e_q) * scale)
    k, e_k, v, e_v = heads(k), heads(e_k), heads(v), heads(e_v)
    kt, e_kt = k.transpose(0, 1, 3, 2), e_k.transpose(0, 1, 3, 2)
    scores = q @ kt
    e_scores = rounded(scores, product(q, e_q, kt, e_kt, HEAD_DIM))
    # In the softmax, subtracting the row max rounds each exponent by u_acc |s - max|.
    shifted = scores - scores.max(-1, keepdims=True)
    e_exponent = e_scores + u_acc * (a(shifted) + e_scores)
    p = np.exp(shifted)
    p /= p.sum(-1, keepdims=True)
    # p~_i / p_i = exp(d_i) / sum_j p_j exp(d_j) with |d_j| <= e_j: between
    # exp(-e_i) / sum_j p_j exp(e_j) and exp(e_i) / sum_j p_j exp(-e_j).
    high = np.exp(e_exponent) / (p * np.exp(-e_exponent)).sum(-1, keepdims=True) - 1
    low = 1 - np.exp(-e_exponent) / (p * np.exp(e_exponent)).sum(-1, keepdims=True)
    moved = np.maximum(high, low)
    e_p = rounded(p, p * moved + p * (1 + moved) * gamma(3 * TOKENS + 4, u_acc))
    attended = p @ v
    e_attended = rounded(attended, product(p, e_p, v, e_v, TOKENS))
    attended, e_attended = merge(attended), merge(e_attended)
    kernel, bias = weights["out_kernel"], weights["out_bias"]
    out = attended @ kernel
    e_out = rounded(out, product(attended, e_attended, kernel, 0 * kernel, WIDTH))
    return rounded(out + bias, e_out), e_p


def accumulation_roundoff(dtype):
    """The unit roundoff of this backend's matmul accumulator for `dtype` inputs.

    [1, 2^-8, 2^-8] x 2048 sums to 2064 (a bfloat16 number) in float32; a bfloat16
    accumulator loses the 2^-8 terms (1 + 2^-8 rounds to 1) and stops at 256 on ones."""
    if dtype == "float32":
        return UNIT_ROUNDOFF["float32"]
    terms = np.tile([1.0, 2.0 ** -8, 2.0 ** -8], 2048)
    exact = terms.sum()
    for shape in ((1, -1), (1, 1, 1, -1)):  # the projections' 2-D and the heads' 4-D matmul
        left = keras.ops.convert_to_tensor(terms.reshape(shape), dtype=dtype)
        right = keras.ops.ones((*left.shape[:-2], left.shape[-1], 1), dtype=dtype)
        if as_float64(keras.ops.matmul(left, right)).item() != exact:
            return UNIT_ROUNDOFF[dtype]
    return UNIT_ROUNDOFF["float32"]


calls, sdpa_calls = [], []


def as_float64(tensor):
    return keras.ops.convert_to_numpy(keras.ops.cast(tensor, "float32")).astype(np.float64)


def worst(error, bound):
    """The largest error, its bound, and the largest error / bound over the elements."""
    return {"max_abs_error": float(error.max()), "max_bound": float(bound.max()),
            "max_ratio": float((error / bound).max())}


def run():
    """The result (a JSON-ready dict). keras.ops.dot_product_attention is counted while it
    runs, to see which path ran, and restored after: in-process callers keep Keras whole."""
    original = transformer.ops.dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    transformer.ops.dot_product_attention = counting
    try:
        if keras.backend.backend() != "torch":
            return _measure()
        # torch: Keras' op must reach torch's fused F.scaled_dot_product_attention
        import torch

        sdpa = torch.nn.functional.scaled_dot_product_attention

        def counting_sdpa(*args, **kwargs):
            sdpa_calls.append(1)
            return sdpa(*args, **kwargs)

        torch.nn.functional.scaled_dot_product_attention = counting_sdpa
        try:
            return _measure()
        finally:
            torch.nn.functional.scaled_dot_product_attention = sdpa
    finally:
        transformer.ops.dot_product_attention = original


def _measure():
    result = {"backend": keras.backend.backend(), "auto": use_fused_attention()}
    for dtype in ("float32", "bfloat16"):
        u_acc = accumulation_roundoff(dtype)
        result[f"{dtype} accumulation_roundoff"] = u_acc
        layer = MultiHeadSelfAttention(HEADS, dtype=dtype)
        layer.build((BATCH, TOKENS, WIDTH))
        for variable in layer.weights:
            variable.assign(weights[variable.name].astype(np.float32))
        inputs = keras.ops.convert_to_tensor(x.astype(np.float32), dtype=dtype)
        # The reference starts from the values the layer holds (x and the weights rounded to
        # `dtype`), so the bound covers the arithmetic, not the rounding of the inputs.
        stored_x = as_float64(inputs)
        stored = {variable.name: as_float64(variable) for variable in layer.weights}
        for first in (False, True):
            expected, expected_weights = reference(stored_x, stored, first)
            bound, weights_bound = error_bound(stored_x, stored, first, UNIT_ROUNDOFF[dtype], u_acc)
            case = f"{dtype} {'first_token_only' if first else 'all'}"
            outputs = {}
            for fused in (True, False):
                layer.fused_attention = fused
                calls.clear()
                sdpa_calls.clear()
                out = keras.ops.convert_to_numpy(keras.ops.cast(
                    layer(inputs, first_token_only=first), "float32"))
                outputs[fused] = out
                result[f"{case} {'fused' if fused else 'explicit'}"] = {
                    **worst(np.abs(out - expected), bound), "fused_calls": len(calls),
                    "torch_sdpa_calls": len(sdpa_calls)}
            result[case] = {"paths_max_abs_diff": float(np.abs(outputs[True] - outputs[False]).max()),
                            "output_scale": float(np.abs(expected).max())}
            # The analysis path: weights requested -> the explicit path, whatever the setting.
            layer.fused_attention = True
            calls.clear()
            out, probabilities = layer(inputs, first_token_only=first, return_attention_scores=True)
            out = keras.ops.convert_to_numpy(keras.ops.cast(out, "float32"))
            probabilities = keras.ops.convert_to_numpy(keras.ops.cast(probabilities, "float32"))
            result[f"{case} scores"] = {
                **worst(np.abs(out - expected), bound), "fused_calls": len(calls),
                "weights": worst(np.abs(probabilities - expected_weights), weights_bound)}

    # A whole (tiny) ViT: every block's attention switched between the paths.
    keras.utils.set_random_seed(0)
    model = ViT(Variant("ViT-tiny_4", width=WIDTH, depth=2, mlp_dim=128, heads=HEADS, patch_size=4),
                image_size=16, classes=10)
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype(np.float32) * 0.1)
    images = rng.uniform(-1, 1, (BATCH, 16, 16, 3)).astype(np.float32)
    logits = {}
    for fused in (True, False):
        for layer in model._flatten_layers():
            if isinstance(layer, MultiHeadSelfAttention):
                layer.fused_attention = fused
        logits[fused] = keras.ops.convert_to_numpy(model(images))
    result["model_max_abs_diff"] = float(np.abs(logits[True] - logits[False]).max())
    result["model_logit_scale"] = float(np.abs(logits[False]).max())
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(run()))
