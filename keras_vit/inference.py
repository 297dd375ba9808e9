"""Streaming inference: `predict_images` and `evaluate`, one result per image, memory bounded
by the batch.

Images flow through `tf.data` (files read and decoded in parallel by
`keras_vit.preprocessing`'s one decode path, batched, prefetched) into a Keras
model or an exported SavedModel's `serve_bytes` signature; a result leaves as
soon as its batch is done, so 100,000 images cost what one batch costs. A file
that cannot be read or decoded becomes a result with its error, and the others
go on.
"""

import dataclasses
import glob
import os

import numpy as np

from keras_vit.errors import ArgumentError, DatasetError, ImageError
from keras_vit.execution import check_execution
from keras_vit.preprocessing import IMAGE_EXTENSIONS, IMAGE_FORMATS, MAX_PIXELS

__all__ = ["ImagePrediction", "predict_images", "evaluate", "image_files"]

LIST_SUFFIXES = (".txt", ".lst")  # a source with one of these names lists image paths
DEFAULT_BATCH_SIZE = 32
# "auto" execution times graph and XLA (about 8 batches' worth) only for at least this many
# batches of work; less runs as a graph unless a choice for the shape is already stored.
CALIBRATE_AFTER_BATCHES = 20


@dataclasses.dataclass
class ImagePrediction:
    """One image's result: its `path` and its `top` classes as (probability, label) pairs,
    best first, with their `class_ids`; or `error`, why it could not be read (and no classes).
    `probabilities` holds every class's (None for a failed image)."""

    path: str
    top: list
    class_ids: list
    probabilities: np.ndarray | None = None
    error: str | None = None


def image_files(sources):
    """The image paths `sources` names, in order: files as given, folders by the image files
    under them (recursively, sorted), glob patterns by their matches (sorted), and text files
    (.txt, .lst) by the paths they list, one per line (relative to the working folder).

    Raises `ImageError` for a source that names nothing; a path a list names is kept as
    given (a missing one becomes a failed result when it is read).
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = []
    for source in map(os.fspath, sources):
        if os.path.isdir(source):
            paths += _folder_images(source)
        elif os.path.isfile(source) and source.lower().endswith(LIST_SUFFIXES):
            with open(source, encoding="utf-8") as f:
                paths += [line.strip() for line in f if line.strip()]
        elif os.path.isfile(source):
            paths.append(source)
        elif glob.has_magic(source) and glob.glob(source, recursive=True):
            for match in sorted(glob.glob(source, recursive=True)):
                paths += _folder_images(match) if os.path.isdir(match) else [match]
        else:
            raise ImageError(f"No such image file, folder or pattern: {source}")
    if not paths:
        raise ImageError(f"No {IMAGE_FORMATS} images found in {', '.join(sources)}.")
    return paths


def _folder_images(folder):
    found = []
    for parent, folders, files in os.walk(folder):
        folders.sort()
        found += [os.path.join(parent, name) for name in sorted(files)
                  if name.lower().endswith(IMAGE_EXTENSIONS)]
    return found


def predict_images(model, sources, batch_size=DEFAULT_BATCH_SIZE, top=5, labels=None,
                   max_pixels=MAX_PIXELS, execution=None):
    """An iterator of `ImagePrediction`s, one per image of `sources` (`image_files`), in order.

    `model`: a Keras model, a `.keras` file, or an exported SavedModel folder (a version
    folder or its base; its `serve_bytes` signature decodes, with the pixel budget it was
    exported with). `labels`: class names (default: ImageNet's for 1000- and 21843-class
    heads, the SavedModel's own, else "class <index>"). Images are decoded in parallel and
    run `batch_size` at a time; a file that cannot be read becomes a result with `error`.
    `execution`: how TensorFlow runs a Keras model on a CPU, "auto" (the faster of
    "graph" and "xla" on this machine, `keras_vit.execution`), "graph" or "xla".
    """
    _check_positive(batch_size=batch_size, top=top)
    check_execution(execution)
    paths = image_files(sources)  # checked here, not when the first result is asked for
    runner = _runner(model, batch_size, max_pixels, small=len(paths) <= batch_size,
                     execution=execution, images=len(paths))
    names = runner.names(labels)
    return (_result(path, probabilities, error, top, names)
            for path, (probabilities, error) in zip(paths, runner.run_files(paths)))


def evaluate(model, dataset, output=None, batch_size=DEFAULT_BATCH_SIZE, top=5, data_dir=None,
             few_shot=None, few_shot_seed=0, execution=None):
    """Accuracy and per-class precision, recall and F1 of `model` on `dataset`'s held-out split.

    `model` as for `predict_images`; `dataset`: "digits", a folder of class sub-folders or a
    TFDS name (`keras_vit.load_dataset`), or the `DatasetSplits` it returns, whose held-out
    split (the one `train` reports on) is streamed through the model `batch_size` images at a
    time. Returns the report (the schema of a training run's report.json: accuracy,
    per_class, macro_avg, confusion_matrix, class_names; plus top5_accuracy for more than 5
    classes and image_count). With `output` (a folder): writes report.json, predictions.csv
    (one row per image: id, label, predicted, the `top` classes and probabilities) and
    confusion.png there.

    `few_shot=K` scores the paper's few-shot linear probe instead of the model's head: a
    closed-form ridge regression (`keras_vit.analysis.fit_linear_probe`) from the frozen
    model's pooled features to the classes, fitted on K training examples of each class
    (drawn with `few_shot_seed`), then applied to the held-out split; predictions.csv then
    holds the probe's scores, not probabilities. A Keras ViT only (a SavedModel keeps no
    features). `execution` as for `predict_images`.
    """
    from keras_vit.data import DatasetSplits, load_dataset

    _check_positive(batch_size=batch_size, top=top)
    check_execution(execution)
    splits = dataset if isinstance(dataset, DatasetSplits) else load_dataset(dataset,
                                                                             data_dir=data_dir)
    name = splits.name or str(dataset)
    runner = _runner(model, batch_size, MAX_PIXELS, execution=execution, images=splits.num_test)
    probe = None
    if few_shot is not None:
        _check_positive(few_shot=few_shot)
        runner, probe = _few_shot_probe(runner, splits, few_shot, few_shot_seed, batch_size)
    elif runner.classes != splits.num_classes:
        raise DatasetError(f"The model has {runner.classes} classes but dataset {name!r} has "
                           f"{splits.num_classes}; evaluate it on the dataset it was trained for.")
    names = splits.class_names
    ids, labels, results = _run_split(runner, splits.test)
    rows, skipped = [], list(splits.skipped_files)
    for item_id, label, (outputs, error) in zip(ids, labels, results):
        if error is not None:
            skipped.append(item_id)
        else:
            rows.append((item_id, label, outputs))
    if not rows:
        raise DatasetError(f"No image of dataset {name!r}'s held-out split could be read.")
    if probe is not None:
        scores = probe.pop("fitted").predict(np.stack([o for _, _, o in rows]))
        rows = [(item_id, label, row) for (item_id, label, _), row in zip(rows, scores)]
    report = _report(rows, names, name, skipped, _test_split_record(splits))
    model_name = getattr(getattr(runner, "model", None), "name", None)
    report["model"] = model_name.removesuffix("_features") if model_name else None
    if probe is not None:
        report["few_shot_probe"] = probe
    if output is not None:
        _write_evaluation(output, report, rows, names, top,
                          score="probability" if probe is None else "score")
    return report


def _run_split(runner, examples):
    """(ids, labels, results) of a split: a folder's files by path, in-memory examples (digits,
    TFDS) by their index in the split."""
    if examples.element_spec[0].dtype.name == "string":  # a folder's files
        items = [(p.decode("utf-8"), int(y)) for p, y in examples.as_numpy_iterator()]
        paths = [path for path, _ in items]
        return paths, [y for _, y in items], runner.run_files(paths)
    labels = [int(y) for _, y in examples.as_numpy_iterator()]
    return [str(i) for i in range(len(labels))], labels, runner.run_examples(examples)


def _few_shot_probe(runner, splits, shots, seed, batch_size):
    """(a runner giving the model's pooled features, the probe's record with the fitted
    ridge regression under "fitted"): fitted on `shots` training examples of each class."""
    import tensorflow as tf

    from keras_vit.analysis.few_shot import few_shot_indices, fit_linear_probe
    from keras_vit.analysis.probe import feature_model

    if not isinstance(runner, _KerasRunner):
        raise ArgumentError("few_shot needs a Keras model: the probe reads the model's pooled "
                            "features, which a SavedModel does not keep.")
    features = _KerasRunner(feature_model(runner.model), batch_size, runner.max_pixels,
                            outputs="raw", execution=runner.execution, images=splits.num_test)
    labels = np.asarray([int(y) for _, y in splits.train.as_numpy_iterator()])
    chosen = few_shot_indices(labels, shots, seed)
    keep = np.zeros(len(labels), bool)
    keep[chosen] = True
    keep = tf.constant(keep)
    train = splits.train.enumerate().filter(lambda i, example: keep[i]) \
        .map(lambda i, example: example)
    _, train_labels, results = _run_split(features, train)
    pairs = [(outputs, label) for (outputs, error), label in zip(results, train_labels)
             if error is None]
    if len(pairs) < len(chosen):
        raise DatasetError(f"{len(chosen) - len(pairs)} of the {len(chosen)} few-shot training "
                           "images could not be read; fix or remove them.")
    fitted = fit_linear_probe(np.stack([o for o, _ in pairs]), [y for _, y in pairs],
                              num_classes=splits.num_classes)
    return features, {"shots": shots, "seed": seed, "train_images": len(pairs),
                      "l2_regularization": 1.0, "features": features.model.layers[-1].name,
                      "fitted": fitted}


def _test_split_record(splits):
    """The split record of the examples evaluated: the test split alone, whose fingerprint
    `compare` checks against a training run's (keras_vit.analysis.compare)."""
    record = splits.split or {}
    fingerprints = record.get("fingerprints", {})
    return {"evaluated": "test", "test": record.get("test"),
            "sizes": {"test": record.get("sizes", {}).get("test")},
            "fingerprints": {"test": fingerprints["test"]} if "test" in fingerprints else {}}


def _report(rows, names, dataset, skipped, split):
    from keras_vit.training.report import classification_summary

    labels = np.asarray([label for _, label, _ in rows])
    probabilities = np.stack([p for _, _, p in rows])
    report = {"dataset": dataset, "split": split, "image_count": len(rows),
              **classification_summary(labels, probabilities.argmax(-1), names)}
    if len(names) > 5:
        top5 = np.argsort(-probabilities, axis=-1, kind="stable")[:, :5]
        report["top5_accuracy"] = float(np.mean(np.any(top5 == labels[:, None], axis=-1)))
    report["skipped_files"] = {"count": len(skipped), "files": skipped}
    return report


def _write_evaluation(output, report, rows, names, top, score="probability"):
    import csv
    import json

    from keras_vit.atomic import atomic_open
    from keras_vit.training.report import plot_confusion

    os.makedirs(output, exist_ok=True)
    with atomic_open(os.path.join(output, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    k = min(top, len(names))
    with atomic_open(os.path.join(output, "predictions.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "label", "predicted", *[f"top{i}_{what}" for i in range(1, k + 1)
                                                       for what in ("class", score)]])
        for item_id, label, probabilities in rows:
            best = np.argsort(-probabilities, kind="stable")[:k]
            writer.writerow([item_id, names[label], names[best[0]],
                             *[value for i in best for value in (names[i],
                                                                 f"{probabilities[i]:.6g}")]])
    plot_confusion(np.asarray(report["confusion_matrix"]), names,
                   os.path.join(output, "confusion.png"))


def _check_positive(**values):
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ArgumentError(f"{name} must be a positive int, got {value!r}.")


def _result(path, probabilities, error, top, names):
    if error is not None:
        return ImagePrediction(path, [], [], None, error)
    best = np.argsort(-probabilities, kind="stable")[:top]
    return ImagePrediction(path, [(float(probabilities[i]), names.get(int(i), f"class {i}"))
                                  for i in best], [int(i) for i in best], probabilities)


def _runner(model, batch_size, max_pixels, small=False, execution=None, images=0):
    if isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
        if os.path.isdir(model):
            return _SavedModelRunner(model, batch_size)
        if not model.endswith(".keras"):
            raise ArgumentError(f"model must be a Keras model, a .keras file or a SavedModel "
                                f"folder, got {model!r}.")
        import keras

        import keras_vit.training.optimizers  # noqa: F401  (a train-made file names them)
        if not os.path.isfile(model):
            raise ArgumentError(f"No .keras file at {model}.")
        model = keras.saving.load_model(model)
    return _KerasRunner(model, batch_size, max_pixels, small, execution=execution, images=images)


def _failure_message(path, read):
    """Why `path` failed in the pipeline, as one line: the error `read(path)` raises now."""
    try:
        read(path)
    except (ImageError, OSError) as error:
        return str(error)
    return f"{path} could not be read (it changed while it was being read)."


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


class _KerasRunner:
    """Pixels decoded and resized in tf.data, then the Keras model, one batch at a time."""

    def __init__(self, model, batch_size, max_pixels, small=False, outputs="probabilities",
                 execution=None, images=0):
        from keras_vit.export import has_softmax_head, model_input

        self.model, self.batch_size, self.max_pixels = model, batch_size, max_pixels
        self.size, self.channels = tuple(model.input_shape[1:3]), model.input_shape[-1]
        self.to_input, self.softmax_head = model_input(model), has_softmax_head(model)
        # A handful of images: a direct call; more: a compiled call, as a graph or under
        # XLA, whichever is faster here (timed only for work that repays the timing).
        self.small = small
        self.execution, self.images = execution, images
        self.jit_compile = None  # the mode chosen, once the first batch has run
        self._compiled = None
        self.raw = outputs == "raw"  # the model's outputs as they are (features, not classes)
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

        from keras_vit.data.files import load_batches
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
            else decode_image

        def load(path):
            return resize_image(decode(tf.io.read_file(path), self.channels, self.max_pixels),
                                self.size)

        for chunk in _chunks(load_batches(paths, load, self.batch_size), self.batch_size):
            errors = {}
            for row, (index, pixels) in enumerate(chunk):
                if pixels is None:  # the general path: the reason, or a misnamed image's pixels
                    try:
                        chunk[row] = (index, load_image(paths[index], self.size, self.channels,
                                                        self.max_pixels))
                    except (ImageError, OSError) as error:
                        errors[index] = str(error)
            good = [pixels for index, pixels in chunk if index not in errors]
            probabilities = iter(self._probabilities(np.stack(good)) if good else ())
            for index, _ in chunk:
                yield (None, errors[index]) if index in errors else (next(probabilities), None)

    def run_examples(self, examples):
        """In-memory `(image uint8 (H, W, C), label)` examples (digits, TFDS), resized as
        the training pipeline's held-out batches are."""
        import tensorflow as tf

        from keras_vit.data.datasets import to_rgb
        from keras_vit.preprocessing import resize_image

        def pixels(image, label):
            image = to_rgb(image) if self.channels == 3 else image
            return tf.clip_by_value(resize_image(image, self.size), 0.0, 255.0)

        batches = examples.map(pixels, num_parallel_calls=tf.data.AUTOTUNE) \
            .batch(self.batch_size).prefetch(tf.data.AUTOTUNE)
        for batch in batches.as_numpy_iterator():
            for probabilities in self._probabilities(batch):
                yield probabilities, None

    def _probabilities(self, pixels):
        import keras

        x = self.to_input(pixels)
        if self.small or not isinstance(self.model, keras.Model):
            scores = self.model(x, training=False)
        else:
            scores = self._compiled_call(x)
        scores = keras.ops.convert_to_numpy(scores).astype(np.float32)
        if self.softmax_head or self.raw:
            return scores
        return keras.ops.convert_to_numpy(keras.ops.softmax(scores, axis=-1))


    def _compiled_call(self, x):
        if self._compiled is None:
            from keras_vit.execution import choose_jit_compile

            batch_shape = (self.batch_size, *x.shape[1:])
            enough = self.images >= CALIBRATE_AFTER_BATCHES * self.batch_size
            self.jit_compile = choose_jit_compile(self.model, batch_shape, self.execution,
                                                  measure=enough)
            if self.jit_compile is None:  # not TensorFlow on a CPU: Keras' own predict step
                self._compiled = self.model.predict_on_batch
            else:
                import tensorflow as tf

                forward = tf.function(lambda images: self.model(images, training=False),
                                      jit_compile=self.jit_compile, reduce_retracing=True,
                                      autograph=False)
                self._compiled = lambda images: forward(tf.convert_to_tensor(images))
        return self._compiled(x)


class _SavedModelRunner:
    """File bytes read in tf.data, then the export's `serve_bytes` signature, a batch a call."""

    def __init__(self, folder, batch_size):
        self.serve = load_serve_bytes(folder)
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

        from keras_vit.data.files import load_batches

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


def load_serve_bytes(folder):
    """The `serve_bytes` signature of the SavedModel in `folder` (a version folder, or a base
    folder of numbered versions: the highest)."""
    import tensorflow as tf

    if not os.path.isdir(folder):
        raise ArgumentError(f"No SavedModel folder at {folder}.")
    if not os.path.exists(os.path.join(folder, "saved_model.pb")):
        versions = [int(n) for n in os.listdir(folder)
                    if n.isdigit() and os.path.exists(os.path.join(folder, n, "saved_model.pb"))]
        if not versions:
            raise ArgumentError(f"{folder} holds no saved_model.pb, nor version folders with one.")
        folder = os.path.join(folder, str(max(versions)))
    signatures = tf.saved_model.load(folder).signatures
    if "serve_bytes" not in signatures:
        raise ArgumentError(f"{folder} has no serve_bytes signature (it has {sorted(signatures)}); "
                            "export it with keras_vit.export_saved_model.")
    return signatures["serve_bytes"]
