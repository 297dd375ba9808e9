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
import os

import numpy as np

from keras_vit._support.files import read_text
from keras_vit._support.json_files import read_json
from keras_vit.atomic import atomic_open, atomic_path
from keras_vit.errors import DatasetError, RunConflictError

__all__ = ["REQUIRED", "classification_summary", "write_report", "write_json", "read_report",
           "read_log", "plot_curves", "plot_confusion"]

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
    """The report.json at `path`, checked for the `REQUIRED` fields and the test split's
    fingerprint; `DatasetError` names what is missing or unreadable."""
    try:
        report = read_json(path, "a report.json", DatasetError)
    except OSError as error:
        raise DatasetError(f"{path} is not readable JSON ({error}).") from error
    test = (report.get("split") or {}).get("fingerprints", {}).get("test") \
        if isinstance(report, dict) else None
    missing = [key for key in REQUIRED if not isinstance(report, dict) or key not in report]
    if missing or not test:
        what = ", ".join(missing + ([] if test else ["split.fingerprints.test"]))
        raise DatasetError(f"{path} lacks {what}: written by an older keras_vit? Train or "
                           "evaluate again to compare it.")
    return report


def read_log(path):
    """The rows of a run's log.csv as dicts (none when there is no log yet)."""
    if not os.path.exists(path):
        return []
    text = read_text(path, "a run's log", RunConflictError)
    return list(csv.DictReader(io.StringIO(text, newline="")))


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
