"""Which TFLite ops cost an int8 ViT its agreement with the float model.

    python -m benchmarks.int8_ops --model runs/digits/model.keras

Calibrates on 200 images of the digits training split and measures on the 360 test images
(which calibration never sees): for each set of ops kept in float (TFLite's quantisation
debugger, `denylisted_ops`), the top-1 agreement with the float model, the largest logit
difference and the file's size against float32's. Every row keeps the patch embedding and
the head in float, as `export_tflite` does; the last row is what `--quantize int8` exports
(`keras_vit.export.quantized.FLOAT_OPS`).
"""

import argparse
import os
import tempfile

LAYER_NORM = ["MEAN", "SQUARED_DIFFERENCE", "RSQRT"]
ROWS = (
    ("none (all int8 with float fallback)", None),
    ("SOFTMAX", ["SOFTMAX"]),
    ("GELU", ["GELU"]),
    ("LayerNorm (MEAN, SQUARED_DIFFERENCE, RSQRT)", LAYER_NORM),
    ("BATCH_MATMUL (attention)", ["BATCH_MATMUL"]),
    ("ADD", ["ADD"]),
    ("BATCH_MATMUL, SOFTMAX, LayerNorm, GELU", ["BATCH_MATMUL", "SOFTMAX", "GELU"] + LAYER_NORM),
    ("FLOAT_OPS: all but FULLY_CONNECTED and CONV_2D", "FLOAT_OPS"),
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a digits model's .keras file")
    parser.add_argument("--calibration-images", type=int, default=200)
    args = parser.parse_args(argv)

    import keras

    from keras_vit.export import export_tflite, quantized
    from keras_vit.runtime.agreement import agreement

    model = keras.saving.load_model(args.model, compile=False)
    size = tuple(model.input_shape[1:3])
    calibration, test = quantized.calibration_pixels("digits", size, args.calibration_images)
    reference = quantized.keras_logits(model, test)
    with tempfile.TemporaryDirectory() as folder:
        float_path = export_tflite(model, os.path.join(folder, "float.tflite"))
        float_size = os.path.getsize(float_path)
        print(f"float32 file {float_size:,} B; calibration {len(calibration)} train images, "
              f"agreement on {len(test)} test images")
        print("| kept in float | top-1 agreement | max logit difference | size of float32 |")
        print("|---|---|---|---|")
        for name, ops in ROWS:
            path = os.path.join(folder, "int8.tflite")
            _export(model, path, calibration, quantized.FLOAT_OPS if ops == "FLOAT_OPS" else ops)
            measured = agreement(reference, quantized.tflite_logits(path, test))
            print(f"| {name} | {measured['top1_agreement']:.3f} | "
                  f"{measured['max_logit_difference']:.2f} | "
                  f"{os.path.getsize(path) / float_size:.1%} |", flush=True)


def _export(model, path, calibration, float_ops):
    """export_tflite's int8 file with `float_ops` (a list, or None) kept in float."""
    from keras_vit.export import export_tflite, quantized

    kept = quantized.FLOAT_OPS
    quantized.FLOAT_OPS = tuple(float_ops or ())
    try:
        export_tflite(model, path, quantize="int8", calibration=calibration)
    finally:
        quantized.FLOAT_OPS = kept


if __name__ == "__main__":
    main()
