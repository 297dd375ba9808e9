"""int8 agreement of ViT-S/16 with random weights: what the number measures, head by head.

    python -m benchmarks.s16_int8                      # ONNX, OpenVINO and LiteRT, both heads
    python -m benchmarks.s16_int8 --formats onnx       # one runtime (each needs ~10 GB)
    python -m benchmarks.s16_int8 --tiny               # two blocks of width 64 at 32 px (tests)

A random-weight model's logits are close together, so int8's top-1 agreement with float on it
counts near-ties as much as the export's error. This prints, for one random backbone (seed 0)
and two heads on it, each int8 file's top-1 agreement with the float model on the digits test
split (upscaled), its largest logit difference, and the float model's top-2 gaps:

- "random": the head drawn from N(0, 0.02), as tests/export/test_export_runtimes.py's S/16;
- "fitted": the head fitted to the digits training images' features by ridge regression on
  one-hot targets (the backbone stays random), so its decisions have the margins of a
  classifier rather than of noise.

Every file is calibrated as `keras-vit export --quantize int8` does (200 training images).
The flips column says how many disagreeing images had a float top-2 gap below the file's
largest logit difference (a near-tie that any error of that size can turn).

Measured 2026-11-30 on this 2-core AVX2 machine, one process per runtime (3.7-4.6 GB each),
360 test images: random head (median gap 0.063) ONNX 0.953, OpenVINO 0.975, LiteRT 0.944;
fitted head (float accuracy 0.897, median gap 0.261) 0.897, 0.844, 0.856. 190 of 191 flips
were near-ties. The fitted head agrees less: it reads the digits from directions of the
random features where int8's noise is as large as the signal (largest error 0.32 to 0.36).
"""

import argparse
import dataclasses
import json
import tempfile

import numpy as np

from benchmarks.digits_seeds import int8_logits

FORMATS = ("onnx", "openvino", "litert")
HEADS = ("random", "fitted")


def _model(tiny):
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    if tiny:
        variant = dataclasses.replace(keras_vit.get_variant("S/16"), width=64, depth=2, heads=2,
                                      mlp_dim=128)
        return keras_vit.ViT(variant, image_size=32, classes=10)
    return keras_vit.ViT("S/16", image_size=224, classes=10)


def _features(model, pixels):
    """The head's inputs on [0, 255] `pixels`, as export normalises them."""
    import keras

    from keras_vit.normalization import model_input

    head = model.get_layer("head")
    trunk = keras.Model(model.inputs, head.input)
    normalised = keras.ops.convert_to_numpy(model_input(model)(np.asarray(pixels, np.float32)))
    return trunk.predict(normalised, batch_size=16, verbose=0)


def _fit_head(features, labels, classes=10, ridge=1e-3):
    """(kernel, bias) of the ridge-regression head from `features` to one-hot `labels`."""
    mean = features.mean(0)
    centred = features - mean
    targets = np.eye(classes, dtype=np.float64)[labels]
    gram = centred.T @ centred + ridge * len(features) * np.eye(features.shape[1])
    kernel = np.linalg.solve(gram, centred.T @ (targets - targets.mean(0)))
    bias = targets.mean(0) - mean @ kernel
    return kernel.astype(np.float32), bias.astype(np.float32)


def _gaps(logits):
    top = np.sort(logits, -1)
    return top[:, -1] - top[:, -2]


def measure(formats=FORMATS, tiny=False, fit_images=1000, calibration_images=200):
    """{head: {"accuracy", "median_gap", format: agreement record + "near_tie_flips"}}."""
    from keras_vit.data import load_dataset, make_pipeline
    from keras_vit.export import quantized
    from keras_vit.runtime.agreement import agreement

    model = _model(tiny)
    size = model.input_shape[1]
    splits = load_dataset("digits")

    def pixels_and_labels(split, limit):
        batches = list(make_pipeline(split.take(limit), (size, size), 64,
                                     training=False).as_numpy_iterator())
        images = np.concatenate([x for x, _ in batches])
        labels = np.concatenate([y for _, y in batches])  # class ids
        return np.clip((images + 1.0) * 127.5, 0.0, 255.0), labels  # [-1, 1] undone

    train, train_labels = pixels_and_labels(splits.train, fit_images)
    test, test_labels = pixels_and_labels(splits.test, 1000)
    calibration = train[:calibration_images]
    head = model.get_layer("head")
    heads = {"random": (np.random.default_rng(1).normal(0, 0.02, head.kernel.shape),
                        np.zeros(head.bias.shape)),
             "fitted": _fit_head(_features(model, train), train_labels)}
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, (kernel, bias) in heads.items():
            head.kernel.assign(kernel.astype(np.float32))
            head.bias.assign(bias.astype(np.float32))
            reference = quantized.keras_logits(model, test, batch_size=16)
            gaps = _gaps(reference)
            result = {"accuracy": float(np.mean(reference.argmax(-1) == test_labels)),
                      "median_gap": float(np.median(gaps)), "images": int(len(test))}
            for format_name in formats:
                logits = int8_logits(model, format_name, calibration, test, folder)
                record = agreement(reference, logits)
                flipped = reference.argmax(-1) != logits.argmax(-1)
                record["flips"] = int(flipped.sum())
                record["near_tie_flips"] = int(
                    (flipped & (gaps < record["max_logit_difference"])).sum())
                result[format_name] = record
            results[name] = result
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--tiny", action="store_true", help="a two-block model at 32 px")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = measure(args.formats, args.tiny)
    print(f"{'head':8} {'float acc':>9} {'median gap':>10}  format    top-1 agree  max diff  "
          "flips (near-ties)")
    for name, result in results.items():
        for format_name in args.formats:
            record = result[format_name]
            print(f"{name:8} {result['accuracy']:9.3f} {result['median_gap']:10.3f}  "
                  f"{format_name:9} {record['top1_agreement']:11.4f} "
                  f"{record['max_logit_difference']:9.3f}  {record['flips']} "
                  f"({record['near_tie_flips']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
