"""FLOP counts of a ViT and the machine's measured fp32 matrix-multiply peak."""

import time

import numpy as np


def vit_forward_flops(width, depth, mlp_dim, patch_size, image_size, classes=1000, channels=3,
                      class_token_last_block=False):
    """Floating-point operations (2 per multiply-add) of one image's forward pass.

    Counts the matrix multiplies (patch projection, q/k/v, attention scores,
    attention-weighted values, output projection, MLP, head); norms, softmax
    and GELU are a fraction of a percent and left out. ViT-B/16 at 224 gives
    ~35.1 GFLOP (17.56 GMACs). `class_token_last_block=True` counts what a
    class-token keras_vit model executes: its last block projects keys and
    values for every token but computes the query, attention, output
    projection and MLP for the class token alone (~32.7 GFLOP for B/16).
    """
    patches = (image_size // patch_size) ** 2
    tokens = patches + 1

    def block(queries):
        return (2 * tokens * width * width  # keys and values
                + 2 * queries * width * width  # queries and output projection
                + 2 * queries * tokens * width  # scores and weighted values
                + 2 * queries * width * mlp_dim)  # the two MLP layers

    macs = patches * patch_size * patch_size * channels * width
    macs += (depth - 1) * block(tokens) + block(1 if class_token_last_block else tokens)
    macs += width * classes
    return 2 * macs


def tf_gemm_peak(sizes=((2048, 2048, 2048), (1576, 768, 3072)), repeats=5, min_seconds=0.5):
    """Best fp32 GFLOP/s of `tf.linalg.matmul` over `sizes` (m, k, n), with every timing.

    Returns `{"best": float, "runs": {"MxKxN": [GFLOP/s, ...]}}`.
    """
    import tensorflow as tf

    runs = {}
    for m, k, n in sizes:
        a = tf.constant(np.random.default_rng(0).standard_normal((m, k), dtype=np.float32))
        b = tf.constant(np.random.default_rng(1).standard_normal((k, n), dtype=np.float32))
        matmul = tf.function(tf.linalg.matmul)
        matmul(a, b).numpy()
        runs[f"{m}x{k}x{n}"] = [_rate(lambda f=matmul, a=a, b=b: f(a, b).numpy(), 2 * m * k * n,
                                      min_seconds) for _ in range(repeats)]
    return {"best": max(max(r) for r in runs.values()), "runs": runs}


def torch_gemm_peak(sizes=((2048, 2048, 2048), (1576, 768, 3072)), repeats=5, min_seconds=0.5):
    """Best fp32 GFLOP/s of `torch.matmul` over `sizes`, for reference."""
    import torch

    runs = {}
    for m, k, n in sizes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.matmul(a, b)
        runs[f"{m}x{k}x{n}"] = [_rate(lambda a=a, b=b: torch.matmul(a, b), 2 * m * k * n,
                                      min_seconds) for _ in range(repeats)]
    return {"best": max(max(r) for r in runs.values()), "runs": runs}


def tf_gemm_timer(size=(1576, 768, 3072), min_seconds=0.5):
    """A function that times an fp32 `tf.linalg.matmul` of `size` (m, k, n) for
    `min_seconds` and returns (GFLOP/s, GFLOP per CPU-second)."""
    import tensorflow as tf

    m, k, n = size
    a = tf.constant(np.random.default_rng(0).standard_normal((m, k), dtype=np.float32))
    b = tf.constant(np.random.default_rng(1).standard_normal((k, n), dtype=np.float32))
    matmul = tf.function(tf.linalg.matmul)
    matmul(a, b).numpy()

    def timer():
        cpu = time.process_time()
        wall_rate = _rate(lambda: matmul(a, b).numpy(), 2 * m * k * n, min_seconds)
        # _rate ran for wall time w doing wall_rate * w GFLOP; CPU rate is that over CPU time.
        return wall_rate, wall_rate * _last_elapsed[0] / (time.process_time() - cpu)

    return timer


_last_elapsed = [0.0]


def _rate(call, flops, min_seconds):
    count, start = 0, time.perf_counter()
    while True:
        call()
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            _last_elapsed[0] = elapsed
            return count * flops / elapsed / 1e9
