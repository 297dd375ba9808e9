"""Export a classifier for TF Serving (SavedModel) and for phones (TFLite).

`export_saved_model` writes TF Serving's layout, `export_dir/<version>/`, with
three signatures that take raw pixels or encoded image files and do all the
preprocessing inside the graph, so a client needs no keras_vit code:

- `serving_default(images)`: float32 `(batch, height, width, 3)`, pixel values
  in [0, 255] at the model's size, or any size for a model built with
  `dynamic_image_size=True` (JSON numbers and uint8 data fit as they are;
  TF Serving converts JSON numbers to the signature's dtype). A request with
  NaN, Inf or a value outside [0, 255], or another image size, is refused with
  InvalidArgument naming the items or the size expected.
- `serve_bytes(image_bytes)`: string `(batch,)` of JPEG, PNG, GIF, BMP or WebP
  files of any size, decoded to RGB and resized to the model's size as its
  preprocessing of record says (`keras_vit.preprocessing_record`: the official
  bilinear stretch, or its weights' source's resize and centre crop; a
  dynamic-size model's: the size its position embeddings are stored for)
  by `keras_vit.preprocessing.decode_images`, the path every image takes.
  An image whose header declares more than `max_pixels` pixels is refused
  (InvalidArgument) before it is decoded; the limit is a constant of the
  graph, so TF Serving enforces it without keras_vit.
  A scalar instead of a batch, or an item that is not such a file, is refused
  with InvalidArgument naming the items by index.
- `serve_uint8(images)`: as `serving_default`, uint8 pixels.

A NaFlex model (SigLIP 2 NaFlex) takes each image at its own aspect ratio: every
signature packs each image inside the graph as `keras_vit.predict_images` does
(`keras_vit.runtime.naflex_inputs.packed_image`: the largest grid of its aspect
ratio within `max_tokens` patches, resized in its preprocessing's interpolation),
so `serving_default` and `serve_uint8` take a batch of any one size and
`serve_bytes` files of mixed sizes.

All three return `logits` `(batch, classes)`, `probabilities` `(batch, classes)`,
`class_ids` `(batch, k)` (int32, best first) and, when labels are given,
`labels` `(batch, k)` (strings of those classes). The loaded SavedModel is also
callable: `tf.saved_model.load(path)(images)` runs `serving_default`.

A SavedModel is a program: loading and calling one runs whatever its graph does.
Load only SavedModels from a source you trust.
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

from keras_vit._support.checks import positive_int
from keras_vit._support.private_keras import check_private_keras
from keras_vit.atomic import publish_folder, remove_temporaries, temporary_folder, write_bytes
from keras_vit.errors import ArgumentError, PathExistsError
from keras_vit.labels import imagenet_label_names, read_labels
from keras_vit.layer_names import EMBEDDING
from keras_vit.lora import merge_lora
from keras_vit.models.image_size import naflex_layout, stored_size, takes_any_size
from keras_vit.models.vit import has_softmax_head
from keras_vit.normalization import model_input
from keras_vit.preprocessing import IMAGE_FORMATS, MAX_PIXELS, decode_images
from keras_vit.preprocessing_record import model_preprocessing
from keras_vit.runtime.execution import check_execution
from keras_vit.runtime.precision import bfloat16_model, check_precision

__all__ = ["export_saved_model", "export_tflite", "next_version"]

# A TFLite file is one FlatBuffer, which cannot exceed 2 GiB.
TFLITE_MAX_BYTES = 2 ** 31
PIXEL_RANGE = (0.0, 255.0)  # what the pixel signatures accept
# The first bytes of the files tf.io.decode_image reads (WebP: RIFF, then WEBP at byte 8).
_SIGNATURES = ((0, b"\xff\xd8\xff"), (0, b"\x89PNG\r\n\x1a\n"), (0, b"GIF87a"),
               (0, b"GIF89a"), (0, b"BM"), (8, b"WEBP"))


def export_saved_model(model, export_dir, version=None, labels=None, top_k=5, overwrite=False,
                       max_pixels=MAX_PIXELS, execution=None, precision=None, max_tokens=None):
    """Writes `model` as a TF Serving SavedModel under `export_dir/<version>/`.

    Args:
        model: a keras_vit classifier (`include_top=True`) taking images in
            [-1, 1]; its head may end in a softmax or return logits.
        export_dir: the model's base folder, as TF Serving's `--model_base_path`.
        version: a positive int; defaults to one more than the highest
            version already in `export_dir` (1 in a new folder).
        labels: None, a sequence of one name per class, the path of a text file
            with one name per line, or "imagenet" (the ImageNet names of a
            1000- or 21843-class head). Adds the `labels` output.
        top_k: how many classes `class_ids` and `labels` list per image.
        overwrite: replace an existing version folder instead of failing.
        max_pixels: the largest image (width x height, as its header declares)
            `serve_bytes` decodes; larger ones are refused before decoding.
            Defaults to `keras_vit.preprocessing.MAX_PIXELS` (40 megapixels).
        execution: "xla" compiles the model's part of every signature with XLA
            (the server must allow it: TF Serving refuses XLA on CPUs unless
            started with `--xla_cpu_compilation_enabled=true`); "auto" and
            "graph" export a plain graph, which every server runs. The machine
            that serves is not the one that exports, so "auto" measures
            nothing here, and `KERAS_VIT_EXECUTION` does not apply.
            TensorFlow backend only.
        precision: "bfloat16" exports the model under Keras' mixed_bfloat16
            policy (`keras_vit.runtime.precision`: the same weights, bfloat16 matrix
            products, float32 head and outputs), for servers whose processors
            multiply bfloat16 natively; "float32" (the default) and "auto"
            export float32: as for `execution`, the serving machine is not this
            one, so "auto" measures nothing here.
        max_tokens: a NaFlex model's sequence budget, the most patches an image
            is packed into (SigLIP 2's 256, 576, 784 or 1024); default: the
            grid its position embeddings are stored for. Refused for a model
            that takes images of one size.

    Returns:
        The path of the version folder written.

    The SavedModel is written to a temporary folder inside `export_dir` and
    renamed into place when complete, so TF Serving, which watches the folder,
    never sees a half-written version, and a failed export leaves none.
    """
    model = merge_lora(model)  # an ordinary graph: TF Serving needs no LoRA
    if check_precision(precision) == "bfloat16":
        model = bfloat16_model(model)
    naflex = naflex_layout(model)
    if naflex is None and max_tokens is not None:
        raise ArgumentError("max_tokens is a NaFlex model's sequence budget; this model takes "
                            "images of one size.")
    image_size = None if naflex is not None else _image_size(model)
    if naflex is not None:
        max_tokens = naflex[1] if max_tokens is None else positive_int(max_tokens, "max_tokens")
    labels = _resolve_labels(labels, _classes(model))
    # Every argument is checked before the folder is made: a refused call leaves nothing.
    if version is not None:
        positive_int(version, "version", what="a positive int (TF Serving's folder names)")
    if version is not None and os.path.exists(os.path.join(export_dir, str(version))) \
            and not overwrite:
        raise PathExistsError(f"{os.path.join(export_dir, str(version))} already exists; pass "
                              "another version, or overwrite=True.")
    positive_int(max_pixels, "max_pixels")
    _check_top_k(top_k)
    # Asked for, never from KERAS_VIT_EXECUTION: a default that TF Serving refuses would
    # only show on the server.
    jit_compile = check_execution(execution or "auto") == "xla"
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise PathExistsError(f"{export_dir} is a file; a SavedModel's base folder goes there.")
    os.makedirs(export_dir, exist_ok=True)
    remove_temporaries(export_dir)  # what exports that died (killed, power cut) left

    archive = _archive(model, labels, top_k, image_size, with_bytes=True,
                       max_pixels=max_pixels, jit_compile=jit_compile, max_tokens=max_tokens)
    # A hidden name (TF Serving loads integer names only), renamed into place when whole.
    with temporary_folder(os.path.join(export_dir, "model")) as staging:
        archive.write_out(staging, verbose=False, options=_save_options())
        return _move_into_place(staging, export_dir, version, overwrite)


def _move_into_place(written, export_dir, version, overwrite):
    """Renames the written SavedModel to `export_dir/<version>`; returns that path.

    The rename is the commit: it fails when the version folder exists, so two
    exports into one folder at once never replace each other. Without a
    `version`, the loser takes the next number; with one, it raises. An
    overwritten version goes out of TF Serving's sight in one rename and is
    deleted after: a kill leaves a whole version or none, never a half-deleted
    one.
    """
    for _ in range(100):
        number = next_version(export_dir) if version is None else version
        target = os.path.join(export_dir, str(number))
        try:
            return publish_folder(written, target, replace=overwrite)
        except FileExistsError:
            if version is not None:
                raise PathExistsError(f"{target} already exists (another export wrote it "
                                      "meanwhile); pass another version, or "
                                      "overwrite=True.") from None
    raise PathExistsError(f"Could not claim a version folder in {export_dir}: other exports "
                          "keep taking them.")


def export_tflite(model, path, top_k=5, quantize=None, calibration=None, precision=None):
    """Converts `model` to a TFLite file at `path`, with TFLite's builtin ops only.

    `quantize`: None (float32), "float16", "dynamic" or "int8" (full-integer, calibrated on
    `calibration`, pixels `(n, height, width, 3)` in [0, 255]); keras_vit/export/quantized.py.

    The file has one signature, `serving_default`, as the SavedModel's: float32
    pixels `(batch, height, width, 3)` in [0, 255] in; `logits`, `probabilities`
    and `class_ids` out. Use `ai_edge_litert.interpreter.Interpreter(path).get_signature_runner()`
    (keras_vit.export.quantized.litert_interpreter: TensorFlow's deprecated one as a fallback).
    Models whose weights exceed TFLite's 2 GiB FlatBuffer limit are refused.
    `precision`: "float32" or "auto" (float32: TFLite has no bfloat16 kernels; "bfloat16"
    is refused). Returns `path`.
    """
    if check_precision(precision) == "bfloat16":
        raise ArgumentError("precision='bfloat16' does not apply to TFLite, which has no "
                            "bfloat16 kernels; quantize='float16' halves the file instead.")
    model = merge_lora(model)  # one kernel per projection, not a LoRA graph
    size = _image_size(model)
    _check_top_k(top_k)
    if os.path.isdir(path):  # checked before the conversion, which takes a minute for B/16
        raise PathExistsError(f"{path} is a folder; a TFLite export writes one file there.")
    weight_bytes = sum(int(np.prod(w.shape)) * 4 for w in model.weights)
    if weight_bytes >= TFLITE_MAX_BYTES:
        raise ArgumentError(f"{model.name} has {weight_bytes / 2 ** 30:.1f} GiB of float32 weights; "
                            "a TFLite file holds at most 2 GiB. Export a smaller variant.")
    with tempfile.TemporaryDirectory() as saved_model:
        _archive(model, None, top_k, size, with_bytes=False).write_out(saved_model, verbose=False,
                                                                       options=_save_options())
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model,
                                                             signature_keys=["serving_default"])
        # Builtins only: no Flex (TensorFlow) ops, which phones' TFLite runtimes lack.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        from keras_vit._support.tf_log import dropped_if_refused
        from keras_vit.export.quantized import configure_converter, convert

        if quantize is not None:
            configure_converter(converter, quantize, calibration)
        with dropped_if_refused():  # a refusal is its one line, not the converter's log
            try:
                content = convert(converter, quantize)
            except Exception as error:  # the converter's own error type is not public API
                raise ArgumentError(f"{model.name} does not convert to TFLite with builtin ops "
                                    f"only (Flex ops are not available on phones): {error}"
                                    ) from error
    write_bytes(path, content)
    return path


def next_version(export_dir):
    """One more than the highest integer-named folder in `export_dir` (1 if none)."""
    if not os.path.isdir(export_dir):
        return 1
    versions = [int(name) for name in os.listdir(export_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def _check_top_k(top_k):
    positive_int(top_k, "top_k")


def _archive(model, labels, top_k, image_size, with_bytes, max_pixels=MAX_PIXELS,
             jit_compile=False, max_tokens=None):
    """An ExportArchive whose endpoints run preprocessing, `model` and the outputs
    (`image_size` None and `max_tokens` the budget for a NaFlex model)."""
    from keras_vit.runtime import naflex_inputs

    classes = _classes(model)
    naflex = naflex_layout(model)
    # A model built with dynamic_image_size takes pixels of any size; image_size is then the
    # size its position embeddings are stored for, to which serve_bytes resizes. A NaFlex
    # model takes any size too: each image is packed at its own aspect ratio.
    any_size = naflex is not None or takes_any_size(model)
    _check_top_k(top_k)
    top_k = min(int(top_k), classes)
    softmax_head = has_softmax_head(model)
    to_model_input = model_input(model)
    preprocessing = model_preprocessing(model)  # the resize its weights' source uses
    label_table = None if labels is None else tf.constant(list(labels), tf.string)
    archive = keras.export.ExportArchive()
    call = _tensorflow_call(model, _input_spec(model, naflex, image_size, any_size), archive,
                            jit_compile)
    if naflex is None:
        pixel_inputs = to_model_input

        def file_inputs(image_bytes):
            return to_model_input(decode_images(image_bytes, image_size, max_pixels=max_pixels,
                                                preprocessing=preprocessing))
    elif not with_bytes:  # TFLite: images of the stored size, cut into patches
        def pixel_inputs(pixels):
            return naflex_inputs.one_size_inputs(model)(to_model_input(pixels))
    else:
        def pixel_inputs(pixels):
            return naflex_inputs.packed_pixels(pixels, naflex[0], max_tokens, to_model_input,
                                               preprocessing)

        def file_inputs(image_bytes):
            return naflex_inputs.packed_image_files(image_bytes, naflex[0], max_tokens,
                                                    to_model_input, max_pixels, preprocessing)

    def classify(inputs):
        scores = tf.cast(call(inputs), tf.float32)
        # A softmax head returns probabilities; their log is a valid set of logits.
        logits = tf.math.log(scores) if softmax_head else scores
        probabilities = scores if softmax_head else tf.nn.softmax(logits, axis=-1)
        class_ids = tf.math.top_k(probabilities, k=top_k).indices
        outputs = {"logits": logits, "probabilities": probabilities, "class_ids": class_ids}
        if label_table is not None:
            outputs["labels"] = tf.gather(label_table, class_ids)
        return outputs

    def serve_images(images):
        return classify(pixel_inputs(tf.cast(
            _checked_pixels(images, None if any_size else image_size), tf.float32)))

    def serve_bytes(image_bytes):
        return classify(file_inputs(_checked_image_bytes(image_bytes)))

    # The SavedModel's pixel inputs take any height and width, so a wrong size reaches
    # the check that names the right one (a fixed size in the signature is not enforced
    # by TF Serving: the request fails deep inside the model instead). TFLite has no
    # checks to run, and keeps the fixed size.
    pixel_shape = (None, *image_size, 3) if not with_bytes else (None, None, None, 3)
    endpoints = [("serving_default",
                  serve_images if with_bytes else
                  lambda images: classify(pixel_inputs(tf.cast(images, tf.float32))),
                  tf.TensorSpec(pixel_shape, tf.float32, name="images"))]
    if with_bytes:
        endpoints += [
            # Any rank, so a scalar string reaches the check that says what to send instead.
            ("serve_bytes", serve_bytes, tf.TensorSpec(None, tf.string, name="image_bytes")),
            # A signature has one input dtype: gRPC clients holding uint8 pixels use this one.
            ("serve_uint8", serve_images, tf.TensorSpec(pixel_shape, tf.uint8, name="images"))]
    for name, function, spec in endpoints:
        if keras.backend.backend() == "tensorflow":
            archive.add_endpoint(name, function, [spec])
        else:
            # The model is already TensorFlow (below); the rest is TensorFlow code, which
            # JAX cannot trace: hand the archive a traced tf.function, which it keeps as is.
            traced = tf.function(function, input_signature=[spec])
            traced.get_concrete_function()
            archive.add_endpoint(name, traced)
    # `tf.saved_model.load(path)(images)` as well as `.signatures[...]`: TensorFlow makes a
    # loaded object callable when it was saved with a `__call__` function. ExportArchive has
    # no public way to add one, so it goes on the object the archive saves (private Keras:
    # checked on the releases _private_keras names, refused clearly on others).
    check_private_keras("A callable SavedModel", archive, "_tf_trackable")
    archive._tf_trackable.__call__ = archive._tf_trackable.serving_default
    return archive


def _save_options():
    """None on TensorFlow; elsewhere, no custom gradients: saving the ones jax2tf attaches
    fails ("Found invalid capture ... when saving custom gradients"), and serving needs none."""
    if keras.backend.backend() == "tensorflow":
        return None
    return tf.saved_model.SaveOptions(experimental_custom_gradients=False)


def _input_spec(model, naflex, image_size, any_size):
    """What `model` takes, as TensorSpecs: `(batch, height, width, channels)` images (any size
    where `any_size`), or a NaFlex model's (`naflex`: its naflex_layout) packed patches and
    grids."""
    from keras_vit.layer_names import GRID, PATCHES

    if naflex is not None:
        pixels = naflex[0] ** 2 * model.get_layer(EMBEDDING).channels  # one patch, flattened
        return {PATCHES: tf.TensorSpec((None, None, pixels), tf.float32, name=PATCHES),
                GRID: tf.TensorSpec((None, 2), tf.int32, name=GRID)}
    size = (None, None) if any_size else tuple(image_size)
    return tf.TensorSpec((None, *size, model.input_shape[-1]), tf.float32, name="images")


def _tensorflow_call(model, input_spec, archive, jit_compile=False):
    """`model`'s forward pass as a TensorFlow callable, tracked by `archive`.

    On the TensorFlow backend that is the model itself. On another backend (JAX),
    Keras' own export converts the model alone (jax2tf) into a SavedModel, which is
    loaded back as a TensorFlow function; the signatures around it (decoding,
    softmax, top-k, labels) are TensorFlow code that JAX could not trace.
    """
    if keras.backend.backend() == "tensorflow":
        archive.track(model)
        if jit_compile:  # the model alone: decoding and string ops have no XLA kernels
            return tf.function(lambda images: model(images, training=False), jit_compile=True,
                               autograph=False)
        return lambda images: model(images, training=False)
    inner = keras.export.ExportArchive()
    inner.track(model)
    inner.add_endpoint("call", lambda inputs: model(inputs, training=False), [input_spec])
    with tempfile.TemporaryDirectory() as folder:
        inner.write_out(os.path.join(folder, "model"), verbose=False, options=_save_options())
        converted = tf.saved_model.load(os.path.join(folder, "model"))
    archive.track(converted)
    return converted.call


def _refuse_unless(ok, value, message, summarize=20):
    """`value`, once `ok` holds; else InvalidArgument with `message` (strings and tensors).

    A data dependency, not a control one: what follows cannot start before the
    check, so a bad request fails with this message and not inside the model.
    """
    def refuse():
        with tf.control_dependencies([tf.debugging.Assert(False, message, summarize=summarize)]):
            return tf.identity(value)

    return tf.cond(ok, lambda: tf.identity(value), refuse)


def _checked_pixels(images, image_size):
    """`images` with shape `(batch, *image_size, 3)` (any size when `image_size` is None), or
    InvalidArgument naming the problem: another size, or items holding NaN, Inf or values
    outside `PIXEL_RANGE` (by index)."""
    if image_size is not None:
        height, width = image_size
        size = tf.shape(images)[1:3]
        images = _refuse_unless(
            tf.reduce_all(tf.equal(size, [height, width])), images,
            [f"images must be {height}x{width} pixels (height x width, the model's size); got",
             size])
        images = tf.ensure_shape(images, (None, height, width, 3))
    if images.dtype == tf.uint8:  # every uint8 is a pixel value
        return images
    low, high = PIXEL_RANGE
    # NaN compares false with everything, so it fails this test too.
    valid = tf.reduce_all((images >= low) & (images <= high), axis=[1, 2, 3])
    return _refuse_unless(
        tf.reduce_all(valid), images,
        [f"images must hold finite pixel values in [{low:g}, {high:g}]; NaN, Inf or values "
         "outside it in the items (by index, from 0):", tf.where(~valid)[:, 0]])


def _checked_image_bytes(image_bytes):
    """`image_bytes` as a `(batch,)` string tensor of image files, or InvalidArgument: a
    scalar (not a batch), or items that are not JPEG, PNG, GIF, BMP or WebP (by index)."""
    rank = tf.rank(image_bytes)
    image_bytes = _refuse_unless(
        tf.equal(rank, 1), image_bytes,
        ["image_bytes must be a batch (a list) of encoded images, shape (batch,); got rank",
         rank, "- send one image as a list of one"])
    image_bytes = tf.reshape(image_bytes, [-1])  # rank 1 by now; says so to what follows
    # The first 12 bytes, padded: substr refuses a position past an item's end.
    head = tf.strings.substr(image_bytes, 0, 12) + b"\0" * 12
    known = tf.zeros_like(image_bytes, tf.bool)
    for offset, magic in _SIGNATURES:
        known |= tf.equal(tf.strings.substr(head, offset, len(magic)), magic)
    return _refuse_unless(
        tf.reduce_all(known), image_bytes,
        [f"image_bytes items that are not {IMAGE_FORMATS} files (by index, from 0):",
         tf.where(~known)[:, 0]])


def _image_size(model):
    """The model's image size: its input's, or for a model that takes any size
    (`dynamic_image_size=True`, NaFlex) the size its position embeddings are stored for."""
    naflex = naflex_layout(model)
    if naflex is not None:
        if model.get_layer(EMBEDDING).channels != 3:
            raise ArgumentError(f"Export serves RGB images; {model.name} takes "
                                f"{model.get_layer(EMBEDDING).channels} channels.")
        return stored_size(model)
    shape = model.input_shape
    size = stored_size(model) if takes_any_size(model) else None
    if not isinstance(shape, tuple) or len(shape) != 4 or (None in shape[1:3] and size is None):
        raise ArgumentError(f"Export needs a model with one image input of fixed size (batch, height, "
                            f"width, 3); {model.name} takes {shape}.")
    if shape[3] != 3:
        raise ArgumentError(f"Export serves RGB images; {model.name} takes {shape[3]} channels.")
    return size or (shape[1], shape[2])


def _classes(model):
    shape = model.output_shape
    if not isinstance(shape, tuple) or len(shape) != 2 or shape[1] is None:
        raise ArgumentError(f"Export needs a classifier with output (batch, classes); {model.name} "
                            f"returns {shape}. Build it with include_top=True.")
    return shape[1]


def _resolve_labels(labels, classes):
    if labels is None:
        return None
    if isinstance(labels, str) and labels == "imagenet":
        names = imagenet_label_names(classes)
        if names is None:
            raise ArgumentError(f'labels="imagenet" needs a 1000- or 21843-class head, not {classes}.')
        return names
    if isinstance(labels, (str, os.PathLike)):
        labels = read_labels(labels)
    labels = [str(name) for name in labels]
    if len(labels) != classes:
        raise ArgumentError(f"Got {len(labels)} labels for a model with {classes} classes; "
                            "give exactly one name per class, in the head's order.")
    return labels

