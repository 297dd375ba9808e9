"""What each of keras_vit's fast paths is worth: ViT-B/16 with them switched on one by one.

    python -m benchmarks.fast_paths [--repeats 5] [--batch 8] [--quick]

Three models share one set of weights and differ only in how their encoder
blocks compute, timed round-robin in one process (TensorFlow graph mode):

1. "plain": the textbook Keras formulation, kept here as the baseline:
   projections on 3-D `(batch, tokens, D)` tensors with `+ bias`, and the
   stacked query/key/value tensor split by indexing.
2. "fused projections": keras_vit's block run on every token: 2-D projections
   whose `ops.add` bias TensorFlow fuses into the matmul (and the GELU), and
   `ops.split` for query/key/value (its gradient is one concat).
3. "keras_vit": as built by `keras_vit.ViT`, whose last block also computes
   the class token alone.

Each model's logits are first checked against the others.
"""

import argparse
import math
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from benchmarks import candidates as cands


def plain_block_call(block, x):
    """The baseline block: 3-D projections with `+ bias`, qkv split by indexing."""
    from keras import ops

    attention, mlp = block.attention, block.mlp
    batch, tokens, width = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
    heads, head_dim = attention.num_heads, attention.head_dim
    qkv = ops.matmul(block.norm_0(x), attention.qkv_kernel) + attention.qkv_bias
    qkv = ops.transpose(ops.reshape(qkv, (batch, tokens, 3, heads, head_dim)), (2, 0, 3, 1, 4))
    scores = ops.matmul(qkv[0] / math.sqrt(head_dim), ops.transpose(qkv[1], (0, 1, 3, 2)))
    attended = ops.matmul(ops.softmax(scores, axis=-1), qkv[2])
    attended = ops.reshape(ops.transpose(attended, (0, 2, 1, 3)), (batch, tokens, width))
    x = x + ops.matmul(attended, attention.out_kernel) + attention.out_bias
    hidden = ops.gelu(ops.matmul(block.norm_2(x), mlp.dense_0.kernel) + mlp.dense_0.bias,
                      approximate=block.approximate_gelu)
    return x + ops.matmul(hidden, mlp.dense_1.kernel) + mlp.dense_1.bias


def forward_through(model, block_call):
    """`images -> logits` through `model`'s own layers, each block computed by `block_call`."""
    import keras_vit

    def forward(images, training=False):
        x = images
        for layer in model.layers[1:]:
            x = block_call(layer, x) if isinstance(layer, keras_vit.TransformerBlock) else layer(x)
        return x

    return forward


class _AsModel:
    """The `model(images, training=...)` and `trainable_variables` the candidates need."""

    def __init__(self, forward, variables):
        self._forward, self.trainable_variables = forward, variables

    def __call__(self, images, training=False):
        return self._forward(images, training=training)


def variants(arch):
    """name -> model-like object; all three share one keras_vit model's weights."""
    import keras_vit

    variant = keras_vit.Variant("bench", arch.width, arch.depth, arch.mlp_dim, arch.heads,
                                arch.patch_size)
    model = keras_vit.ViT(variant, image_size=arch.image_size, classes=arch.classes)
    rng = np.random.default_rng(0)
    model.get_layer("head").kernel.assign(  # the head starts at zero: make the logits say something
        rng.normal(0, 0.02, model.get_layer("head").kernel.shape).astype("float32"))
    variables = model.trainable_variables
    return {
        "plain": _AsModel(forward_through(model, plain_block_call), variables),
        "fused projections": _AsModel(forward_through(model, lambda block, x: block(x)), variables),
        "keras_vit": model,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fast_paths",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="tiny model, one repeat: checks it works")
    args = parser.parse_args(argv)
    arch = cands.TINY if args.quick else cands.VIT_B16
    repeats = 1 if args.quick else args.repeats
    models = variants(arch)
    images, _ = cands._random_batch(arch, 2)
    reference = np.asarray(models["keras_vit"](images))
    for name, model in models.items():
        error = float(np.abs(np.asarray(model(images)) - reference).max())
        if error > 1e-4 * max(1.0, float(np.abs(reference).max())):
            raise AssertionError(f"{name} differs from keras_vit by {error}")
    candidates = [cands._keras_candidate(name, model, arch, "graph") for name, model in models.items()]
    results = {}
    for kind in ("infer", "train"):
        for candidate in candidates:
            getattr(candidate, kind)(args.batch)  # trace and warm up
        rates = {c.name: [] for c in candidates}
        for _ in range(repeats):
            for candidate in candidates:
                start = time.perf_counter()
                getattr(candidate, kind)(args.batch)
                rates[candidate.name].append(args.batch / (time.perf_counter() - start))
        results[kind] = {name: statistics.median(r) for name, r in rates.items()}
        spread = {name: (min(r), max(r)) for name, r in rates.items()}
        base = results[kind]["plain"]
        print(f"{'inference' if kind == 'infer' else 'training'}, batch {args.batch}, "
              f"{repeats} round-robin repeats, load average {os.getloadavg()[0]:.2f}:")
        for name, rate in results[kind].items():
            print(f"  {name:18s} {rate:6.2f} images/s ({spread[name][0]:.2f}-{spread[name][1]:.2f})"
                  f"  {rate / base:.2f}x plain")
    return results


if __name__ == "__main__":
    main()
