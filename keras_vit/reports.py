"""report.json, the one schema of a run's results: written by `train` (with curves.png and
confusion.png) and `evaluate` (with predictions.csv), read by `compare`.

Its fields: `dataset`, `class_names` (the head's order), `split` (the split record, with
`fingerprints.test`), `accuracy`, `macro_avg` {precision, recall, f1}, `per_class` {class
name: {precision, recall, f1, support}}, `confusion_matrix` (rows true classes, columns
predicted), `skipped_files`; and, by who wrote it, `model`, `weights`, `recipe`,
`parameters`, `gflops_per_image`, `train_seconds`, `images_per_second`, `epochs_logged`,
`top5_accuracy`, `image_count`, `few_shot_probe`. `REQUIRED` are what `read_report` insists on.
"""

import csv
import io
import json
import math
import numbers
import os

import numpy as np

from keras_vit._support.files import read_text
from keras_vit.atomic import atomic_open, atomic_path
from keras_vit.errors import DatasetError, RunConflictError

__all__ = ["REQUIRED", "classification_summary", "write_report", "write_json", "read_report",
           "check_report", "read_log", "plot_curves", "plot_confusion"]

# What `compare` needs of every report.json (and `split.fingerprints.test`).
REQUIRED = ("dataset", "class_names", "accuracy", "macro_avg", "per_class")


def classification_summary(labels, predictions, class_names):
    """Accuracy, per-class precision/recall/F1/support and the confusion matrix.

    `labels`, `predictions`: int arrays `(n,)`. The confusion matrix is
    `(classes, classes)`, rows true classes, columns predicted ones.
    """
    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    classes = np.arange(len(class_names))
    precision, recall, f1, support = precision_recall_fscore_support(
        labels, predictions, labels=classes, zero_division=0)
    per_class = {name: {"precision": float(p), "recall": float(r), "f1": float(f),
                        "support": int(s)}
                 for name, p, r, f, s in zip(class_names, precision, recall, f1, support)}
    macro = precision_recall_fscore_support(labels, predictions, labels=classes,
                                            average="macro", zero_division=0)
    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "per_class": per_class,
        "macro_avg": {"precision": float(macro[0]), "recall": float(macro[1]),
                      "f1": float(macro[2])},
        "class_names": list(class_names),
        "confusion_matrix": confusion_matrix(labels, predictions, labels=classes).tolist(),
    }


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
    plot_confusion(np.asarray(report["confusion_matrix"]), class_names,
                   os.path.join(output, "confusion.png"))
    return report


def write_json(output, report):
    """Writes `report` as `output`/report.json (atomically: a reader sees the old or the new)."""
    with atomic_open(os.path.join(output, "report.json"), "w") as f:
        json.dump(report, f, indent=2)


def read_report(path):
    """The report.json at `path`, checked against the schema (`check_report`): `DatasetError`
    names the file and the first field that is missing, of the wrong type or out of range."""
    try:
        report = json.loads(read_text(path, "a report.json", DatasetError))
    except (OSError, ValueError) as error:
        raise DatasetError(f"{path} is not readable JSON ({error}).") from error
    if not isinstance(report, dict):
        _refuse(path, "the file", report, "a JSON object")
    split = report.get("split")
    fingerprints = split.get("fingerprints") if isinstance(split, dict) else {}
    test = not isinstance(split, dict) or not isinstance(fingerprints, dict) \
        or fingerprints.get("test")  # a split of the wrong type is check_report's to name
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
    recipe = report.get("recipe")
    if recipe is not None:
        _check_mapping(path, "recipe", recipe)
        _check(path, "recipe.name", recipe.get("name"), _TEXT, optional=True)
        _check(path, "recipe.batch_size", recipe.get("batch_size"), _COUNT, optional=True)


# The log.csv columns a reader plots or adds up: numbers (CSVLogger writes "nan" for a loss
# that diverged: a number, drawn as a gap).
LOG_NUMBERS = ("loss", "accuracy", "val_loss", "val_accuracy", "seconds")


def read_log(path):
    """The rows of a run's log.csv as dicts (none when there is no log yet); `epoch` and the
    `LOG_NUMBERS` columns are checked to be numbers, naming the file, row and column."""
    if not os.path.exists(path):
        return []
    text = read_text(path, "a run's log", RunConflictError)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = list(reader)
    except csv.Error as error:
        raise RunConflictError(f"{path} is not a CSV file ({error}).") from None
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        if None in row or None in row.values():  # DictReader's marks of a ragged row
            raise RunConflictError(f"{path} line {line} has not the header's "
                                   f"{len(reader.fieldnames)} fields.")
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
    return rows


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
    """The confusion matrix as an image (rows true, columns predicted)."""
    from sklearn.metrics import ConfusionMatrixDisplay

    size = max(4, 0.5 * len(class_names) + 2)
    fig, ax = _figure(figsize=(size, size))
    display = ConfusionMatrixDisplay(matrix, display_labels=class_names)
    display.plot(ax=ax, colorbar=False, xticks_rotation=45 if len(class_names) > 10 else 0,
                 include_values=len(class_names) <= 30)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)
