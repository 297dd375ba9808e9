"""Export a classifier for TF Serving (SavedModel) and for phones (TFLite).

`export_saved_model` writes TF Serving's layout, `export_dir/<version>/`, with
two signatures that take raw pixels or encoded image files and do all the
preprocessing inside the graph, so a client needs no keras_vit code:

- `serving_default(images)`: float32 `(batch, height, width, 3)`, pixel values
  in [0, 255] at the model's size (JSON numbers and uint8 data fit as they are;
  TF Serving converts JSON numbers to the signature's dtype).
- `serve_bytes(image_bytes)`: string `(batch,)` of JPEG, PNG, GIF, BMP or WebP
  files of any size, decoded to RGB and resized (bilinear) to the model's size
  by `keras_vit.preprocessing.decode_images`, the path every image takes.
  An image whose header declares more than `max_pixels` pixels is refused
  (InvalidArgument) before it is decoded; the limit is a constant of the
  graph, so TF Serving enforces it without keras_vit.

Both return `logits` `(batch, classes)`, `probabilities` `(batch, classes)`,
`class_ids` `(batch, k)` (int32, best first) and, when labels are given,
`labels` `(batch, k)` (strings of those classes).
"""

import os
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf

from keras_vit.atomic import write_bytes
from keras_vit.labels import imagenet_label_names, read_labels
from keras_vit.preprocessing import MAX_PIXELS, decode_images, preprocess_input

__all__ = ["export_saved_model", "export_tflite", "next_version", "has_softmax_head",
           "model_input"]

# A TFLite file is one FlatBuffer, which cannot exceed 2 GiB.
TFLITE_MAX_BYTES = 2 ** 31


def export_saved_model(model, export_dir, version=None, labels=None, top_k=5, overwrite=False,
                       max_pixels=MAX_PIXELS):
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

    Returns:
        The path of the version folder written.

    The SavedModel is written to a temporary folder inside `export_dir` and
    renamed into place when complete, so TF Serving, which watches the folder,
    never sees a half-written version, and a failed export leaves none.
    """
    height, width = _image_size(model)
    labels = _resolve_labels(labels, _classes(model))
    os.makedirs(export_dir, exist_ok=True)
    version = next_version(export_dir) if version is None else version
    if not isinstance(version, int) or isinstance(version, bool) or version <= 0:
        raise ValueError(f"version must be a positive int (TF Serving's folder names), got {version!r}.")
    target = os.path.join(export_dir, str(version))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"{target} already exists; pass another version, or overwrite=True.")

    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels <= 0:
        raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}.")
    archive = _archive(model, labels, top_k, (height, width), with_bytes=True,
                       max_pixels=max_pixels)
    # The leading dot keeps TF Serving, which loads integer-named folders only, away.
    staging = tempfile.mkdtemp(prefix=f".export-{version}-", dir=export_dir)
    try:
        archive.write_out(os.path.join(staging, "model"), verbose=False, options=_save_options())
        if os.path.exists(target):
            shutil.rmtree(target)
        os.rename(os.path.join(staging, "model"), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def export_tflite(model, path, top_k=5):
    """Converts `model` to a TFLite file at `path`, with TFLite's builtin ops only.

    The file has one signature, `serving_default`, as the SavedModel's: float32
    pixels `(batch, height, width, 3)` in [0, 255] in; `logits`, `probabilities`
    and `class_ids` out. Use `tf.lite.Interpreter(path).get_signature_runner()`.
    Models whose weights exceed TFLite's 2 GiB FlatBuffer limit are refused.
    Returns `path`.
    """
    size = _image_size(model)
    weight_bytes = sum(int(np.prod(w.shape)) * 4 for w in model.weights)
    if weight_bytes >= TFLITE_MAX_BYTES:
        raise ValueError(f"{model.name} has {weight_bytes / 2 ** 30:.1f} GiB of float32 weights; "
                         "a TFLite file holds at most 2 GiB. Export a smaller variant.")
    with tempfile.TemporaryDirectory() as saved_model:
        _archive(model, None, top_k, size, with_bytes=False).write_out(saved_model, verbose=False,
                                                                       options=_save_options())
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model,
                                                             signature_keys=["serving_default"])
        # Builtins only: no Flex (TensorFlow) ops, which phones' TFLite runtimes lack.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        try:
            content = converter.convert()
        except Exception as error:  # the converter's own error type is not public API
            raise ValueError(f"{model.name} does not convert to TFLite with builtin ops only "
                             f"(Flex ops are not available on phones): {error}") from error
    write_bytes(path, content)
    return path


def next_version(export_dir):
    """One more than the highest integer-named folder in `export_dir` (1 if none)."""
    if not os.path.isdir(export_dir):
        return 1
    versions = [int(name) for name in os.listdir(export_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def _archive(model, labels, top_k, image_size, with_bytes, max_pixels=MAX_PIXELS):
    """An ExportArchive whose endpoints run preprocessing, `model` and the outputs."""
    classes = _classes(model)
    top_k = min(int(top_k), classes)
    if top_k <= 0:
        raise ValueError(f"top_k must be a positive int, got {top_k}.")
    softmax_head = has_softmax_head(model)
    to_model_input = model_input(model)
    label_table = None if labels is None else tf.constant(list(labels), tf.string)
    archive = keras.export.ExportArchive()
    call = _tensorflow_call(model, image_size, archive)

    def classify(pixels):
        scores = tf.cast(call(to_model_input(pixels)), tf.float32)
        # A softmax head returns probabilities; their log is a valid set of logits.
        logits = tf.math.log(scores) if softmax_head else scores
        probabilities = scores if softmax_head else tf.nn.softmax(logits, axis=-1)
        class_ids = tf.math.top_k(probabilities, k=top_k).indices
        outputs = {"logits": logits, "probabilities": probabilities, "class_ids": class_ids}
        if label_table is not None:
            outputs["labels"] = tf.gather(label_table, class_ids)
        return outputs

    def serve_images(images):
        return classify(tf.cast(images, tf.float32))

    def serve_bytes(image_bytes):
        return classify(decode_images(image_bytes, image_size, max_pixels=max_pixels))

    endpoints = [("serving_default", serve_images,
                  tf.TensorSpec((None, *image_size, 3), tf.float32, name="images"))]
    if with_bytes:
        endpoints += [
            ("serve_bytes", serve_bytes, tf.TensorSpec((None,), tf.string, name="image_bytes")),
            # A signature has one input dtype: gRPC clients holding uint8 pixels use this one.
            ("serve_uint8", serve_images,
             tf.TensorSpec((None, *image_size, 3), tf.uint8, name="images"))]
    for name, function, spec in endpoints:
        if keras.backend.backend() == "tensorflow":
            archive.add_endpoint(name, function, [spec])
        else:
            # The model is already TensorFlow (below); the rest is TensorFlow code, which
            # JAX cannot trace: hand the archive a traced tf.function, which it keeps as is.
            traced = tf.function(function, input_signature=[spec])
            traced.get_concrete_function()
            archive.add_endpoint(name, traced)
    return archive


def _save_options():
    """None on TensorFlow; elsewhere, no custom gradients: saving the ones jax2tf attaches
    fails ("Found invalid capture ... when saving custom gradients"), and serving needs none."""
    if keras.backend.backend() == "tensorflow":
        return None
    return tf.saved_model.SaveOptions(experimental_custom_gradients=False)


def _tensorflow_call(model, image_size, archive):
    """`model`'s forward pass as a TensorFlow callable, tracked by `archive`.

    On the TensorFlow backend that is the model itself. On another backend (JAX),
    Keras' own export converts the model alone (jax2tf) into a SavedModel, which is
    loaded back as a TensorFlow function; the signatures around it (decoding,
    softmax, top-k, labels) are TensorFlow code that JAX could not trace.
    """
    if keras.backend.backend() == "tensorflow":
        archive.track(model)
        return lambda images: model(images, training=False)
    channels = model.input_shape[-1]
    inner = keras.export.ExportArchive()
    inner.track(model)
    inner.add_endpoint("call", lambda images: model(images, training=False),
                       [tf.TensorSpec((None, *image_size, channels), tf.float32, name="images")])
    with tempfile.TemporaryDirectory() as folder:
        inner.write_out(os.path.join(folder, "model"), verbose=False, options=_save_options())
        converted = tf.saved_model.load(os.path.join(folder, "model"))
    archive.track(converted)
    return converted.call


def _image_size(model):
    shape = model.input_shape
    if not isinstance(shape, tuple) or len(shape) != 4 or None in shape[1:3]:
        raise ValueError(f"Export needs a model with one image input of fixed size (batch, height, "
                         f"width, 3); {model.name} takes {shape}.")
    if shape[3] != 3:
        raise ValueError(f"Export serves RGB images; {model.name} takes {shape[3]} channels.")
    return shape[1], shape[2]


def _classes(model):
    shape = model.output_shape
    if not isinstance(shape, tuple) or len(shape) != 2 or shape[1] is None:
        raise ValueError(f"Export needs a classifier with output (batch, classes); {model.name} "
                         f"returns {shape}. Build it with include_top=True.")
    return shape[1]


def has_softmax_head(model):
    """Whether `model`'s "head" layer ends in a softmax (it returns probabilities, not logits)."""
    try:
        head = model.get_layer("head")
    except ValueError:
        return False
    return getattr(head, "activation", None) is keras.activations.softmax


def model_input(model):
    """What turns [0, 255] pixels into `model`'s input: `preprocess_input`, or nothing for a
    model built with `include_preprocessing=True` (its "preprocessing" layer does it)."""
    try:
        layer = model.get_layer("preprocessing")
    except ValueError:
        return preprocess_input
    if isinstance(layer, keras.layers.Rescaling):
        return lambda pixels: pixels
    return preprocess_input


def _resolve_labels(labels, classes):
    if labels is None:
        return None
    if isinstance(labels, str) and labels == "imagenet":
        names = imagenet_label_names(classes)
        if names is None:
            raise ValueError(f'labels="imagenet" needs a 1000- or 21843-class head, not {classes}.')
        return names
    if isinstance(labels, (str, os.PathLike)):
        labels = read_labels(labels)
    labels = [str(name) for name in labels]
    if len(labels) != classes:
        raise ValueError(f"Got {len(labels)} labels for a model with {classes} classes; "
                         "give exactly one name per class, in the head's order.")
    return labels

