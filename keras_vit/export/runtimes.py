"""ONNX, OpenVINO and LiteRT files of a classifier, through Keras' own `model.export(format=...)`,
and each file run in its own runtime (what the agreement checks and the benchmarks call).

Every file holds what the SavedModel's `serving_default` holds (keras_vit/export/saved_model.py):
float32 pixels `images` `(batch, height, width, 3)` in [0, 255] in, the model's normalisation
inside the graph (keras_vit/normalization.py's `model_input`), and `logits`, `probabilities`
and `class_ids` (int32, best first) out, any batch size. The SavedModel's checks of a request
(size, NaN, range) and its string `labels` output stay TF Serving's: these runtimes have no
string tensors or asserts that all three share, so the labels go in the agreement record.

With `held_out` pixels, each export runs the written file in its runtime and writes
`PATH.agreement.json` (keras_vit/runtime/agreement.py's measure against the Keras model, as
the quantised TFLite exports do). OpenVINO is measured in float32: its CPU plugin computes
in bfloat16 by default where the processor multiplies bfloat16 natively (AMX, AVX512_BF16),
which is a choice of the serving machine (`INFERENCE_PRECISION_HINT`), not of the file.
"""

import contextlib
import os
import shutil
import tempfile

import numpy as np

from keras_vit._support.tf_log import dropped_if_refused
from keras_vit.errors import ArgumentError

__all__ = ["export_onnx", "export_openvino", "export_litert", "runtime_logits",
           "record_agreement", "RUNTIME_FORMATS"]

# name -> (file suffix, the runtime's import name, the pip package that brings it)
RUNTIME_FORMATS = {"onnx": (".onnx", "onnxruntime", "onnxruntime"),
                   "openvino": (".xml", "openvino", "openvino"),
                   "litert": (".tflite", "ai_edge_litert", "ai-edge-litert")}
# ONNX files are protobuf messages and TFLite files FlatBuffers: neither holds 2 GiB or more.
ONE_FILE_MAX_BYTES = 2 ** 31
# What each format quantises to, and where.
QUANTIZE = {"onnx": ("int8",), "openvino": ("int8",), "litert": ()}


def export_onnx(model, path, top_k=5, quantize=None, calibration=None, held_out=None):
    """Writes `model` as an ONNX file at `path` (`.onnx`), through Keras' `format="onnx"`.

    `quantize="int8"`: ONNX Runtime's static quantisation (QDQ, int8 weights per channel,
    activations calibrated on `calibration`, pixels `(n, height, width, 3)` in [0, 255]) of
    the matrix products with a constant weight (the patch embedding, projections, MLPs,
    head); the attention's products of two activations stay float, as in the int8 TFLite
    file. `held_out` pixels: the agreement, measured in ONNX Runtime, in PATH.agreement.json.
    Returns `path`.
    """
    return _export("onnx", model, path, top_k, quantize, calibration, held_out)


def export_openvino(model, path, top_k=5, quantize=None, calibration=None, held_out=None):
    """Writes `model` as OpenVINO IR at `path` (`.xml`, its weights in the `.bin` beside),
    through Keras' `format="openvino"`. `quantize="int8"` is NNCF's post-training
    quantisation, calibrated on `calibration`, and needs `nncf` installed. `held_out`: as
    `export_onnx`, measured in OpenVINO's CPU plugin in float32. Returns `path`."""
    return _export("openvino", model, path, top_k, quantize, calibration, held_out)


def export_litert(model, path, top_k=5, held_out=None):
    """Writes `model` as a LiteRT (TFLite) file at `path` (`.tflite`), through Keras'
    `format="litert"`, TFLite's builtin ops only (what phones' runtimes have). Quantised
    TFLite files: `export_tflite(..., quantize=...)`. `held_out`: as `export_onnx`, measured
    in LiteRT's interpreter. Returns `path`."""
    return _export("litert", model, path, top_k, None, None, held_out)


def _export(format_name, model, path, top_k, quantize, calibration, held_out):
    from keras_vit.atomic import check_target
    from keras_vit.export.saved_model import _check_top_k
    from keras_vit.lora import merge_lora

    suffix = RUNTIME_FORMATS[format_name][0]
    if not str(path).lower().endswith(suffix):
        raise ArgumentError(f"A {format_name} export writes a {suffix} file; got {path}.")
    if quantize is not None and quantize not in QUANTIZE[format_name]:
        raise ArgumentError(f"{format_name} exports quantise to "
                            f"{' or '.join(QUANTIZE[format_name]) or 'nothing here'}, not "
                            f"{quantize!r}" + (" (export_tflite quantises TFLite files)."
                                               if format_name == "litert" else "."))
    if quantize == "int8" and (calibration is None or len(calibration) == 0):
        raise ArgumentError("int8 quantisation calibrates on images: give calibration pixels "
                            "(keras-vit export --calibration-data).")
    _check_top_k(top_k)
    check_target(path)
    _check_holds(format_name, model)
    _import_runtime(format_name)
    model = merge_lora(model)  # one kernel per projection, not a LoRA graph
    serving = serving_model(model, top_k)
    with tempfile.TemporaryDirectory() as folder:
        written = os.path.join(folder, "model" + suffix)
        with dropped_if_refused():  # a refusal is its one line, not the converters' log
            _keras_export(format_name, serving, written)
            if quantize == "int8":
                written = _quantize_int8(format_name, written, calibration)
        _publish(written, path)
    if held_out is not None:
        from keras_vit.export.quantized import keras_logits
        from keras_vit.runtime.agreement import agreement

        record = {"format": format_name, "quantize": quantize,
                  **agreement(keras_logits(model, held_out),
                              runtime_logits(format_name, path, held_out))}
        if quantize is not None:
            record["calibration_images"] = int(len(calibration))
        record_agreement(path, record)
    return path


def _check_holds(format_name, model):
    """One line when `format_name` cannot hold `model`: another backend than TensorFlow (Keras
    traces these exports with TensorFlow), weights over a one-file format's 2 GiB, weights not
    float32 (Keras' exporters trace float32 models)."""
    import keras

    from keras_vit.export.saved_model import _classes, _image_size

    _image_size(model)  # one RGB image input of a known size
    _classes(model)  # a classifier: (batch, classes) out
    if keras.backend.backend() != "tensorflow":
        raise ArgumentError(f"The {format_name} export traces the model with TensorFlow; run it "
                            f"with KERAS_BACKEND=tensorflow (this is {keras.backend.backend()}).")
    kinds = {str(w.dtype) for w in model.weights} | {layer.compute_dtype for layer in model.layers}
    if kinds - {"float32"}:
        raise ArgumentError(f"The {format_name} export takes a float32 model; {model.name} "
                            f"computes or keeps weights in {', '.join(sorted(kinds))} (export the "
                            "float32 model: the runtime chooses its precision).")
    weight_bytes = sum(int(np.prod(w.shape)) * 4 for w in model.weights)
    if format_name != "openvino" and weight_bytes >= ONE_FILE_MAX_BYTES:
        raise ArgumentError(f"{model.name} has {weight_bytes / 2 ** 30:.1f} GiB of float32 "
                            f"weights; a {format_name} file holds at most 2 GiB. Export it "
                            "with --format openvino, or a smaller variant.")


def _import_runtime(format_name):
    """The runtime (and for ONNX its converter), or an ImportError saying what to install."""
    import importlib

    modules = {"onnx": ("onnxruntime", "tf2onnx", "onnx"), "openvino": ("openvino",),
               "litert": ("ai_edge_litert",)}[format_name]
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ImportError(f"The {format_name} export needs {module}: pip install "
                              '"keras-vit-zoo[export]".') from error


def serving_model(model, top_k=5):
    """A Keras model of `model` with the SavedModel's serving_default around it: [0, 255]
    pixels `(batch, height, width, 3)` -> {"logits", "probabilities", "class_ids"}; a NaFlex
    model's pixels at its stored grid's size, cut into its patches inside the graph."""
    import keras

    from keras_vit.models.vit import has_softmax_head
    from keras_vit.normalization import model_input
    from keras_vit.runtime.naflex_inputs import one_size_inputs

    normalised, inputs = model_input(model), one_size_inputs(model)

    def to_model_input(images):  # a NaFlex model's: the images' patches at its stored grid
        return inputs(normalised(images))

    softmax_head = has_softmax_head(model)
    top_k = min(int(top_k), model.output_shape[-1])

    class ServingModel(keras.Model):
        def __init__(self, classifier):
            super().__init__(name=f"{classifier.name}_serving")
            self.classifier = classifier

        def call(self, images):
            scores = keras.ops.cast(self.classifier(to_model_input(images), training=False),
                                    "float32")
            # A softmax head returns probabilities; their log is a valid set of logits.
            logits = keras.ops.log(scores) if softmax_head else scores
            probabilities = scores if softmax_head else keras.ops.softmax(logits, axis=-1)
            class_ids = keras.ops.cast(keras.ops.top_k(probabilities, top_k)[1], "int32")
            return {"logits": logits, "probabilities": probabilities, "class_ids": class_ids}

    return ServingModel(model)


def _keras_export(format_name, serving, path):
    """Keras' exporter of `format_name`, the batch dynamic, the input named `images`."""
    import tensorflow as tf

    from keras_vit.export.saved_model import _image_size

    height, width = _image_size(serving.classifier)
    signature = [tf.TensorSpec((None, height, width, 3), tf.float32, name="images")]
    serving(np.zeros((1, height, width, 3), np.float32))  # built: Keras exports built models
    options, converting = {}, contextlib.nullcontext()
    if format_name == "onnx":
        from keras_vit.export.onnx_ops import copies_collected, map_missing_tensorflow_ops

        map_missing_tensorflow_ops()
        converting = copies_collected()
    if format_name == "litert":  # builtins only: phones' runtimes have no TensorFlow (Flex) ops
        options["target_spec"] = {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS]}
    try:
        with converting:
            serving.export(path, format=format_name, input_signature=signature, verbose=False,
                           **options)
    except Exception as error:  # each converter raises its own types; the cause, in one line
        cause = " ".join(str(error).split())[:300]
        raise ArgumentError(f"{serving.classifier.name} does not convert to {format_name}: "
                            f"{cause}") from error
    if format_name == "onnx":
        from keras_vit.export.onnx_ops import check_onnx_ops

        check_onnx_ops(path, serving.classifier.name)


def _quantize_int8(format_name, path, calibration):
    """The int8 file made from the float file at `path`, calibrated on `calibration` pixels;
    its path (beside `path`)."""
    images = np.asarray(calibration, np.float32)
    quantized = os.path.join(os.path.dirname(path), "int8" + RUNTIME_FORMATS[format_name][0])
    if format_name == "onnx":
        from onnxruntime import quantization as q

        class Images(q.CalibrationDataReader):
            def __init__(self):
                self.batches = iter(images[i:i + 1] for i in range(len(images)))

            def get_next(self):
                batch = next(self.batches, None)
                return None if batch is None else {"images": batch}

        # Products of two activations (attention) stay float: int8 there costs ViTs their
        # agreement (docs/serving.md, the TFLite measurement); so do the first and the last
        # product with a weight (the patch embedding, the head), as post-training quantisation
        # usually keeps them: 2% of B/16's work. Weights unsigned like the activations: ONNX
        # Runtime's uint8 x int8 products saturate on x86 processors without VNNI (its
        # quantisation docs), and the server is not the machine that exports. The 10-epoch
        # digits model on an AVX2 processor: 92.8% top-1 agreement with int8 weights, 98.9%
        # with uint8, 99.4% (logits within 0.14) with the embedding and head in float too.
        q.quantize_static(path, quantized, Images(), quant_format=q.QuantFormat.QDQ,
                          per_channel=True, op_types_to_quantize=["MatMul", "Conv", "Gemm"],
                          nodes_to_exclude=_products_kept_float(path),
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QUInt8)
        return quantized
    try:
        import nncf
    except ImportError as error:
        raise ImportError("OpenVINO's int8 is NNCF's post-training quantisation: pip install "
                          "nncf (the float32 export needs no NNCF).") from error
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    # Calibrated as ONNX Runtime's above: the patch embedding and the head stay float, and
    # each activation's range is the whole range the calibration images reach (NNCF's default
    # averages each image's minimum and maximum, so the larger values of the other images
    # are clipped). And no product may saturate on a processor without VNNI: OpenVINO's int8
    # kernels there sum pairs of uint8 x int8 products in int16, and NNCF's overflow fix,
    # which keeps the weights within 7 bits, guards only the first layer by default. The
    # 10-epoch digits model of seed 6 on an AVX2 processor, ends float: 96.4% top-1 agreement
    # without the overflow fix, 98.1% with it, 97.8% with the whole range alone,
    # 99.7% with both (docs/serving.md).
    model = ov.Core().read_model(path)
    model = nncf.quantize(model, nncf.Dataset(images[:, None]),
                          model_type=nncf.ModelType.TRANSFORMER, subset_size=len(images),
                          ignored_scope=nncf.IgnoredScope(names=_ends_kept_float(model)),
                          advanced_parameters=AdvancedQuantizationParameters(
                              overflow_fix=OverflowFix.ENABLE,
                              activations_range_estimator_params=(
                                  RangeEstimatorParametersSet.MINMAX)))
    ov.save_model(model, quantized)
    return quantized


def _ends_kept_float(model):
    """The names of the OpenVINO model's first and last product with a weight (the patch
    embedding and the head), in the order the model computes them."""
    def reads_a_weight(op):
        source = op.input_value(1).get_node()
        while source.get_type_name() == "Convert":  # a weight stored in float16
            source = source.input_value(0).get_node()
        return source.get_type_name() == "Constant"

    weighted = [op.get_friendly_name() for op in model.get_ordered_ops()
                if op.get_type_name() in ("MatMul", "Convolution") and reads_a_weight(op)]
    return weighted[:1] + weighted[-1:]


def _products_kept_float(path):
    """The names of the ONNX file's products that int8 leaves in float: the MatMul nodes whose
    second operand is not a weight, and the first and last product with a weight."""
    import onnx

    graph = onnx.load(path).graph
    weights = {tensor.name for tensor in graph.initializer}
    weights |= {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    products = [node for node in graph.node if node.op_type in ("MatMul", "Conv", "Gemm")]
    weighted = [node.name for node in products if node.input[1] in weights]
    return [node.name for node in products if node.input[1] not in weights] \
        + weighted[:1] + weighted[-1:]


def _publish(written, path):
    """The written file (and OpenVINO's .bin) moved to `path`, each atomically; the .xml,
    which names the .bin, last."""
    from keras_vit.atomic import atomic_path

    base, suffix = os.path.splitext(written)
    companions = [(base + ".bin", os.path.splitext(path)[0] + ".bin")] if suffix == ".xml" else []
    for source, target in [*companions, (written, path)]:
        with atomic_path(target) as tmp:
            shutil.copyfile(source, tmp)


def runtime_logits(format_name, path, pixels, batch_size=64):
    """The logits of the `format_name` file at `path` on [0, 255] `pixels`, in its own
    runtime: ONNX Runtime, OpenVINO's CPU plugin in float32, or LiteRT's interpreter."""
    pixels = np.asarray(pixels, np.float32)
    batches = [pixels[i:i + batch_size] for i in range(0, len(pixels), batch_size)]
    if format_name == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        outputs = [session.run(["logits"], {"images": batch})[0] for batch in batches]
    elif format_name == "openvino":
        import openvino as ov

        compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        outputs = [compiled(batch)["logits"] for batch in batches]
    else:
        from keras_vit.export.quantized import litert_interpreter

        runner = litert_interpreter(path).get_signature_runner("serving_default")
        outputs = [runner(images=pixels[i:i + 1])["logits"] for i in range(len(pixels))]
    return np.concatenate(outputs)


def record_agreement(path, record):
    """Writes `record` to PATH.agreement.json (beside the file it measures); returns it."""
    import json

    from keras_vit.atomic import atomic_open

    with atomic_open(os.fspath(path) + ".agreement.json") as f:
        json.dump(record, f, indent=2)
    return record
