"""Class names: the ImageNet label files the official heads use, and a user's own list."""

import functools
from importlib import resources

import numpy as np
from keras import ops

from keras_vit._support.files import read_text
from keras_vit.errors import ArgumentError

__all__ = ["imagenet_labels", "imagenet_label_names", "decode_predictions", "read_labels"]

_FILES = {1000: "imagenet1k_labels.tsv", 21843: "imagenet21k_labels.tsv"}


@functools.cache
def imagenet_labels(classes=1000):
    """(synset id, label) pairs in the order of the official checkpoints' heads.

    `classes=1000` is ImageNet-1k (ILSVRC-2012); `classes=21843` the
    ImageNet-21k ordering the official "imagenet21k" checkpoints use.
    Regenerate the files with `python tools/make_label_files.py`.
    """
    if classes not in _FILES:
        raise ArgumentError(f"ImageNet labels exist for 1000 or 21843 classes, not {classes}.")
    text = resources.files("keras_vit.labels").joinpath(_FILES[classes]).read_text("utf-8")
    return tuple(tuple(line.split("\t", 1)) for line in text.splitlines())


def imagenet_label_names(classes):
    """The ImageNet class names of a 1000- or 21843-class head, else None."""
    if classes not in _FILES:
        return None
    return [name for _, name in imagenet_labels(classes)]


def read_labels(path):
    """Class names from a text file, one per line (blank lines at the end ignored)."""
    text = read_text(path, "a labels file", ArgumentError)
    # Lines end as in a file opened as text (universal newlines): \n, \r\n or \r.
    names = text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n")
    if not names or names == [""]:
        raise ArgumentError(f"{path} holds no labels; write one class name per line.")
    return [name.rstrip("\r") for name in names]


def decode_predictions(predictions, top=5):
    """Top-`top` ImageNet labels per row of `predictions` (logits or probabilities).

    Returns, per image, a list of `(synset_id, label, probability)` sorted by
    probability; logits are turned into probabilities with a softmax, so the
    values are probabilities either way.
    """
    predictions = np.asarray(ops.convert_to_numpy(predictions), dtype=np.float64)
    if predictions.ndim != 2:
        raise ArgumentError(f"predictions must be (batch, classes), got shape {predictions.shape}.")
    labels = imagenet_labels(predictions.shape[1])
    is_probability = np.all(predictions >= 0) and np.allclose(predictions.sum(axis=1), 1.0, atol=1e-3)
    if not is_probability:
        shifted = np.exp(predictions - predictions.max(axis=1, keepdims=True))
        predictions = shifted / shifted.sum(axis=1, keepdims=True)
    top = min(top, predictions.shape[1])
    result = []
    for row in predictions:
        best = np.argsort(-row, kind="stable")[:top]
        result.append([(labels[i][0], labels[i][1], float(row[i])) for i in best])
    return result
