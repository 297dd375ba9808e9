"""The digits main job over several seeds: the held-out accuracy range and the time the docs state.

    python -m benchmarks.digits_seeds                 # seeds 0 1 2, one fresh process each
    python -m benchmarks.digits_seeds --seeds 0 1 2 3 4
    python -m benchmarks.digits_seeds --epochs 2 --seeds $(seq 0 19)   # the tests' shared run
    python -m benchmarks.digits_seeds --epochs 10 --int8 --seeds $(seq 0 9)  # the int8 agreement
    python -m benchmarks.digits_seeds --epochs 10 --int8 tflite onnx openvino --seeds $(seq 0 9)

Runs `keras-vit train --dataset digits --seed S` (the command the README gives, its defaults
otherwise) one seed after another, each in a fresh process in a temporary folder, and prints
one line per seed (accuracy, wall-clock and CPU seconds) and the range, as the README and
docs/fine-tuning.md quote it. The seed changes the initial weights, the shuffling and the
augmentation; the held-out split is fixed (keras_vit.data.SPLIT_SEED). `--epochs 2` is the
shared run the tests read (tests/conftest.py, DIGITS_RUN): the accuracies it prints bound what
a test may assert about that run (TensorFlow's CPU threads make runs of one seed differ too).
`--int8` also exports each run's model as `keras-vit export --quantize int8` does (200
calibration images; TFLite, or the formats it names: onnx, openvino) and prints each file's
top-1 agreement with the float model on the 360 test images: the ranges that
tests/export/test_export_runtimes.py's int8 test quotes for its 99% bound.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_seed(seed, folder, epochs=None):
    """(accuracy, wall seconds, CPU seconds) of one digits run with `seed` (and `epochs`, or the
    command's default)."""
    output = os.path.join(folder, f"seed-{seed}")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "keras_vit.cli", "train", "--dataset", "digits",
                    "--seed", str(seed), "--output", output,
                    *(["--epochs", str(epochs)] if epochs else [])], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(output, "report.json")) as f:
        return json.load(f)["accuracy"], wall, cpu


def int8_agreement(model_file, folder, format_name="tflite"):
    """Top-1 agreement of the int8 `format_name` file of `model_file` with the float model on
    the digits test split, calibrated on 200 training images (`--quantize int8`'s default)."""
    import keras

    from keras_vit.export import quantized
    from keras_vit.runtime.agreement import agreement

    model = keras.saving.load_model(model_file, compile=False)
    calibration, test = quantized.calibration_pixels("digits", model.input_shape[1:3], 200)
    logits = int8_logits(model, format_name, calibration, test, folder)
    return agreement(quantized.keras_logits(model, test), logits)["top1_agreement"]


def int8_logits(model, format_name, calibration, pixels, folder):
    """The logits on `pixels` of `model`'s int8 `format_name` file ("tflite" or "litert":
    export_tflite's; "onnx", "openvino"), written in `folder`, calibrated on `calibration`,
    and run in its runtime."""
    from keras_vit.export import export_tflite, quantized, runtimes

    if format_name in ("tflite", "litert"):
        path = export_tflite(model, os.path.join(folder, "int8.tflite"), quantize="int8",
                             calibration=calibration)
        return quantized.tflite_logits(path, pixels)
    suffix = runtimes.RUNTIME_FORMATS[format_name][0]
    path = getattr(runtimes, f"export_{format_name}")(
        model, os.path.join(folder, "int8" + suffix), quantize="int8", calibration=calibration)
    return runtimes.runtime_logits(format_name, path, pixels)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, help="epochs (default: the command's)")
    parser.add_argument("--int8", nargs="*", choices=("tflite", "onnx", "openvino"),
                        help="also the int8 file's top-1 agreement with the float model, for "
                             "each format named (none named: tflite)")
    args = parser.parse_args(argv)
    formats = (args.int8 or ["tflite"]) if args.int8 is not None else []
    results, agreements = [], {name: [] for name in formats}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            accuracy, wall, cpu = run_seed(seed, folder, args.epochs)
            results.append(accuracy)
            int8 = ""
            for name in formats:
                agreements[name].append(int8_agreement(
                    os.path.join(folder, f"seed-{seed}", "model.keras"), folder, name))
                int8 += f", {name} int8 top-1 agreement {agreements[name][-1]:.4f}"
            print(f"seed {seed}: accuracy {accuracy:.4f}{int8}, {wall:.0f} s wall-clock, "
                  f"{cpu:.0f} s CPU ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})",
                  flush=True)
    print(f"held-out accuracy {min(results):.4f} to {max(results):.4f} over seeds "
          f"{', '.join(map(str, args.seeds))}"
          f"{f' ({args.epochs} epochs)' if args.epochs else ''}")
    for name, measured in agreements.items():
        print(f"{name} int8 top-1 agreement {min(measured):.4f} to {max(measured):.4f}")
    return results


if __name__ == "__main__":
    main()
