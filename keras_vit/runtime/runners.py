"""The runners that stream images through a model, a batch at a time: `KerasRunner` (pixels
decoded and resized in tf.data, then a Keras model, in the precision chosen) and
`SavedModelRunner` (the file bytes into an exported SavedModel's `serve_bytes`);
`model_runner` picks one. Prediction (runtime/inference.py) and evaluation
(runtime/evaluation.py) both run through them; memory is bounded by the batch.
"""

import os
import time

import numpy as np

from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError, ImageError
from keras_vit.layer_names import EMBEDDING
from keras_vit.runtime.execution import check_execution, choose_jit_compile, compiled_forward
from keras_vit.runtime.precision import check_precision

__all__ = ["DEFAULT_BATCH_SIZE", "READ_ERRORS", "KerasRunner", "SavedModelRunner", "model_runner",
           "check_positive", "read_error_message"]

DEFAULT_BATCH_SIZE = 32
# "auto" execution times graph and XLA (about 8 batches' worth) only for at least this many
# batches of work; less runs as a graph unless a choice for the shape is already stored.
CALIBRATE_AFTER_BATCHES = 20
# After this many full batches in a mode "auto" chose (the first, which traces, aside), their
# fastest is compared with the other mode's stored time (execution.recheck_choice).
RECHECK_AFTER_BATCHES = 3


def check_positive(**values):
    """Raises ArgumentError for any of `values` that is not a positive int (shared with
    keras_vit.runtime.evaluation)."""
    for name, value in values.items():
        positive_int(value, name)


def model_runner(model, batch_size, max_pixels, small=False, execution=None, images=0,
                 precision=None, compare_images=None, resize=None, max_tokens=None):
    """The runner for `model` (a Keras model, a `.keras` file or a training run's folder, loaded
    by keras_vit.models.factory.load, or a SavedModel folder, whose runner loads its
    serve_bytes signature through the factory): `run_files` / `run_examples` give (outputs,
    error) per image. Shared with keras_vit.runtime.evaluation. `precision`, `compare_images`,
    `resize` and `max_tokens` as KerasRunner's."""
    from keras_vit.models.factory import is_saved_model, keras_file, load

    if isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
        if keras_file(model) is None:
            if not is_saved_model(model):
                raise ArgumentError(f"model must be a Keras model, a .keras file or a SavedModel "
                                    f"folder, got {model!r}.")
            if max_tokens is not None:
                raise ArgumentError("max_tokens is a NaFlex model's sequence budget; a SavedModel "
                                    "takes the images it was exported for.")
            if check_precision(precision) != "float32":
                raise ArgumentError(f"precision={precision!r} applies to a Keras model; a "
                                    "SavedModel computes in the precision it was exported with.")
            if resize is not None:
                raise ArgumentError(f"resize={resize!r} applies to a Keras model; a SavedModel "
                                    "resizes as the model it was exported from recorded.")
            return SavedModelRunner(model, batch_size)
        model = load(model)
    return KerasRunner(model, batch_size, max_pixels, small, execution=execution, images=images,
                       precision=precision, compare_images=compare_images, resize=resize,
                       max_tokens=max_tokens)


def _failure_message(path, read):
    """Why `path` failed in the pipeline, as one line: the error `read(path)` raises now."""
    try:
        read(path)
    except READ_ERRORS as error:
        return read_error_message(path, error)
    return f"{path} could not be read (it changed while it was being read)."


# What reading one image can raise: its row's error, never the run's end. ValueError: a path
# that cannot name a file (a NUL character, a character the file system cannot encode).
READ_ERRORS = (ImageError, OSError, ValueError)


def read_error_message(path, error):
    """One line for an error of READ_ERRORS raised reading `path`."""
    if isinstance(error, (ImageError, OSError)):
        return str(error)
    return f"{path!r} cannot name a file on this system ({error})."


def _chunks(items, size):
    """Lists of `size` consecutive items (the last may be shorter)."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _names_dict(names):
    return dict(enumerate(names)) if isinstance(names, (list, tuple)) else (names or {})


class KerasRunner:
    """Pixels decoded and resized in tf.data, then the Keras model, one batch at a time.

    `precision` as `keras_vit.runtime.precision.choose_precision` takes it, chosen at the first batch
    (which calibrates "auto"). Run in bfloat16, the first `compare_images` images (None: all)
    also run in float32, and `precision_record["agreement"]` holds the two's top-1 agreement
    and largest logit difference (not for `outputs="raw"`: features have no classes).
    Images are resized as the model's preprocessing of record says, or as `resize` ("stretch"
    or "crop") overrides it (keras_vit.preprocessing_record)."""

    def __init__(self, model, batch_size, max_pixels, small=False, outputs="probabilities",
                 execution=None, images=0, precision=None, compare_images=None, resize=None,
                 max_tokens=None):
        from keras_vit.models.image_size import image_size, naflex_layout
        from keras_vit.models.vit import has_softmax_head
        from keras_vit.normalization import model_input
        from keras_vit.preprocessing_record import model_preprocessing, resized_preprocessing

        self.model, self.batch_size, self.max_pixels = model, batch_size, max_pixels
        self.to_input, self.softmax_head = model_input(model), has_softmax_head(model)
        # A NaFlex model takes each image at its own aspect ratio, as patches packed to a
        # sequence budget (keras_vit/runtime/naflex_inputs.py): `max_tokens`, else its stored grid's.
        self.naflex = naflex_layout(model)
        if self.naflex is None and max_tokens is not None:
            raise ArgumentError("max_tokens is the sequence budget of a NaFlex model (SigLIP 2 "
                                "NaFlex); this model takes images of one size.")
        if self.naflex is not None and resize is not None:
            raise ArgumentError(f"resize={resize!r} applies to a model of one input size; a NaFlex "
                                "model takes each image at its own aspect ratio (max_tokens).")
        self.resize = resize
        # NaFlex packs each image whole at its own grid (naflex_inputs), in the interpolation
        # of the record; the record's size and crop do not apply.
        self.preprocessing = None if self.naflex is not None else \
            resized_preprocessing(model_preprocessing(model), resize)
        self._packing = model_preprocessing(model) if self.naflex is not None else None
        if self.naflex is not None:
            patch, stored = self.naflex
            self.max_tokens = stored if max_tokens is None else positive_int(max_tokens, "max_tokens")
            self.size, self.channels = None, model.get_layer(EMBEDDING).channels
        else:  # A model that takes any size gets every image at the size it was trained at:
            # one batch holds one size, and the stored grid needs no resize of its embeddings.
            self.size, self.channels = image_size(model), model.input_shape[-1]
        # A handful of images: a direct call; more: a compiled call, as a graph or under XLA,
        # whichever is faster here (timed only for work that repays the timing, on one input
        # shape: images of one size, or a NaFlex model's packed patches and grids).
        self.small = small
        self.execution, self.images = execution, images
        self.jit_compile = None  # the mode chosen, once the first batch has run
        self._compiled = None
        self.raw = outputs == "raw"  # the model's outputs as they are (features, not classes)
        self.precision = check_precision(precision)
        self.precision_record = None  # once the first batch has run
        self._choice, self._reference = None, None
        self._recheck = None  # seconds of full batches, while "auto"'s choice is rechecked
        self._compare_left = 0 if self.raw else (float("inf") if compare_images is None
                                                 else compare_images)
        self._classes = None

    @property
    def classes(self):
        if self._classes is None and hasattr(self.model, "output_shape"):
            self._classes = int(self.model.output_shape[-1])
        return self._classes  # None for a stand-in without output_shape

    def names(self, labels):
        from keras_vit.labels import imagenet_label_names

        classes = self.classes
        if labels is not None and classes is not None and len(labels) != classes:
            raise ArgumentError(f"labels names {len(labels)} classes, but the model has "
                                f"{classes}.")
        return _names_dict(labels or imagenet_label_names(classes))

    def run_files(self, paths):
        import tensorflow as tf

        from keras_vit.data.image_files import load_batches
        from keras_vit.preprocessing import (
            JPEG_EXTENSIONS,
            decode_image,
            decode_jpeg,
            load_image,
            resize_image,
        )

        # All named .jpg/.jpeg: the JPEG-only decode, without the other formats' header walks
        # (about a millisecond an image in tf.data); a file it fails on is read again below.
        decode = decode_jpeg if all(str(p).lower().endswith(JPEG_EXTENSIONS) for p in paths) \
            and self.naflex is None else decode_image

        def load(path):
            image = decode(tf.io.read_file(path), self.channels, self.max_pixels)
            if self.naflex is not None:
                return self._packed(image)
            return resize_image(image, self.size, self.preprocessing)

        for chunk in _chunks(load_batches(paths, load, self.batch_size), self.batch_size):
            errors = {}
            for row, (index, pixels) in enumerate(chunk):
                if pixels is None:  # the general path: the reason, or a misnamed image's pixels
                    try:
                        pixels = load_image(paths[index], self.size or (1, 1), self.channels,
                                            self.max_pixels, self.preprocessing)  # or the reason
                        if self.naflex is not None:  # it reads after all: packed as it is
                            pixels = tf.nest.map_structure(np.asarray, load(paths[index]))
                        chunk[row] = (index, pixels)
                    except READ_ERRORS as error:
                        errors[index] = read_error_message(paths[index], error)
            good = [pixels for index, pixels in chunk if index not in errors]
            probabilities = iter(self._probabilities(self._stacked(good)) if good else ())
            for index, _ in chunk:
                yield (None, errors[index]) if index in errors else (next(probabilities), None)

    def run_examples(self, examples):
        """In-memory `(image uint8 (H, W, C), label)` examples (digits, TFDS), resized as
        `run_files` resizes a file."""
        import tensorflow as tf

        from keras_vit.data.datasets import to_rgb
        from keras_vit.preprocessing import resize_image

        def pixels(image, label):
            image = to_rgb(image) if self.channels == 3 else image
            if self.naflex is not None:
                return self._packed(tf.cast(image, tf.float32))
            return tf.clip_by_value(resize_image(image, self.size, self.preprocessing), 0.0, 255.0)

        batches = examples.map(pixels, num_parallel_calls=tf.data.AUTOTUNE) \
            .batch(self.batch_size).prefetch(tf.data.AUTOTUNE)
        for batch in batches.as_numpy_iterator():
            for probabilities in self._probabilities(batch):
                yield probabilities, None

    def _packed(self, image):
        """A decoded image as a NaFlex model's inputs, normalised (naflex_inputs.packed_image)."""
        from keras_vit.runtime.naflex_inputs import packed_image

        return packed_image(image, self.naflex[0], self.max_tokens, self.to_input, self._packing)

    def _stacked(self, rows):
        from keras_vit.runtime.naflex_inputs import stack_packed

        return np.stack(rows) if self.naflex is None else stack_packed(rows)

    def _probabilities(self, pixels):
        import keras

        x = self.to_input(pixels) if self.naflex is None else pixels  # packed: normalised
        if self._choice is None:
            self._choose(x)
        if self._compiled is None:
            scores = keras.ops.convert_to_numpy(self._choice.model(x, training=False))
        else:
            scores = self._timed_call(x)
        scores = scores.astype(np.float32)
        if self._choice.precision == "bfloat16" and self._compare_left > 0:
            self._compare(x, scores)
        if self.softmax_head or self.raw:
            return scores
        return keras.ops.convert_to_numpy(keras.ops.softmax(scores, axis=-1))


    def _timed_call(self, x):
        """The compiled call, as NumPy; under "auto" its full batches are timed, and the
        fastest of the first few rechecks the stored choice of mode."""
        import keras

        from keras_vit.runtime.execution import recheck_choice

        start = time.perf_counter()
        scores = keras.ops.convert_to_numpy(self._compiled(x))
        if self._recheck is not None and len(x) == self.batch_size:
            self._recheck.append(time.perf_counter() - start)
            if len(self._recheck) > RECHECK_AFTER_BATCHES:  # the first traced: left out
                recheck_choice(self._choice.model, (self.batch_size, *x.shape[1:]),
                               self.jit_compile, min(self._recheck[1:]))
                self._recheck = None
        return scores

    def _choose(self, x):
        """The precision, model and mode to run, from the first batch's inputs `x`."""
        import keras

        from keras_vit.runtime import precision as precisions

        if self.small or not isinstance(self.model, keras.Model) or self.naflex is not None:
            # A handful of images, a stand-in or packed NaFlex batches: the precision is not
            # timed (a NaFlex model's mode is, below, on its packed shapes).
            asked = self.precision
            if asked == "bfloat16":
                model, reason = precisions.bfloat16_model(self.model), "asked"
            else:
                model = self.model
                reason = "asked" if asked == "float32" else (
                    "too few images to time bfloat16" if self.small or self.naflex is None
                    else "bfloat16 is timed on images of one size, not packed patches")
            chosen = "bfloat16" if asked == "bfloat16" else "float32"
            self._choice = precisions.PrecisionChoice(
                chosen, model, None, {"precision": chosen, "asked": asked, "reason": reason})
            if self.naflex is not None and not self.small and isinstance(self.model, keras.Model):
                # Packed batches all have one shape (batch, max_tokens, patch pixels): one
                # compiled call, as a graph or under XLA ("auto": timed on packed patches).
                shapes = {name: (self.batch_size, *np.shape(value)[1:])
                          for name, value in x.items()}
                enough = self.images >= CALIBRATE_AFTER_BATCHES * self.batch_size
                self.jit_compile = choose_jit_compile(model, shapes, self.execution,
                                                      measure=enough)
                self._compiled = compiled_forward(model, self.jit_compile)
        else:
            batch_shape = (self.batch_size, *x.shape[1:])
            enough = self.images >= CALIBRATE_AFTER_BATCHES * self.batch_size
            self._choice = precisions.choose_precision(
                self.model, batch_shape, self.precision, self.execution, calibration=x,
                measure=enough)
            self.jit_compile = self._choice.jit_compile
            self._compiled = compiled_forward(self._choice.model, self.jit_compile)
            if self.jit_compile is not None and check_execution(self.execution) == "auto":
                self._recheck = []
        self.precision_record = self._choice.record

    def _compare(self, x, scores):
        """Runs the first images left to compare in float32 too, and adds their agreement."""
        import keras

        from keras_vit.runtime.agreement import agreement, merge_agreements

        count = int(min(self._compare_left, len(scores)))
        if self._reference is None:
            self._reference = (lambda images: self.model(images, training=False)) \
                if self._compiled is None else compiled_forward(self.model, False)
        first = {k: v[:count] for k, v in x.items()} if isinstance(x, dict) else x[:count]
        reference = keras.ops.convert_to_numpy(self._reference(first)).astype(np.float32)
        self.precision_record["agreement"] = merge_agreements(
            self.precision_record.get("agreement"), agreement(reference, scores[:count], self.softmax_head))
        self._compare_left -= count


class SavedModelRunner:
    """File bytes read in tf.data, then the export's `serve_bytes` signature, a batch a call."""

    def __init__(self, folder, batch_size):
        from keras_vit.models import factory

        self.serve = factory.load_serve_bytes(folder)
        self.batch_size = batch_size
        self.exported_names = {}
        spec = self.serve.structured_outputs["probabilities"]
        self.classes = int(spec.shape[-1])

    def names(self, labels):
        if labels is not None and len(labels) != self.classes:
            raise ArgumentError(f"labels names {len(labels)} classes, but the model has "
                                f"{self.classes}.")
        return _NamesWithExported(_names_dict(labels), self.exported_names)

    def run_files(self, paths):
        import tensorflow as tf

        from keras_vit.data.image_files import load_batches

        for chunk in _chunks(load_batches(paths, tf.io.read_file, self.batch_size),
                             self.batch_size):
            data = np.asarray([b"" if d is None else d for _, d in chunk], dtype=object)
            ok = np.asarray([d is not None for _, d in chunk])
            yield from self._run(data, ok, [paths[index] for index, _ in chunk])

    def run_examples(self, examples):
        import tensorflow as tf

        def png(image, label):  # the signature takes image files
            return tf.io.encode_png(image)

        batches = examples.map(png, num_parallel_calls=tf.data.AUTOTUNE).batch(self.batch_size)
        for data in batches.as_numpy_iterator():
            yield from self._run(data, np.ones(len(data), bool), [None] * len(data))

    def _run(self, data, ok, paths):
        """(probabilities, error) per image: the batch in one call; a batch the signature
        refuses (an image it cannot decode) image by image, to name the one that failed."""
        import tensorflow as tf

        from keras_vit.preprocessing import not_an_image

        good = [i for i in range(len(ok)) if ok[i]]
        results = {i: (None, _failure_message(paths[i], lambda p: open(p, "rb").close()))
                   for i in range(len(ok)) if not ok[i]}
        try:
            outputs = self._call(tf.constant(data[good])) if good else None
            for row, i in enumerate(good):
                results[i] = (self._row(outputs, row), None)
        except tf.errors.InvalidArgumentError:
            for i in good:
                try:
                    results[i] = (self._row(self._call(tf.constant(data[i:i + 1])), 0), None)
                except tf.errors.InvalidArgumentError as error:
                    results[i] = (None, str(not_an_image(paths[i] or f"image {i}", error)))
        return [results[i] for i in range(len(ok))]

    def _call(self, data):
        return self.serve(image_bytes=data)

    def _row(self, outputs, row):
        if "labels" in outputs:  # the names the export gave its own top-k
            for class_id, name in zip(outputs["class_ids"].numpy()[row].tolist(),
                                      outputs["labels"].numpy()[row]):
                self.exported_names.setdefault(class_id, name.decode("utf-8"))
        return outputs["probabilities"].numpy()[row]


class _NamesWithExported(dict):
    """Class names: the caller's, else those the SavedModel's outputs named so far."""

    def __init__(self, given, exported):
        super().__init__(given)
        self.exported = exported

    def get(self, key, default=None):
        if key in self:
            return self[key]
        return self.exported.get(key, default)
