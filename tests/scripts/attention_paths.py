"""Run as a script under any KERAS_BACKEND: keras_vit's attention, both paths
(keras.ops.dot_product_attention and the explicit matmul-softmax-matmul), in float32
and bfloat16, against attention written out in NumPy float64. Prints one JSON line
(RESULT ...) of the largest absolute errors."""

import json

import keras
import numpy as np

from keras_vit.layers import MultiHeadSelfAttention, transformer
from keras_vit.layers.transformer import use_fused_attention
from keras_vit.models import ViT
from keras_vit.variants import Variant

BATCH, TOKENS, WIDTH, HEADS = 2, 17, 64, 4
rng = np.random.default_rng(0)
x = rng.standard_normal((BATCH, TOKENS, WIDTH))
weights = {"qkv_kernel": rng.standard_normal((WIDTH, 3 * WIDTH)) * 0.2,
           "qkv_bias": rng.standard_normal(3 * WIDTH) * 0.1,
           "out_kernel": rng.standard_normal((WIDTH, WIDTH)) * 0.2,
           "out_bias": rng.standard_normal(WIDTH) * 0.1}


def reference(x, first_token_only=False):
    """Multi-head self-attention by hand, float64: (output, softmax weights)."""
    head_dim = WIDTH // HEADS
    q, k, v = np.split(x @ weights["qkv_kernel"] + weights["qkv_bias"], 3, axis=-1)
    if first_token_only:
        q = q[:, :1]

    def heads(t):
        return t.reshape(BATCH, -1, HEADS, head_dim).transpose(0, 2, 1, 3)
    scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    attended = (probabilities @ heads(v)).transpose(0, 2, 1, 3).reshape(BATCH, -1, WIDTH)
    return attended @ weights["out_kernel"] + weights["out_bias"], probabilities


calls = []
original = transformer.ops.dot_product_attention


def counting(*args, **kwargs):
    calls.append(1)
    return original(*args, **kwargs)


transformer.ops.dot_product_attention = counting  # to see which path ran

result = {"backend": keras.backend.backend(), "auto": use_fused_attention()}
for dtype in ("float32", "bfloat16"):
    layer = MultiHeadSelfAttention(HEADS, dtype=dtype)
    layer.build((BATCH, TOKENS, WIDTH))
    for variable in layer.weights:
        variable.assign(weights[variable.name].astype(np.float32))
    inputs = keras.ops.convert_to_tensor(x.astype(np.float32), dtype=dtype)
    for first in (False, True):
        expected, expected_weights = reference(x, first)
        outputs = {}
        for fused in (True, False):
            layer.fused_attention = fused
            calls.clear()
            out = keras.ops.convert_to_numpy(keras.ops.cast(
                layer(inputs, first_token_only=first), "float32"))
            outputs[fused] = out
            key = f"{dtype} {'first_token_only' if first else 'all'} {'fused' if fused else 'explicit'}"
            result[key] = {"max_abs_error": float(np.abs(out - expected).max()),
                           "fused_calls": len(calls)}
        result[f"{dtype} {'first_token_only' if first else 'all'}"] = {
            "paths_max_abs_diff": float(np.abs(outputs[True] - outputs[False]).max()),
            "output_scale": float(np.abs(expected).max())}
        # The analysis path: weights requested -> the explicit path, whatever the setting.
        layer.fused_attention = True
        calls.clear()
        out, probabilities = layer(inputs, first_token_only=first, return_attention_scores=True)
        result[f"{dtype} {'first_token_only' if first else 'all'} scores"] = {
            "max_abs_error": float(np.abs(keras.ops.convert_to_numpy(
                keras.ops.cast(out, "float32")) - expected).max()),
            "weights_max_abs_error": float(np.abs(keras.ops.convert_to_numpy(
                keras.ops.cast(probabilities, "float32")) - expected_weights).max()),
            "fused_calls": len(calls)}

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
print("RESULT " + json.dumps(result))
