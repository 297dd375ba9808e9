"""What recomputing the elementwise steps saves in a JAX training step: XLA's buffer assignment
(temporaries, peak) and the step's time, with and without, interleaved in one process.

    KERAS_BACKEND=jax python -m benchmarks.train_step_memory            # ViT-B/16 224, batch 8
    KERAS_BACKEND=jax python -m benchmarks.train_step_memory --tiny     # a 2-block ViT at 32 px

The step is Keras' own `train_step` (SGD, softmax cross-entropy), jitted as `model.fit` jits it,
of the model's mixed_bfloat16 copy (`--precision bfloat16`, the default) or the model itself
(`float32`); keras_vit/layers/recompute.py says what is recomputed and why. Memory is read from
the compiled program, so it is exact on any device; the times are the fastest of `--repeats`
interleaved rounds on this machine, for the ratio only."""

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

MIB = 2 ** 20


def model_for(variant_name, tiny, image_size, precision):
    """A random ViT with a 10-class head, as `precision` trains it."""
    import keras_vit
    from keras_vit.runtime.precision import bfloat16_model
    from keras_vit.variants import get_variant

    variant = get_variant(variant_name)
    if tiny:
        variant = dataclasses.replace(variant, name="tiny", depth=2, width=32, heads=2,
                                      mlp_dim=64, patch_size=8)
    model = keras_vit.ViT(variant, image_size=image_size, classes=10)
    return bfloat16_model(model) if precision == "bfloat16" else model


def compiled_step(model, images, labels):
    """(Keras' train step jitted with its state donated, its compiled program, that state)."""
    import jax
    import keras

    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(images, labels)  # builds the optimizer's and metrics' variables
    state = tuple([v.value for v in variables] for variables in (
        model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
        model.metrics_variables))
    step = jax.jit(model.train_step, donate_argnums=0)
    return step, step.lower(state, (images, labels)).compile(), state


def measure(args):
    """{"with": row, "without": row}: each row's XLA memory in MiB and fastest step in ms."""
    import jax
    import keras

    from benchmarks.device_memory import xla_peak
    from keras_vit.layers import recompute

    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    labels = rng.integers(0, 10, args.batch)
    arms = {}
    for arm, enabled in (("with", True), ("without", False)):
        recompute.enabled = enabled  # read while the step is traced, below
        try:
            keras.utils.set_random_seed(0)
            model = model_for(args.variant, args.tiny, args.image_size, args.precision)
            arms[arm] = compiled_step(model, images, labels)
        finally:
            recompute.enabled = True
    rows = {arm: {"memory": {key: value / MIB for key, value in xla_peak(compiled).items()
                             if key.endswith("bytes")}, "step_ms": []}
            for arm, (_, compiled, _) in arms.items()}
    states = {arm: state for arm, (_, _, state) in arms.items()}
    for _ in range(1 + args.repeats):  # the first round compiles the step: left out
        for arm, (step, _, _) in arms.items():
            started = time.perf_counter()
            _, states[arm] = jax.block_until_ready(step(states[arm], (images, labels)))
            rows[arm]["step_ms"].append(1000 * (time.perf_counter() - started))
    for row in rows.values():
        row["fastest_ms"] = min(row["step_ms"][1:])
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_step_memory",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="B/16")
    parser.add_argument("--image-size", type=int, default=None, help="224, or 32 with --tiny")
    parser.add_argument("--batch", type=int, default=None, help="8, or 2 with --tiny")
    parser.add_argument("--precision", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds")
    parser.add_argument("--tiny", action="store_true", help="a 2-block width-32 ViT at 32 px")
    args = parser.parse_args(argv)
    import keras

    if keras.backend.backend() != "jax":
        sys.exit("benchmarks.train_step_memory measures XLA's buffer assignment of a JAX step: "
                 "run it with KERAS_BACKEND=jax.")
    args.image_size = args.image_size or (32 if args.tiny else 224)
    args.batch = args.batch or (2 if args.tiny else 8)
    rows = measure(args)
    result = {"command": "python -m benchmarks.train_step_memory " + " ".join(argv or sys.argv[1:]),
              "cpus": os.cpu_count(), "rows": rows,
              "temporaries_ratio": rows["with"]["memory"]["temporary_bytes"]
              / rows["without"]["memory"]["temporary_bytes"],
              "step_time_ratio": rows["with"]["fastest_ms"] / rows["without"]["fastest_ms"]}
    print(f"{'recompute':<10} {'temporaries MiB':>16} {'peak MiB':>10} {'fastest step ms':>16}")
    for arm, row in rows.items():
        print(f"{arm:<10} {row['memory']['temporary_bytes']:>16.1f} "
              f"{row['memory']['peak_bytes']:>10.1f} {row['fastest_ms']:>16.1f}")
    print(json.dumps({key: result[key] for key in ("temporaries_ratio", "step_time_ratio")}))
    return result


if __name__ == "__main__":
    main()
