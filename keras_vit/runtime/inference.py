"""Streaming prediction: `predict_images`, one result per image, memory bounded by the batch
(`keras_vit.runtime.evaluation` runs a held-out split through the same runners).

Images flow through `tf.data` (files read and decoded in parallel by
`keras_vit.preprocessing`'s one decode path, batched, prefetched) into a Keras
model or an exported SavedModel's `serve_bytes` signature (keras_vit/runtime/runners.py);
a result leaves as soon as its batch is done, so 100,000 images cost what one batch costs.
A file that cannot be read or decoded becomes a result with its error, and the others
go on.
"""

import dataclasses

import numpy as np

from keras_vit.preprocessing import MAX_PIXELS
from keras_vit.runtime.execution import check_execution
from keras_vit.runtime.image_sources import ImageFiles, image_files
from keras_vit.runtime.precision import check_precision
from keras_vit.runtime.runners import DEFAULT_BATCH_SIZE, check_positive, model_runner

__all__ = ["ImagePrediction", "ImageFiles", "Predictions", "predict_images", "image_files"]


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


class Predictions:
    """`predict_images`' results: an iterator of `ImagePrediction`s. `precision`: the record
    of the precision the model ran in (`keras_vit.runtime.precision`; with bfloat16, its agreement with
    float32 on the first batch), once the first batch has run; None before, or for a
    SavedModel."""

    def __init__(self, results, runner):
        self._results, self._runner = results, runner

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._results)

    @property
    def precision(self):
        return getattr(self._runner, "precision_record", None)


def predict_images(model, sources, batch_size=DEFAULT_BATCH_SIZE, top=5, labels=None,
                   max_pixels=MAX_PIXELS, execution=None, precision=None, resize=None,
                   max_tokens=None):
    """An iterator of `ImagePrediction`s, one per image of `sources` (`image_files`, or the
    `ImageFiles` it returned), in order.

    `model`: a Keras model, a `.keras` file, or an exported SavedModel folder (a version
    folder or its base; its `serve_bytes` signature decodes, with the pixel budget it was
    exported with). `labels`: class names (default: ImageNet's for 1000- and 21843-class
    heads, the SavedModel's own, else "class <index>"). Images are decoded in parallel and
    run `batch_size` at a time; a file that cannot be read becomes a result with `error`.
    `execution`: how TensorFlow runs a Keras model on a CPU, "auto" (the faster of
    "graph" and "xla" on this machine, `keras_vit.runtime.execution`), "graph" or "xla".
    `precision`: what a Keras model computes in, "float32" (the default), "bfloat16"
    (mixed_bfloat16; its top-1 agreement and largest logit difference with float32 on the
    first batch are measured) or "auto" (bfloat16 where it is native, faster and in
    agreement: `keras_vit.runtime.precision`); the returned `Predictions` records it.
    `resize`: None (default) resizes each image as the model's preprocessing of record says
    (its weights' source's: `keras_vit.preprocessing_record`), "stretch" the whole image to the
    model's size, "crop" the short side then the centre crop, in the record's interpolation.
    `max_tokens`: a NaFlex model's sequence budget (SigLIP 2's 256, 576, 784 or 1024; default
    its stored grid's): each image at its own aspect ratio, batched with padding masks.
    """
    check_positive(batch_size=batch_size, top=top)
    check_execution(execution)
    check_precision(precision)
    paths = image_files(sources)  # checked here, not when the first result is asked for
    runner = model_runner(model, batch_size, max_pixels, small=len(paths) <= batch_size,
                          execution=execution, images=len(paths), precision=precision,
                          compare_images=batch_size, resize=resize, max_tokens=max_tokens)
    names = runner.names(labels)
    return Predictions((_result(path, probabilities, error, top, names)
                        for path, (probabilities, error) in zip(paths, runner.run_files(paths))),
                       runner)


def _result(path, probabilities, error, top, names):
    if error is not None:
        return ImagePrediction(path, [], [], None, error)
    best = np.argsort(-probabilities, kind="stable")[:top]
    return ImagePrediction(path, [(float(probabilities[i]), names.get(int(i), f"class {i}"))
                                  for i in best], [int(i) for i in best], probabilities)
