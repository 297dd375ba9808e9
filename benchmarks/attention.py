"""Which self-attention formulation is fastest on this machine's TensorFlow?

    python -m benchmarks.attention [--batch 8] [--repeats 8]

Times one ViT-B/16 attention sub-layer (197 tokens, width 768, 12 heads) in
five formulations written out here and as keras_vit's own layer, each as a
`tf.function` graph and XLA-compiled, round-robin, in CPU-seconds per call
(robust to other processes sharing the cores). Each formulation's output is
first checked against keras_vit's layer.
"""

import argparse
import math
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np


def formulations(qkv_kernel, qkv_bias, out_kernel, out_bias, heads):
    """name -> function of x `(batch, tokens, D)` returning the attention output."""
    from keras import ops

    width = out_kernel.shape[0]
    head_dim = width // heads
    scale = 1.0 / math.sqrt(head_dim)

    def split(x):  # (batch, tokens, 3, heads, head_dim)
        qkv = ops.matmul(x, qkv_kernel) + qkv_bias
        return ops.reshape(qkv, (ops.shape(x)[0], ops.shape(x)[1], 3, heads, head_dim))

    def project(attended, x):  # (batch, tokens, heads, head_dim) -> (batch, tokens, D)
        return ops.matmul(ops.reshape(attended, ops.shape(x)), out_kernel) + out_bias

    def transposed_matmul(x):  # heads-major: one transpose of the stacked q, k, v; matmul
        qkv = ops.transpose(split(x), (2, 0, 3, 1, 4))
        scores = ops.matmul(qkv[0] * scale, ops.transpose(qkv[1], (0, 1, 3, 2)))
        attended = ops.matmul(ops.softmax(scores, axis=-1), qkv[2])
        return project(ops.transpose(attended, (0, 2, 1, 3)), x)

    def dot_product_attention(x):  # keras.ops, token-major, no transposes written out
        qkv = split(x)
        return project(ops.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]), x)

    def einsum_token_major(x):
        qkv = split(x)
        scores = ops.einsum("bqhd,bkhd->bhqk", qkv[:, :, 0] * scale, qkv[:, :, 1])
        return project(ops.einsum("bhqk,bkhd->bqhd", ops.softmax(scores, axis=-1), qkv[:, :, 2]), x)

    def einsum_heads_major(x):
        qkv = ops.transpose(split(x), (2, 0, 3, 1, 4))
        scores = ops.einsum("bhqd,bhkd->bhqk", qkv[0] * scale, qkv[1])
        return project(ops.einsum("bhqk,bhkd->bqhd", ops.softmax(scores, axis=-1), qkv[2]), x)

    def split_projections(x):  # three (D, heads, head_dim) kernels, the official layout
        kernels = ops.reshape(qkv_kernel, (width, 3, heads, head_dim))
        biases = ops.reshape(qkv_bias, (3, heads, head_dim))
        q, k, v = (ops.einsum("btd,dhe->bhte", x, kernels[:, i]) + ops.expand_dims(biases[i], 1)
                   for i in range(3))
        scores = ops.einsum("bhqe,bhke->bhqk", q * scale, k)
        return project(ops.einsum("bhqk,bhke->bqhe", ops.softmax(scores, axis=-1), v), x)

    return {f.__name__: f for f in (transposed_matmul, dot_product_attention, einsum_token_major,
                                    einsum_heads_major, split_projections)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=197)
    args = parser.parse_args(argv)
    import tensorflow as tf

    from keras_vit.layers import MultiHeadSelfAttention

    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((args.batch, args.tokens, args.width), dtype=np.float32))
    layer = MultiHeadSelfAttention(args.heads)
    layer.build(x.shape)
    for variable in layer.weights:
        variable.assign(rng.standard_normal(variable.shape, dtype=np.float32) * 0.05)
    reference = layer(x).numpy()
    functions = {f"keras_vit layer{' (xla)' if jit else ''}": tf.function(layer, jit_compile=jit)
                 for jit in (False, True)}
    for name, f in formulations(layer.qkv_kernel, layer.qkv_bias, layer.out_kernel, layer.out_bias,
                                args.heads).items():
        for jit in (False, True):
            compiled = tf.function(f, jit_compile=jit)
            error = np.abs(compiled(x).numpy() - reference).max()
            if error > 1e-4:
                raise AssertionError(f"{name} differs from MultiHeadSelfAttention by {error}")
            functions[f"{name}{' (xla)' if jit else ''}"] = compiled
    cpu = {name: [] for name in functions}
    for _ in range(args.repeats):
        for name, f in functions.items():
            start = time.process_time()
            f(x).numpy()
            cpu[name].append(time.process_time() - start)
    flop = 2 * args.batch * (4 * args.tokens * args.width ** 2 + 2 * args.tokens ** 2 * args.width)
    print(f"batch {args.batch}, load average {os.getloadavg()[0]:.2f}; CPU ms per call, median (min-max)")
    for name, times in cpu.items():
        median = statistics.median(times)
        print(f"  {name:28s} {1e3 * median:7.1f} ({1e3 * min(times):.1f}-{1e3 * max(times):.1f})"
              f"  {flop / median / 1e9:5.1f} GFLOP per CPU-s")


if __name__ == "__main__":
    main()
