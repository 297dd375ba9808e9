"""report.json, the one schema of a run's results: written by `train` (with curves.png and
confusion.png) and `evaluate` (with predictions.csv), read by `compare`.

Its fields: `dataset`, `class_names` (the head's order), `split` (the split record, with
`fingerprints.test`), `accuracy`, `macro_avg` {precision, recall, f1}, `per_class` {class
name: {precision, recall, f1, support}}, `confusion_matrix` (rows true classes, columns
predicted; above `SPARSE_CONFUSION_CLASSES` classes its non-zero cells only, as
{"cells": [[true, predicted, count], ...]}: `confusion_cells` reads either), `skipped_files`;
and, by who wrote it, `model`, `weights`, `recipe`,
`parameters`, `gflops_per_image`, `train_seconds`, `images_per_second`, `epochs_logged`,
`top5_accuracy`, `image_count`, `few_shot_probe`, `teacher` (a distilled run's teacher: its
`model` path or name, `distillation` kind, `temperature`, `alpha`, `classes`; null without
one), `precision` (keras_vit.runtime.precision's record); a training run's `parameter_counts`
{trainable, total} (LoRA's factors and head against every weight), `lora`, `step_seconds`
{median, batches_timed, first: seconds of a training batch, the first (tracing) aside} and
`peak_memory` {bytes, measure: the process's peak resident set, keras_vit.memory}.
`REQUIRED` are what `read_report` insists on.
"""

import contextlib
import csv
import io
import json
import math
import numbers
import os

import numpy as np

from keras_vit._support.files import read_text
from keras_vit._support.json_files import read_json
from keras_vit.atomic import atomic_open, atomic_path
from keras_vit.errors import DatasetError, OutOfMemoryError, RunConflictError

__all__ = ["REQUIRED", "SPARSE_CONFUSION_CLASSES", "FIGURE_CLASSES", "classification_summary",
           "confusion_cells", "write_report", "write_json", "read_report", "check_report",
           "read_log", "plot_curves", "plot_confusion"]

# What `compare` needs of every report.json (and `split.fingerprints.test`).
REQUIRED = ("dataset", "class_names", "accuracy", "macro_avg", "per_class")

# Above this many classes report.json keeps the confusion matrix's non-zero cells, at most one
# per image plus one per class, instead of its classes² entries: 10,000 classes are 100 million
# entries, 900 MB of JSON, where a 100-class matrix is 10,000 (90 KB).
SPARSE_CONFUSION_CLASSES = 100
# confusion.png draws at most this many classes (above it, the most confused), each cell with
# its count: its side grows with the classes (0.5 inch each at 100 dpi), and past this the
# labels and counts stop being readable (10,000 classes would be a 500,000-pixel square).
FIGURE_CLASSES = 20


def classification_summary(labels, predictions, class_names):
    """Accuracy, per-class precision/recall/F1/support and the confusion matrix.

    `labels`, `predictions`: int arrays `(n,)`. The confusion matrix is
    `(classes, classes)`, rows true classes, columns predicted ones; above
    `SPARSE_CONFUSION_CLASSES` classes, {"cells": its non-zero [true, predicted, count]}.
    """
    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    labels, predictions = np.asarray(labels, np.int64), np.asarray(predictions, np.int64)
    classes = np.arange(len(class_names))
    precision, recall, f1, support = precision_recall_fscore_support(
        labels, predictions, labels=classes, zero_division=0)
    per_class = {name: {"precision": float(p), "recall": float(r), "f1": float(f),
                        "support": int(s)}
                 for name, p, r, f, s in zip(class_names, precision, recall, f1, support)}
    macro = precision_recall_fscore_support(labels, predictions, labels=classes,
                                            average="macro", zero_division=0)
    if len(classes) > SPARSE_CONFUSION_CLASSES:
        pairs, counts = np.unique(np.stack([labels, predictions], axis=-1), axis=0,
                                  return_counts=True)
        matrix = {"cells": np.concatenate([pairs.reshape(-1, 2), counts[:, None]], -1).tolist()}
    else:
        matrix = confusion_matrix(labels, predictions, labels=classes).tolist()
    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "per_class": per_class,
        "macro_avg": {"precision": float(macro[0]), "recall": float(macro[1]),
                      "f1": float(macro[2])},
        "class_names": list(class_names),
        "confusion_matrix": matrix,
    }


def confusion_cells(matrix):
    """A report's `confusion_matrix`, dense or sparse, as an int array `(cells, 3)` of its
    non-zero [true, predicted, count] (without building a dense matrix from a sparse one)."""
    if isinstance(matrix, dict):
        return np.asarray(matrix["cells"], np.int64).reshape(-1, 3)
    matrix = np.asarray(matrix, np.int64)
    true, predicted = np.nonzero(matrix)
    return np.stack([true, predicted, matrix[true, predicted]], axis=-1).reshape(-1, 3)


@contextlib.contextmanager
def naming_memory(what):
    """Turns a MemoryError inside into an `OutOfMemoryError` saying what ran out of memory
    (`what`: "drawing confusion.png for 10,000 classes"), not a batch size's advice."""
    try:
        yield
    except MemoryError as error:
        raise OutOfMemoryError(f"out of host memory {what} "
                               f"({str(error) or type(error).__name__}).") from None


def write_report(output, labels, predictions, class_names, run_info, skipped_files=(),
                 unsupported_files=()):
    """Writes report.json, curves.png (from log.csv) and confusion.png; returns the report.

    `skipped_files`: images that could not be read; `unsupported_files`: files of the
    dataset folder that are not images by their extension. Both are listed and counted.
    """
    report = {**run_info, **classification_summary(labels, predictions, class_names)}
    report["skipped_files"] = {"count": len(skipped_files), "files": list(skipped_files)}
    report["unsupported_files"] = {"count": len(unsupported_files),
                                   "files": list(unsupported_files)}
    log = read_log(os.path.join(output, "log.csv"))
    report["epochs_logged"] = len(log)
    report["train_seconds"] = float(sum(float(r.get("seconds") or 0) for r in log))
    write_json(output, report)
    plot_curves(log, os.path.join(output, "curves.png"))
    plot_confusion(report["confusion_matrix"], class_names, os.path.join(output, "confusion.png"))
    return report


def write_json(output, report):
    """Writes `report` as `output`/report.json (atomically: a reader sees the old or the new)."""
    path = os.path.join(output, "report.json")
    with naming_memory(f"writing {path}"), atomic_open(path, "w") as f:
        json.dump(report, f, indent=2)


def read_report(path):
    """The report.json at `path`, checked against the schema (`check_report`): `DatasetError`
    names the file and the first field that is missing, of the wrong type or out of range."""
    try:
        report = read_json(path, "a report.json", DatasetError)
    except OSError as error:
        raise DatasetError(f"{path} is not readable JSON ({error}).") from error
    if not isinstance(report, dict):
        _refuse(path, "the file", report, "a JSON object")
    split = report.get("split")
    fingerprints = split.get("fingerprints") if isinstance(split, dict) else split
    # Absent is an older report's; present but of the wrong type is check_report's to name.
    test = fingerprints.get("test") if isinstance(fingerprints, dict) else \
        fingerprints is not None
    missing = [key for key in REQUIRED if key not in report]
    if missing or not test:
        what = ", ".join(missing + ([] if test else ["split.fingerprints.test"]))
        raise DatasetError(f"{path} lacks {what}: written by an older keras_vit? Train or "
                           "evaluate again to compare it.")
    check_report(report, path)
    return report


# The schema's types, field by field: what a reader may rely on once `check_report` passed.
# Every number is finite (JSON as Python reads it allows NaN and Infinity); a hand-edited or
# foreign report.json is refused naming its file and field, not met later as a traceback.
_SHARE = "a number from 0 to 1"
_COUNT = "a whole number >= 0"
_AMOUNT = "a number >= 0"
_TEXT = "a string"
_OPTIONAL = {"model": _TEXT, "weights": _TEXT, "parameters": _COUNT,
             "gflops_per_image": _AMOUNT, "train_seconds": _AMOUNT,
             "images_per_second": _AMOUNT, "steps_per_epoch": _COUNT, "epochs_logged": _COUNT,
             "top5_accuracy": _SHARE, "image_count": _COUNT}


def _is(value, kind):
    if kind == _TEXT:
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value):
        return False
    if kind == _COUNT:
        return isinstance(value, numbers.Integral) and value >= 0
    return value >= 0 and (kind != _SHARE or value <= 1)


def _refuse(path, field, value, expected):
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise DatasetError(f"{path}: {field} is {shown}, not {expected}.")


def _check(path, field, value, kind, optional=False):
    if not (optional and value is None) and not _is(value, kind):
        _refuse(path, field, value, kind + (" (or null)" if optional else ""))


def _check_mapping(path, field, value):
    if not isinstance(value, dict):
        _refuse(path, field, value, "an object")
    return value


def _check_confusion(path, matrix, classes):
    """A dense matrix: `classes` rows of `classes` counts; a sparse one: {"cells": [[true,
    predicted, count], ...]}, classes in range, counts above 0."""
    field = "confusion_matrix"
    if isinstance(matrix, dict):
        cells = matrix.get("cells")
        if not isinstance(cells, list):
            _refuse(path, f"{field}.cells", cells, "a list of [true, predicted, count]")
        for i, cell in enumerate(cells):
            if not (isinstance(cell, list) and len(cell) == 3 and all(_is(v, _COUNT) for v in cell)
                    and cell[0] < classes and cell[1] < classes and cell[2] > 0):
                _refuse(path, f"{field}.cells[{i}]", cell,
                        f"[true, predicted, count] of classes below {classes}, count above 0")
        return
    if not isinstance(matrix, list) or len(matrix) != classes:
        _refuse(path, field, matrix, f"{classes} rows (one per class) or {{\"cells\": [...]}}")
    for i, row in enumerate(matrix):
        if not isinstance(row, list) or len(row) != classes \
                or not all(_is(v, _COUNT) for v in row):
            _refuse(path, f"{field}[{i}]", row, f"a row of {classes} whole numbers >= 0")


def check_report(report, path):
    """Raises `DatasetError` naming `path` and the first field of `report` (a report.json's
    content) whose type or range is not the schema's; see the module's docstring."""
    _check(path, "dataset", report["dataset"], _TEXT)
    names = report["class_names"]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        _refuse(path, "class_names", names, "a non-empty list of strings")
    _check(path, "accuracy", report["accuracy"], _SHARE)
    macro = _check_mapping(path, "macro_avg", report["macro_avg"])
    for metric in ("precision", "recall", "f1"):
        _check(path, f"macro_avg.{metric}", macro.get(metric), _SHARE)
    for name, scores in _check_mapping(path, "per_class", report["per_class"]).items():
        _check_mapping(path, f"per_class[{name!r}]", scores)
        for metric in ("precision", "recall", "f1", "support"):
            if metric in scores:
                _check(path, f"per_class[{name!r}].{metric}", scores[metric],
                       _COUNT if metric == "support" else _SHARE)
    split = _check_mapping(path, "split", report["split"])
    for name, value in _check_mapping(path, "split.fingerprints", split["fingerprints"]).items():
        _check(path, f"split.fingerprints.{name}", value, _TEXT)
    if "validation" in split["fingerprints"]:
        _check(path, "split.validation_fraction", split.get("validation_fraction"), _SHARE)
        if isinstance(split.get("validation_seed"), bool) \
                or not isinstance(split.get("validation_seed"), int):
            _refuse(path, "split.validation_seed", split.get("validation_seed"), "an integer")
    for field, kind in _OPTIONAL.items():
        _check(path, field, report.get(field), kind, optional=True)
    if "confusion_matrix" in report:
        _check_confusion(path, report["confusion_matrix"], len(names))
    teacher = report.get("teacher")
    if teacher is not None:
        _check_mapping(path, "teacher", teacher)
        for field, kind in (("model", _TEXT), ("distillation", _TEXT), ("classes", _COUNT),
                            ("alpha", _SHARE)):
            _check(path, f"teacher.{field}", teacher.get(field), kind)
        _check(path, "teacher.temperature", teacher.get("temperature"), _AMOUNT, optional=True)
    recipe = report.get("recipe")
    if recipe is not None:
        _check_mapping(path, "recipe", recipe)
        _check(path, "recipe.name", recipe.get("name"), _TEXT, optional=True)
        _check(path, "recipe.batch_size", recipe.get("batch_size"), _COUNT, optional=True)


# The log.csv columns a reader plots or adds up: numbers (CSVLogger writes "nan" for a loss
# that diverged: a number, drawn as a gap).
LOG_NUMBERS = ("loss", "accuracy", "val_loss", "val_accuracy", "seconds")


def read_log(path):
    """The rows of a run's log.csv as dicts (none when there is no log yet), as written: a
    run being resumed reads its own log, torn last row included (`resume.repair_log` mends
    it); a reader of another's folder checks the rows with `check_log`."""
    if not os.path.exists(path):
        return []
    text = read_text(path, "a run's log", RunConflictError)
    try:
        return list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as error:
        raise RunConflictError(f"{path} is not a CSV file ({error}).") from None


def check_log(rows, path):
    """Raises `RunConflictError` naming `path`, the line and the column where `read_log`'s
    `rows` are not a finished run's: a row not as wide as the header, an `epoch` that is not
    a whole number >= 0, a `LOG_NUMBERS` column that is not a number."""
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        if None in row or None in row.values():  # DictReader's marks of a ragged row
            raise RunConflictError(f"{path} line {line} has not the header's "
                                   f"{len(rows[0]) - (None in rows[0])} fields.")
        for column in ("epoch", *LOG_NUMBERS):
            value = row.get(column)
            if value in (None, "") and column != "epoch":
                continue
            try:
                number = int(value) if column == "epoch" else float(value)
            except (TypeError, ValueError):
                number = None
            if number is None or (column == "epoch" and number < 0):
                kind = "a whole number >= 0" if column == "epoch" else "a number"
                raise RunConflictError(f"{path} line {line}: {column} is {value!r}, not {kind}.")


def _figure(**kwargs):
    """A figure and its axes, drawn off-screen: no pyplot state, no global backend change."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=kwargs.pop("figsize", None))
    return figure, figure.subplots(**kwargs)


def plot_curves(log_rows, path):
    """Loss and accuracy per epoch, train and validation, from log.csv rows."""
    fig, axes = _figure(ncols=2, figsize=(10, 4))
    epochs = [int(r["epoch"]) + 1 for r in log_rows]
    for ax, metric in zip(axes, ("loss", "accuracy")):
        for key, label in ((metric, "train"), (f"val_{metric}", "validation")):
            values = [float(r[key]) for r in log_rows if r.get(key)]
            if values:
                ax.plot(epochs[:len(values)], values, marker="o", label=label)
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)


def plot_confusion(matrix, class_names, path):
    """The confusion matrix (a report's `confusion_matrix`, dense or sparse) as an image, rows
    true, columns predicted. Above `FIGURE_CLASSES` classes, those most often confused (wrong
    as the true class or as the prediction), in their order; the title says so."""
    from sklearn.metrics import ConfusionMatrixDisplay

    count = len(class_names)
    with naming_memory(f"drawing {path} for {count:,} classes"):
        cells = confusion_cells(matrix)
        shown = np.arange(count)
        title = None
        if count > FIGURE_CLASSES:
            wrong = cells[cells[:, 0] != cells[:, 1]]
            errors = np.zeros(count, np.int64)
            np.add.at(errors, wrong[:, 0], wrong[:, 2])
            np.add.at(errors, wrong[:, 1], wrong[:, 2])
            shown = np.sort(np.argsort(-errors, kind="stable")[:FIGURE_CLASSES])
            title = f"the {FIGURE_CLASSES} most-confused of {count:,} classes"
        index = np.full(count, -1)
        index[shown] = np.arange(len(shown))
        inside = (index[cells[:, 0]] >= 0) & (index[cells[:, 1]] >= 0)
        small = np.zeros((len(shown), len(shown)), np.int64)
        np.add.at(small, (index[cells[inside, 0]], index[cells[inside, 1]]), cells[inside, 2])
        size = max(4, 0.5 * len(shown) + 2)
        fig, ax = _figure(figsize=(size, size))
        display = ConfusionMatrixDisplay(small, display_labels=[class_names[i] for i in shown])
        display.plot(ax=ax, colorbar=False, xticks_rotation=45 if len(shown) > 10 else 0,
                     include_values=True)
        if title:
            ax.set_title(title)
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100)
