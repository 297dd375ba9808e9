"""float32, float16, dynamic and int8 TFLite files of random-weight ViTs: speed, size, agreement.

    python -m benchmarks.quantized                      # S/16 and B/16 at 224
    python -m benchmarks.quantized --variants S/16 --reps 5

For each variant, `keras_vit.export_tflite` writes the float32 file and the three quantised
ones (int8 calibrated on `--calibration-images` random pixel images); then every file runs
batch 1 on the same image `--reps` rounds, the files interleaved within each round so that a
change in the machine's load hits all alike; the median latency of each is reported, and
its ratio to float32's from the same run. Agreement: top-1 agreement and largest logit
difference with the Keras float model on `--images` other random images (the
zero-initialised head gets random weights first). Random weights give logits close
together, so top-1 agreement is a harsh test here (any rounding can flip a near-tie); the
logit difference is the steadier number.
"""

import argparse
import os
import statistics
import tempfile
import time

MODES = ("float32", "float16", "dynamic", "int8")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["S/16", "B/16"])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--calibration-images", type=int, default=8)
    args = parser.parse_args(argv)
    print("| variant | export | size | of float32 | latency (batch 1, median) | of float32 "
          "| top-1 agreement | max logit difference |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.variants:
        for row in measure(name, args.image_size, args.reps, args.images,
                           args.calibration_images):
            print("| " + " | ".join(row) + " |", flush=True)


def measure(name, image_size, reps, count, calibration_count):
    """Table rows (strings) for variant `name`."""
    import keras
    import numpy as np

    import keras_vit
    from keras_vit.export import export_tflite, quantized
    from keras_vit.export.quantized import litert_interpreter
    from keras_vit.runtime.agreement import agreement

    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(name, image_size=image_size, classes=1000)
    rng = np.random.default_rng(0)
    # The head starts at zero (the paper's): all-zero logits would agree trivially, so it
    # gets random weights, scaled to give logits of about unit spread.
    head = model.get_layer("head")
    head.kernel.assign(rng.normal(0, 1 / np.sqrt(head.kernel.shape[0]), head.kernel.shape))
    shape = (image_size, image_size, 3)
    calibration = rng.uniform(0, 255, (calibration_count, *shape)).astype(np.float32)
    images = rng.uniform(0, 255, (count, *shape)).astype(np.float32)
    reference = quantized.keras_logits(model, images, batch_size=8)
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for mode in MODES:
            paths[mode] = export_tflite(model, os.path.join(folder, f"{mode}.tflite"),
                                        quantize=None if mode == "float32" else mode,
                                        calibration=calibration)
        runners = {mode: litert_interpreter(path).get_signature_runner()
                   for mode, path in paths.items()}
        measured = {mode: agreement(reference, quantized.tflite_logits(path, images))
                    for mode, path in paths.items()}
        times = {mode: [] for mode in MODES}
        one = images[:1]
        for runner in runners.values():
            runner(images=one)  # warm-up
        for _ in range(reps):
            for mode, runner in runners.items():  # interleaved
                start = time.perf_counter()
                runner(images=one)
                times[mode].append(time.perf_counter() - start)
        sizes = {mode: os.path.getsize(path) for mode, path in paths.items()}
    latency = {mode: statistics.median(values) for mode, values in times.items()}
    return [[name, mode, f"{sizes[mode] / 2 ** 20:.1f} MiB", f"{sizes[mode] / sizes['float32']:.1%}",
             f"{latency[mode] * 1e3:.0f} ms", f"{latency[mode] / latency['float32']:.2f}",
             f"{measured[mode]['top1_agreement']:.3f}",
             f"{measured[mode]['max_logit_difference']:.3f}"] for mode in MODES]


if __name__ == "__main__":
    main()
