"""`keras-vit export`: a model as a TF Serving SavedModel, a TFLite file, a `.keras` file, an
ONNX, OpenVINO or LiteRT file (keras_vit/export/runtimes.py), or a timm Hub or transformers
folder.

    keras-vit export --model B/16 --weights augreg-in21k-ft-in1k-224 --output serving/vit
    keras-vit export --model my_model.keras --format tflite --output vit.tflite
    keras-vit export --model my_model.keras --format onnx --output vit.onnx --calibration-data digits
    keras-vit export --model runs/digits --format hub --output digits-vit
    keras-vit export --model dinov2.keras --format transformers --output dinov2-hf

TensorFlow and Keras are imported when the command runs, so `--help` stays fast.
"""

import os

from keras_vit.cli.common import (
    CommandError,
    add_max_pixels_option,
    add_max_tokens_option,
    add_model_options,
    add_precision_option,
    labels_beside,
    load_model,
    positive_int,
)

__all__ = ["add_parser", "run"]

FORMATS = ("saved_model", "tflite", "keras", "onnx", "openvino", "litert", "hub", "transformers")
# The formats keras_vit/export/runtimes.py writes through Keras' exporters, and their --quantize.
RUNTIME_QUANTIZE = {"onnx": ("int8",), "openvino": ("int8",), "litert": ()}


def add_parser(commands):
    """Registers `export` on an argparse sub-parsers object."""
    parser = commands.add_parser(
        "export", help="write a model for TF Serving (SavedModel), TFLite, ONNX, OpenVINO, "
                       "LiteRT, as a .keras file, a timm Hub folder or a transformers folder",
        description="Write a classifier as a TF Serving SavedModel (OUTPUT/<version>/), a "
                    "TFLite file, a .keras file, an ONNX, OpenVINO or LiteRT file (the "
                    "preprocessing inside; with --calibration-data, its agreement with the "
                    "Keras model measured in its runtime and written to OUTPUT.agreement.json), "
                    "or a folder timm (hub) or transformers (transformers: ViT, DINOv2, SigLIP, "
                    "CLIP) and keras_vit.from_pretrained load (config.json, model.safetensors, "
                    "README.md).")
    add_model_options(parser)
    parser.add_argument("--format", choices=FORMATS, default="saved_model",
                        help="what to write (default: saved_model)")
    parser.add_argument("--output", required=True,
                        help="saved_model: the model's base folder, which receives a new version "
                             "folder; tflite and litert: the .tflite file; keras: the .keras file; "
                             "onnx: the .onnx file; openvino: the .xml file (its .bin beside); "
                             "hub, transformers: a new folder")
    parser.add_argument("--version", type=positive_int,
                        help="saved_model version (default: the next free integer)")
    parser.add_argument("--labels",
                        help='a text file with one class name per line, "imagenet", or "none" '
                             "(default: the labels.txt beside a .keras --model, else ImageNet "
                             "names for 1000- and 21843-class heads)")
    parser.add_argument("--top-k", type=positive_int, default=5,
                        help="classes listed per image in class_ids and labels (default: 5)")
    add_max_pixels_option(parser, "saved_model: images sent to serve_bytes")
    add_max_tokens_option(parser)
    parser.add_argument("--execution", choices=("auto", "graph", "xla"), default=None,
                        help="saved_model: xla compiles the model in the signatures with XLA "
                             "(TF Serving then needs --xla_cpu_compilation_enabled=true on a "
                             "CPU); auto and graph write a plain graph, which every server runs "
                             "(default: auto)")
    add_precision_option(parser, "the exported saved_model or keras file",
                         auto_help="auto exports float32, as the serving machine is not this "
                                   "one; with --calibration-data bfloat16's agreement is "
                                   "measured on its test split and written to "
                                   "OUTPUT.agreement.json")
    _add_quantize_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def _add_quantize_arguments(parser):
    """Quantised exports (keras_vit/export/quantized.py), measured against the float model."""
    parser.add_argument("--quantize", choices=("float16", "dynamic", "int8"), default=None,
                        help="tflite: float16 weights, dynamic-range int8 weights, or int8 "
                             "full-integer (calibrated on --calibration-data); keras: int8 "
                             "(Keras' Model.quantize); onnx: int8 (ONNX Runtime's static "
                             "quantisation); openvino: int8 (NNCF, when installed) "
                             "(default: float32)")
    parser.add_argument("--calibration-data", default=None,
                        help="a dataset name ('digits', a TFDS name) or a folder of class "
                             "sub-folders: its training split calibrates int8, its test split "
                             "measures the agreement with the float model")
    parser.add_argument("--calibration-images", type=positive_int, default=200,
                        help="training images that calibrate int8 (default: 200)")


def run(args):
    print(_export(args))
    return 0


def _check_arguments(args):
    """What the flags say, checked before the model is built or anything is written."""
    if args.precision == "bfloat16" and args.quantize is not None:
        raise CommandError("--precision bfloat16 and --quantize each change what the model "
                           "computes in; give one of them.")
    if args.format in RUNTIME_QUANTIZE:
        _check_runtime_arguments(args)
    if args.precision == "bfloat16" and args.format == "tflite":
        raise CommandError("--precision bfloat16 does not apply to --format tflite (TFLite has "
                           "no bfloat16 kernels); --quantize float16 halves the file instead.")
    if args.quantize is not None and args.format in FOLDER_FORMATS:
        raise CommandError("--quantize applies to --format tflite or keras.")
    if args.precision == "bfloat16" and args.format in FOLDER_FORMATS[1:]:
        raise CommandError(f"--format {args.format} writes float32 weights; --precision "
                           "bfloat16 does not apply.")
    if args.format == "keras" and args.quantize not in (None, "int8"):
        raise CommandError(f"--format keras quantises to int8 only, not {args.quantize}.")
    if args.calibration_data:
        from keras_vit.export.quantized import check_calibration_images

        check_calibration_images(args.calibration_images)
    if args.quantize == "int8" and args.format == "tflite" and not args.calibration_data:
        raise CommandError("--quantize int8 calibrates on images: give --calibration-data "
                           "(a dataset name or a folder).")
    if args.format != "saved_model" and args.max_tokens is not None:
        raise CommandError(f"--max-tokens is a NaFlex model's sequence budget in a saved_model "
                           f"export; --format {args.format} takes images of one size.")
    if args.format != "saved_model" and args.version is not None:
        raise CommandError(f"--version numbers a saved_model's folder; --format {args.format} "
                           "writes one file.")
    if args.format == "saved_model":
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise CommandError(f"--output {args.output} is an existing file; a saved_model "
                               "export writes a folder there.")
        if args.version is not None and os.path.exists(os.path.join(args.output,
                                                                    str(args.version))):
            raise CommandError(f"{os.path.join(args.output, str(args.version))} exists already; "
                               "give another --version, or leave it out for the next one.")
    elif args.format in FOLDER_FORMATS:
        if os.path.lexists(args.output):
            raise CommandError(f"--output {args.output} exists; --format {args.format} writes a "
                               "new folder.")
    elif os.path.isdir(args.output):
        raise CommandError(f"--output {args.output} is an existing folder; --format "
                           f"{args.format} writes one file there.")
    _check_output_suffix(args.format, args.output)
    _check_output_is_not_the_model(args.output, args.model)


# The formats that write a folder (saved_model: a version folder inside it).
FOLDER_FORMATS = ("saved_model", "hub", "transformers")
def _check_runtime_arguments(args):
    """The flags an ONNX, OpenVINO or LiteRT export takes."""
    if args.precision == "bfloat16":
        raise CommandError(f"--precision bfloat16 does not apply to --format {args.format}: the "
                           "file holds the float32 model, and the runtime chooses its precision.")
    if args.quantize is not None and args.quantize not in RUNTIME_QUANTIZE[args.format]:
        kinds = " or ".join(RUNTIME_QUANTIZE[args.format]) or "nothing (--format tflite does)"
        raise CommandError(f"--format {args.format} quantises to {kinds}, not {args.quantize}.")
    if args.quantize == "int8" and not args.calibration_data:
        raise CommandError("--quantize int8 calibrates on images: give --calibration-data "
                           "(a dataset name or a folder).")


# The file each one-file format writes, by its suffix; a folder takes neither.
SUFFIXES = {"tflite": ".tflite", "keras": ".keras", "onnx": ".onnx", "openvino": ".xml",
            "litert": ".tflite"}


def _check_output_suffix(format_name, output):
    suffix = SUFFIXES.get(format_name)
    if suffix is not None and not output.lower().endswith(suffix):
        raise CommandError(f"--format {format_name} writes a {suffix} file; got --output {output}.")
    if suffix is None and output.lower().endswith(tuple(SUFFIXES.values())):
        raise CommandError(f"--format {format_name} writes a folder; --output {output} is named "
                           "as a file of another format (give --format, or a folder name).")


def _check_output_is_not_the_model(output, model):
    """The model read is never written over: not its file, nor a file of the folder it is
    read from (a run's model.keras and best.keras); a new folder inside it may be written."""
    if not os.path.exists(model):  # an architecture's name
        return
    source, target = os.path.realpath(model), os.path.realpath(output)
    inside = os.path.isdir(source) and os.path.isfile(target) \
        and target.startswith(source.rstrip(os.sep) + os.sep)
    if target == source or inside:
        what = "the model" if target == source else "a file of the model folder"
        raise CommandError(f"--output {output} is {what} --model {model} reads; export to "
                           "another path.")


def _export(args):
    from keras_vit.export import saved_model as export

    _check_arguments(args)
    model = load_model(args)
    if args.format in RUNTIME_QUANTIZE:
        return _export_runtime(args, model)
    if args.quantize is not None:
        from keras_vit.models.factory import quantized_layers

        if quantized_layers(model):
            raise CommandError(f"--model {args.model} is already quantised (int8); --quantize "
                               "starts from a float model: give the one it was quantised from.")
        return _export_quantized(args, model)
    if args.precision == "bfloat16":
        return _export_bfloat16(args, model)
    if args.format == "keras":
        _save_keras(model, args.output)
        return f"Wrote {args.output}"
    if args.format == "tflite":
        export.export_tflite(model, args.output, top_k=args.top_k)
        return f"Wrote {args.output}"
    if args.format in FOLDER_FORMATS[1:]:
        return _export_hub(args, model)
    labels = _labels(args.labels, model.output_shape[-1], labels_beside(args.model))
    path = export.export_saved_model(model, args.output, version=args.version, labels=labels,
                                     top_k=args.top_k, max_pixels=args.max_pixels,
                                     execution=args.execution, max_tokens=args.max_tokens)
    return f"Wrote {path} (signatures: {', '.join(_signatures(path))})"


def _export_hub(args, model):
    """A timm Hub or transformers folder: a run's (or .keras file's) labels and report travel
    with it."""
    from keras_vit.export.pretrained_folder import run_folder_of, save_pretrained

    labels = args.labels or labels_beside(args.model)
    if labels == "imagenet":
        from keras_vit.labels import imagenet_label_names

        labels = imagenet_label_names(model.output_shape[-1])
    run = run_folder_of(args.model) if os.path.exists(args.model) else None
    layout = "timm" if args.format == "hub" else "transformers"
    path = save_pretrained(model, args.output, labels=None if labels == "none" else labels,
                           run=run, layout=layout)
    if layout == "timm":
        return f"Wrote {path} (timm: timm.create_model('local-dir:{path}', pretrained=True))"
    return f"Wrote {path} (transformers: AutoModel.from_pretrained({path!r}))"


def _signatures(folder):
    """The signature names in a SavedModel's saved_model.pb, read without loading the graph.

    Read back from what was written, so the message cannot drift from the export.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(folder, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return sorted({name for graph in proto.meta_graphs for name in graph.signature_def
                   if not name.startswith("__")})  # __saved_model_init_op is TF's, not a signature


def _labels(option, classes, beside=None):
    from keras_vit.labels import imagenet_label_names

    if option is None:
        return beside or imagenet_label_names(classes)
    if option == "none":
        return None
    return option  # "imagenet" or a file; export_saved_model checks the count


def _save_keras(model, path):
    """`model.save`, atomically: no half-written file remains."""
    from keras_vit.atomic import atomic_path

    with atomic_path(path) as tmp:
        model.save(tmp)


def _export_bfloat16(args, model):
    """A saved_model or keras file computing in bfloat16, and with --calibration-data its
    agreement with the float32 model on the data's test split (from the written file for a
    saved_model), printed and written to OUTPUT.agreement.json (saved_model: VERSION.agreement.json
    beside the version folder, which TF Serving ignores)."""
    from keras_vit.export import quantized
    from keras_vit.export import saved_model as export
    from keras_vit.models.image_size import image_size
    from keras_vit.runtime.agreement import agreement
    from keras_vit.runtime.precision import bfloat16_model

    held_out = None
    if args.calibration_data:
        _, held_out = quantized.calibration_pixels(args.calibration_data, image_size(model), 1)
    reference = None if held_out is None else quantized.keras_logits(model, held_out)
    if args.format == "keras":
        converted = bfloat16_model(model)
        _save_keras(converted, args.output)
        written = args.output
        logits = None if held_out is None else quantized.keras_logits(converted, held_out)
    else:
        labels = _labels(args.labels, model.output_shape[-1], labels_beside(args.model))
        written = export.export_saved_model(model, args.output, version=args.version,
                                            labels=labels, top_k=args.top_k,
                                            max_pixels=args.max_pixels, execution=args.execution,
                                            precision="bfloat16", max_tokens=args.max_tokens)
        logits = None if held_out is None else _saved_model_logits(written, held_out)
    if logits is None:
        return f"Wrote {written} (bfloat16; give --calibration-data to measure its agreement)"
    return _record_agreement(written, {"format": args.format, "precision": "bfloat16",
                                       "calibration_data": args.calibration_data,
                                       "held_out": "the calibration data's test split",
                                       **agreement(reference, logits)}, "bfloat16")


def _saved_model_logits(folder, pixels, batch_size=64):
    """The logits of the SavedModel at `folder`'s serving_default on [0, 255] `pixels`."""
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(folder).signatures["serving_default"]
    return np.concatenate([serve(images=tf.constant(pixels[i:i + batch_size], tf.float32))
                           ["logits"].numpy() for i in range(0, len(pixels), batch_size)])


def _record_agreement(written, record, what):
    """Writes `record` to WRITTEN.agreement.json; the line that reports it."""
    from keras_vit.export.runtimes import record_agreement

    record_agreement(written, record)
    return (f"Wrote {written} ({what}): top-1 agreement with the float model "
            f"{record['top1_agreement']:.4f}, max logit difference "
            f"{record['max_logit_difference']:.4g} on {record['images']} held-out images")


def _export_quantized(args, model):
    """A quantised tflite or keras file, and its agreement with the float model on held-out
    images (the calibration data's test split), printed and written to OUTPUT.agreement.json."""
    from keras_vit.export import quantized
    from keras_vit.models.image_size import image_size
    from keras_vit.runtime.agreement import agreement

    size = image_size(model)
    calibration, held_out = (None, None)
    if args.calibration_data:
        calibration, held_out = quantized.calibration_pixels(
            args.calibration_data, size, args.calibration_images)
    reference = None if held_out is None else quantized.keras_logits(model, held_out)
    if args.format == "tflite":
        from keras_vit.export import saved_model as export

        export.export_tflite(model, args.output, top_k=args.top_k, quantize=args.quantize,
                             calibration=calibration)
        logits = None if held_out is None else quantized.tflite_logits(args.output, held_out)
    else:
        _save_keras(quantized.quantize_keras(model, args.quantize), args.output)
        logits = None if held_out is None else quantized.keras_logits(model, held_out)
    if logits is None:
        return f"Wrote {args.output} ({args.quantize}; give --calibration-data to measure it)"
    record = {"format": args.format, "quantize": args.quantize,
              "calibration_data": args.calibration_data,
              "calibration_images": int(len(calibration)),
              "held_out": "the calibration data's test split",
              **agreement(reference, logits)}
    return _record_agreement(args.output, record, args.quantize)


def _export_runtime(args, model):
    """An ONNX, OpenVINO or LiteRT file, and with --calibration-data its agreement with the
    Keras model on the data's test split, run in its runtime, printed and in
    OUTPUT.agreement.json."""
    from keras_vit.export import quantized, runtimes
    from keras_vit.models.image_size import image_size

    calibration, held_out = None, None
    if args.calibration_data:
        calibration, held_out = quantized.calibration_pixels(
            args.calibration_data, image_size(model),
            args.calibration_images if args.quantize else 1)
    options = {"top_k": args.top_k, "held_out": held_out}
    if args.format != "litert":
        options.update(quantize=args.quantize, calibration=calibration)
    getattr(runtimes, f"export_{args.format}")(model, args.output, **options)
    what = f"{args.format} {args.quantize or 'float32'}"
    if held_out is None:
        return f"Wrote {args.output} ({what}; give --calibration-data to measure its agreement)"
    from keras_vit._support.json_files import read_json

    record = read_json(args.output + ".agreement.json", "an agreement record", CommandError)
    record.update(calibration_data=args.calibration_data,
                  held_out="the calibration data's test split")
    return _record_agreement(args.output, record, what)
