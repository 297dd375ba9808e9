"""Peak training memory of LoRA rank 4 against full fine-tuning, at a real size: ViT-B/16, 224 px.

    python -m benchmarks.lora_memory --output-dir docs/images   # B/16, 224 px, batch 8, 3 updates
    python -m benchmarks.lora_memory --tiny                     # a 2-block width-32 ViT at 32 px

The transfer benchmark's demo ViT (138,629 parameters) cannot show what LoRA saves: about
1 MiB, below what the allocator moves a resident set by. Here each arm trains a ViT-B/16
(86 million parameters) from random weights (no download) with a new 10-class zero head, on
random 224 px images, batch 8, `--steps` weight updates:

    full    every weight trains
    lora4   `keras_vit.enable_lora(model, 4)`: rank-4 factors of query and value, and the head
    lora4-all  rank-4 factors of every projection (query, key, value, the attention's output,
            the MLP's two layers: the transfer benchmark's lora4-all), and the head

with what `keras_vit.train` compiles: the model `train` builds (`training.run.build_model`),
the `finetune` recipe's optimizer from `make_optimizer` (SGD momentum 0.9, global-norm
clipping at 1, warmup and cosine), categorical cross-entropy on logits, `build_training_state`
before `fit`; the graph (not XLA), and no gradient accumulation (each batch of 8 is one
update: accumulation would add one more float32 copy of every trainable weight).

Each arm runs in a fresh process, so one arm's freed-but-kept memory cannot hide the other's
peak. Memory is the kernel's resident-set high-water mark (VmHWM, `keras_vit.memory`),
restarted after the imports: "peak above imports" is what building and training the model
added; "after build" is the resident set once the model and its optimizer's state exist
(before the first update), "peak" the process's high-water mark over the whole arm.

The expected saving, by arithmetic: full fine-tuning holds, for every weight LoRA freezes,
a float32 momentum slot from the build on, and while it trains a float32 gradient too (all of
them at once: the global-norm clip needs every gradient before any update), 8 bytes a
weight; LoRA adds its factors (their values, slots and gradients: 12 bytes each). That is a
lower bound of the training peak's saving, not its value: the clip multiplies every
gradient by its scale into a new tensor (Keras' `clip_by_global_norm`), the momentum update
makes temporaries of each variable's size, and the backward pass keeps what a frozen
kernel's own gradient would need (its layer's input) only where something else needs it.
After the build, before any update, only the slots differ, so that difference is stated
and measured on its own: it checks the measurement against the arithmetic.
"""

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time

ARMS = ("full", "lora4", "lora4-all")
LORA_RANK = 4
# The LoRA arms: enable_lora's default projections (query, value), and every projection.
LORA_ARMS = ("lora4", "lora4-all")
CLASSES = 10
# float32 bytes a frozen weight does not need: its gradient and its SGD momentum slot.
SAVED_BYTES_PER_FROZEN_WEIGHT = 4 + 4
# float32 bytes a LoRA factor adds: its value, gradient and momentum slot.
ADDED_BYTES_PER_FACTOR = 4 * 3


@dataclasses.dataclass(frozen=True)
class Size:
    variant: str
    image_size: int
    batch_size: int


REAL = Size("B/16", 224, 8)
TINY = Size("tiny", 32, 4)


def variant_of(size):
    """The size's ViT variant: a catalogue name, or "tiny", the demo shrunk to 2 blocks of 32."""
    from keras_vit.variants import get_variant

    if size.variant != "tiny":
        return get_variant(size.variant)
    return dataclasses.replace(get_variant("demo"), name="tiny", depth=2, width=32, heads=2,
                               mlp_dim=64, patch_size=8)


def measure(arm, size, steps, seed=0):
    """Builds and trains `arm` at `size` for `steps` updates in this process; returns its row.
    Meant for a fresh process (`main` starts one per arm): the peaks are the process's."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_vit.lora import LORA_TARGETS, enable_lora, parameter_counts
    from keras_vit.memory import peak_resident_bytes, reset_peak_resident, resident_bytes
    from keras_vit.training.prebuild import build_training_state
    from keras_vit.training.recipes import get_recipe, make_optimizer
    from keras_vit.training.run import build_model

    imports = resident_bytes()
    reset = reset_peak_resident()
    recipe = get_recipe("finetune", image_size=size.image_size, batch_size=size.batch_size,
                        global_batch_size=None, steps=steps)
    model = build_model(variant_of(size), None, size.image_size, CLASSES)
    if arm == "lora4":
        enable_lora(model, LORA_RANK)
    elif arm == "lora4-all":
        enable_lora(model, LORA_RANK, LORA_TARGETS)
    model.compile(optimizer=make_optimizer(recipe, steps + 1),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    build_training_state(model)
    built = resident_bytes()
    rng = np.random.default_rng(seed)
    images = rng.uniform(-1, 1, (size.batch_size, size.image_size, size.image_size, 3))
    labels = keras.ops.one_hot(rng.integers(0, CLASSES, size.batch_size), CLASSES)
    data = tf.data.Dataset.from_tensors((images.astype("float32"), labels)).repeat(steps)
    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds, self.started = [], None

        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)

    timer = StepTimer()
    model.fit(data, epochs=1, verbose=0, callbacks=[timer], shuffle=False)
    times = sorted(timer.seconds)
    peak = peak_resident_bytes()
    counts = parameter_counts(model)
    return {"arm": arm, "variant": size.variant, "image_size": size.image_size,
            "batch_size": size.batch_size, "steps": steps,
            "trainable": counts["trainable"], "total": counts["total"],
            "optimizer_iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
            "imports_bytes": imports, "after_build_bytes": built, "peak_bytes": peak,
            "peak_above_imports_bytes": peak - imports if reset else None,
            "step_seconds": times[len(times) // 2] if times else None}


def expected_saving_bytes(full, lora):
    """The arithmetic's saving of `lora` over `full` (rows of `measure`), in bytes:
    {"state": what the model and optimizer hold between updates, a momentum slot for each
    weight LoRA freezes, less each factor's value and slot; "training": that and each frozen
    weight's gradient, less each factor's}. LoRA's trainable parameters are its factors and
    the head, which trains in both arms."""
    factors = lora["total"] - full["total"]
    frozen = lora["total"] - lora["trainable"]
    return {"state": 4 * frozen - 8 * factors,
            "training": frozen * SAVED_BYTES_PER_FROZEN_WEIGHT - factors * ADDED_BYTES_PER_FACTOR}


def compare(rows, arm="lora4"):
    """The saving of LoRA arm `arm` over full fine-tuning, from the rows of the arms: expected
    ("expected_state_bytes", "expected_saving_bytes") and measured (after the build:
    "measured_saving_after_build_bytes"; the peak above the imports: "measured_saving_bytes";
    the process's peak: "measured_saving_of_peak_bytes")."""
    by_arm = {row["arm"]: row for row in rows}
    full, lora = by_arm["full"], by_arm[arm]
    above = None if None in (full["peak_above_imports_bytes"], lora["peak_above_imports_bytes"]) \
        else full["peak_above_imports_bytes"] - lora["peak_above_imports_bytes"]
    expected = expected_saving_bytes(full, lora)
    return {"expected_state_bytes": expected["state"],
            "expected_saving_bytes": expected["training"],
            "measured_saving_after_build_bytes": full["after_build_bytes"]
            - lora["after_build_bytes"],
            "measured_saving_bytes": above,
            "measured_saving_of_peak_bytes": full["peak_bytes"] - lora["peak_bytes"]}


def _mib(value):
    return "–" if value is None else f"{value / 2**20:,.0f}"


def markdown(rows, savings):
    """The table docs/fine-tuning.md shows, and each LoRA arm's saving (`savings`: {arm:
    `compare(rows, arm)`}), expected and measured."""
    lines = ["| arm | trainable params | total params | after build MiB | peak MiB | "
             "peak above imports MiB | s/step |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        step = "–" if row["step_seconds"] is None else f"{row['step_seconds']:.2f}"
        lines.append(f"| {row['arm']} | {row['trainable']:,} | {row['total']:,} | "
                     f"{_mib(row['after_build_bytes'])} | {_mib(row['peak_bytes'])} | "
                     f"{_mib(row['peak_above_imports_bytes'])} | {step} |")
    for arm, comparison in savings.items():
        lines += ["", f"{arm}'s saving after the build (the momentum slots of the frozen "
                      f"weights): expected {_mib(comparison['expected_state_bytes'])} MiB, "
                      f"measured {_mib(comparison['measured_saving_after_build_bytes'])} MiB. Of "
                      f"the training peak (slots and gradients, 8 bytes a frozen weight): "
                      f"expected at least {_mib(comparison['expected_saving_bytes'])} MiB, "
                      f"measured {_mib(comparison['measured_saving_bytes'])} MiB of the peak "
                      f"above imports, {_mib(comparison['measured_saving_of_peak_bytes'])} MiB "
                      "of the process's peak."]
    return "\n".join(lines)


def run_arm(arm, tiny, steps):
    """`measure(arm)` in a fresh Python process; its row."""
    command = [sys.executable, "-m", "benchmarks.lora_memory", "--arm", arm, "--steps", str(steps)]
    done = subprocess.run(command + (["--tiny"] if tiny else []), capture_output=True, text=True,
                          check=False)
    if done.returncode:
        raise SystemExit(f"the {arm} arm failed (exit {done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_outputs(result, output_dir):
    from keras_vit.atomic import atomic_open

    os.makedirs(output_dir, exist_ok=True)
    with atomic_open(os.path.join(output_dir, "lora_memory.json")) as f:
        json.dump(result, f, indent=1)
    with atomic_open(os.path.join(output_dir, "lora_memory.md")) as f:
        f.write(result["markdown"] + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lora_memory",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a 2-block width-32 ViT at 32 px")
    parser.add_argument("--steps", type=int, default=3, help="weight updates of each arm")
    parser.add_argument("--arm", choices=ARMS, help="run this arm here and print its row "
                                                    "(what each fresh process does)")
    parser.add_argument("--output-dir", help="write lora_memory.json and lora_memory.md here")
    args = parser.parse_args(argv)
    size = TINY if args.tiny else REAL
    if args.arm:
        print(json.dumps(measure(args.arm, size, args.steps)))
        return None
    started = time.perf_counter()
    rows = [run_arm(arm, args.tiny, args.steps) for arm in ARMS]
    savings = {arm: compare(rows, arm) for arm in LORA_ARMS}
    result = {"command": "python -m benchmarks.lora_memory " + " ".join(argv or sys.argv[1:]),
              "size": dataclasses.asdict(size),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
              "seconds": time.perf_counter() - started, "arms": rows, "savings": savings,
              "markdown": markdown(rows, savings)}
    if args.output_dir:
        write_outputs(result, args.output_dir)
    print(result["markdown"])
    return result


if __name__ == "__main__":
    main()
