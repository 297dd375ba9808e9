"""Quantised exports, and their agreement with the float model they came from.

TFLite (`export_tflite(..., quantize=...)`), through TensorFlow Lite's converter:

- "float16": weights stored as float16, computed in float32.
- "dynamic": weights stored as int8, activations quantised on the fly (dynamic range).
- "int8": post-training quantisation calibrated on real images (`calibration`, [0, 255]
  pixels): the weight ops (fully connected layers, convolutions) take int8 weights and
  int8 activations, whose ranges the images calibrate, but for the first and the last (the
  patch embedding, the head); every other op (`FLOAT_OPS`: the attention's two batched
  matmuls, softmax, LayerNorm, GELU, the residual adds...) stays float, where int8 costs
  ViTs their agreement (docs/serving.md has the measurement).
  Input and output stay float32, so the signature is the float file's.

Keras (`quantize_keras`): `Model.quantize("int8")`, Keras' own weight quantisation of its
`Dense` layers (the MLPs and the head; the attention's fused kernel is not a Dense layer and
stays float).

What each export prints and records is keras_vit/runtime/agreement.py's `agreement` of the
float model's logits and the quantised one's: the share of images whose top-1 class is the
float model's, and the largest logit difference.
"""

import numpy as np

from keras_vit.errors import ArgumentError, SizeError

__all__ = ["QUANTIZE_MODES", "FLOAT_OPS", "configure_converter", "convert",
           "tflite_logits", "litert_interpreter", "calibration_pixels", "check_calibration_images",
           "quantize_keras", "MAX_CALIBRATION_IMAGES"]

QUANTIZE_MODES = ("float16", "dynamic", "int8")
# Calibration holds its images' pixels in memory at once (the converter's representative
# dataset); TFLite's guidance is a few hundred, and 1,000 at 384 pixels is 1.8 GB of float32.
MAX_CALIBRATION_IMAGES = 1000
# The TFLite ops an "int8" file keeps in float: all but the weight ops (FULLY_CONNECTED,
# CONV_2D). Measured on the digits model (docs/serving.md, python -m benchmarks.int8_ops):
# int8 attention matmuls (BATCH_MATMUL) cost the most agreement, and keeping every op below
# in float is what reaches 99%; the weights stay int8 either way (docs/serving.md, "Size").
FLOAT_OPS = ("BATCH_MATMUL", "SOFTMAX", "GELU", "MEAN", "SQUARED_DIFFERENCE", "RSQRT", "ADD",
             "SUB", "MUL", "DIV", "SQRT", "EXP", "TANH", "LOGISTIC", "POW", "SUM",
             "CONCATENATION", "BROADCAST_TO", "RESHAPE", "TRANSPOSE", "SPLIT", "STRIDED_SLICE",
             "SLICE", "GATHER", "PACK", "NEG", "SHAPE", "PAD", "MAXIMUM", "MINIMUM",
             "AVERAGE_POOL_2D", "MAX_POOL_2D", "RESIZE_BILINEAR")


def configure_converter(converter, quantize, calibration=None):
    """Sets a `tf.lite.TFLiteConverter` for `quantize` (one of QUANTIZE_MODES);
    `calibration`, pixels `(n, height, width, 3)` in [0, 255], is needed for "int8"."""
    import tensorflow as tf

    if quantize not in QUANTIZE_MODES:
        raise ArgumentError(f"quantize must be one of {', '.join(QUANTIZE_MODES)}, got {quantize!r}.")
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":
        if calibration is None or len(calibration) == 0:
            raise ArgumentError("int8 quantisation calibrates on images: give calibration "
                                "pixels (keras-vit export --calibration-data).")
        images = np.asarray(calibration, np.float32)

        def representative():
            for image in images:
                yield {"images": image[None]}

        converter.representative_dataset = representative
        # int8 kernels where TFLite has them; float where it has none (float fallback).
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                               tf.lite.OpsSet.TFLITE_BUILTINS]


def convert(converter, quantize=None):
    """The TFLite file's bytes from a converter `configure_converter` set for `quantize`.

    "int8" goes through TensorFlow Lite's quantisation debugger, whose public options
    (`tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=...)`) are how the
    converter keeps chosen ops in float: it calibrates once on the representative images,
    then quantises all but `FLOAT_OPS`.
    """
    import tensorflow as tf

    if quantize != "int8":
        return converter.convert()
    images = converter.representative_dataset
    options = tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=list(FLOAT_OPS))
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter, debug_options=options,
        debug_dataset=lambda: ([example["images"]] for example in images()))
    # The first and the last product with a weight (the patch embedding, the head) stay float
    # too, as in the ONNX and OpenVINO int8 files: the 10-epoch digits model of seed 4 agreed
    # on 98.3% of its test images with them int8, 99.7% without (docs/serving.md). Setting
    # the options quantises the calibrated model again, without calibrating again.
    debugger.options = tf.lite.experimental.QuantizationDebugOptions(
        denylisted_ops=list(FLOAT_OPS),
        denylisted_nodes=_ends_kept_float(debugger.calibrated_model))
    return debugger.get_nondebug_quantized_model()


def _ends_kept_float(content):
    """The output tensor names of the first and the last op with a weight (a convolution or
    a fully connected layer) of the TFLite model `content`, in the order it runs them."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(content)
    weighted = {schema.BuiltinOperator.CONV_2D, schema.BuiltinOperator.FULLY_CONNECTED}
    codes = [max(code.builtinCode, code.deprecatedBuiltinCode) for code in model.operatorCodes]
    graph = model.subgraphs[0]
    names = [graph.tensors[op.outputs[0]].name.decode() for op in graph.operators
             if codes[op.opcodeIndex] in weighted]
    return names[:1] + names[-1:]


def tflite_logits(path, pixels):
    """The logits of the TFLite file at `path` on `pixels`, one image at a time (batch 1), in
    LiteRT's interpreter (TensorFlow's where ai_edge_litert is not installed)."""
    runner = litert_interpreter(path).get_signature_runner()
    return np.concatenate([runner(images=np.asarray(pixels[i:i + 1], np.float32))["logits"]
                           for i in range(len(pixels))])


def litert_interpreter(path):
    """A TFLite file's interpreter: LiteRT's (`ai_edge_litert`), as Google ships it now, where
    installed; TensorFlow's deprecated `tf.lite.Interpreter` otherwise."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # its deprecation notice, left to show, says what to install
        import tensorflow as tf

        return tf.lite.Interpreter(model_path=path)
    return Interpreter(model_path=path)


def keras_logits(model, pixels, batch_size=64):
    """`model`'s logits on [0, 255] `pixels`, with the input normalisation export uses (a
    NaFlex model's pixels at its stored grid's size, as their patches)."""
    import keras
    import tensorflow as tf

    from keras_vit.models.vit import has_softmax_head
    from keras_vit.normalization import model_input
    from keras_vit.runtime.naflex_inputs import one_size_inputs

    normalised = tf.constant(keras.ops.convert_to_numpy(
        model_input(model)(np.asarray(pixels, np.float32))))
    inputs = tf.nest.map_structure(lambda tensor: tensor.numpy(),
                                   one_size_inputs(model)(normalised))
    scores = keras.ops.convert_to_numpy(model.predict(inputs, batch_size=batch_size, verbose=0))
    return np.log(scores) if has_softmax_head(model) else scores


def check_calibration_images(count):
    """`count` calibration images, refused above MAX_CALIBRATION_IMAGES (held in memory)."""
    if count > MAX_CALIBRATION_IMAGES:
        raise SizeError(f"calibration_images {count} is more than the "
                            f"{MAX_CALIBRATION_IMAGES} calibration holds in memory at once "
                            "(a few hundred calibrate int8 as well).", parameter="calibration_images")
    return count


def calibration_pixels(source, image_size, count, held_out=1000, data_dir=None):
    """(calibration, held_out) pixels `(n, height, width, 3)` in [0, 255] from a dataset
    name or folder: the first `count` images of its training split calibrate, and up to
    `held_out` of its test split, which calibration never sees, measure the agreement."""
    from keras_vit.data import load_dataset, make_pipeline

    check_calibration_images(count)
    splits = load_dataset(source, data_dir=data_dir)

    def pixels(split, limit):
        batches = make_pipeline(split.take(limit), image_size, 64, training=False)
        images = np.concatenate([x for x, _ in batches.as_numpy_iterator()])
        return np.clip((images + 1.0) * 127.5, 0.0, 255.0)  # the pipeline's [-1, 1] undone

    return pixels(splits.train, count), pixels(splits.test, held_out)


def quantize_keras(model, mode="int8"):
    """`model` with Keras' `Model.quantize(mode)` applied (in place); returns it."""
    if mode != "int8":
        raise ArgumentError(f"--format keras quantises to int8 only (Keras' Model.quantize), "
                            f"got {mode!r}.")
    model.quantize(mode)
    return model
