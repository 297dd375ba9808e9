"""Which self-attention formulation is fastest on this machine's TensorFlow?

    python -m benchmarks.attention [--batch 8] [--repeats 8]
    KERAS_BACKEND=jax python -m benchmarks.attention --paths   # or torch, tensorflow

`--paths` times keras_vit's layer itself on the current Keras backend, both of
its paths (`keras.ops.dot_product_attention` and the explicit matmul-softmax-
matmul), compiled as the backend compiles (jax.jit, tf.function; torch eager),
forward and forward+backward: the numbers behind `use_fused_attention`.

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


def compiled_paths(layer, backend):
    """name -> function of x for both paths of `layer`, forward and forward+backward."""
    import keras

    def forward(fused):
        def call(x):
            layer.fused_attention = fused  # read while tracing; each path traces once
            return layer(x)
        return call

    functions = {}
    for fused in (True, False):
        name = "dot_product_attention" if fused else "explicit matmul-softmax"
        if backend == "jax":
            import jax

            def loss(variables, x, fused=fused):  # gradient with respect to x and weights
                values = dict(zip((v.path for v in layer.weights), variables))
                with keras.StatelessScope(state_mapping=[(v, values[v.path])
                                                         for v in layer.weights]):
                    return forward(fused)(x).sum()
            grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
            variables = [v.value for v in layer.weights]
            functions[name] = jax.jit(forward(fused))
            functions[f"{name} +backward"] = lambda x, g=grad, v=variables: g(v, x)
        elif backend == "tensorflow":
            import tensorflow as tf

            functions[name] = tf.function(forward(fused))

            @tf.function
            def train_step(x, fused=fused):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    total = tf.reduce_sum(forward(fused)(x))
                return tape.gradient(total, [x, *layer.trainable_variables])
            functions[f"{name} +backward"] = train_step
        else:  # torch, eager
            import torch

            call = forward(fused)

            def no_grad(x, f=call):
                with torch.no_grad():
                    return f(x)

            def with_grad(x, f=call):
                x = x.detach().requires_grad_(True)
                f(x).sum().backward()
                return x.grad
            functions[name], functions[f"{name} +backward"] = no_grad, with_grad
    return functions


def time_paths(args):
    import keras

    from keras_vit.layers import MultiHeadSelfAttention

    backend = keras.backend.backend()
    rng = np.random.default_rng(0)
    x = keras.ops.convert_to_tensor(
        rng.standard_normal((args.batch, args.tokens, args.width), dtype=np.float32))
    layer = MultiHeadSelfAttention(args.heads)
    layer.build(x.shape)
    for variable in layer.weights:
        variable.assign(rng.standard_normal(variable.shape, dtype=np.float32) * 0.05)
    functions = compiled_paths(layer, backend)
    outputs = {name: keras.ops.convert_to_numpy(f(x)) for name, f in functions.items()
               if not name.endswith("backward")}
    error = float(np.abs(np.subtract(*outputs.values())).max())
    if error > 1e-4:
        raise AssertionError(f"the two attention paths differ by {error}")
    for f in functions.values():  # compile, warm up
        f(x)
    cpu = {name: [] for name in functions}
    for _ in range(args.repeats):
        for name, f in functions.items():
            start = time.process_time()
            keras.tree.map_structure(keras.ops.convert_to_numpy, f(x))
            cpu[name].append(time.process_time() - start)
    print(f"backend {backend}, batch {args.batch}, {args.tokens} tokens, width {args.width}, "
          f"{args.heads} heads; paths differ by {error:.1e}; load average "
          f"{os.getloadavg()[0]:.2f}; CPU ms per call, median (min-max)")
    for name, times in cpu.items():
        print(f"  {name:36s} {1e3 * statistics.median(times):8.1f} "
              f"({1e3 * min(times):.1f}-{1e3 * max(times):.1f})")
    return cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=197)
    parser.add_argument("--paths", action="store_true",
                        help="time keras_vit's two attention paths on the current backend")
    args = parser.parse_args(argv)
    if args.paths:
        return time_paths(args)
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
