"""Large label sets: a 10,000-class evaluation writes a report.json proportional to its classes
(the confusion matrix's non-zero cells, not its 100 million entries), draws the most-confused
classes, and an out-of-memory in those steps names the step.

No 10,000-class model runs: the report and figure functions get a planted prediction set, and
every expected count is recounted here with a Counter over the (label, prediction) pairs."""

import argparse
import collections
import json
import os
import struct
import tracemalloc

import numpy as np
import pytest

from keras_vit import reports
from keras_vit.analysis import compare_runs
from keras_vit.cli.common import report_errors
from keras_vit.errors import OutOfMemoryError
from keras_vit.runtime import evaluation

CLASSES = 10_000
GROUP = range(5000, 5000 + reports.FIGURE_CLASSES)  # the planted most-confused classes


def planted(classes=CLASSES):
    """(labels, predictions, names): two images of each class, the second of every 37th class
    mistaken for another; and 20 more images of each class in GROUP, 12 of them mistaken for
    the next class of GROUP (wrapping): GROUP's classes are the most confused."""
    labels, predictions = [], []
    for k in range(classes):
        labels += [k, k]
        predictions += [k, (k * 7919 + 1) % classes if k % 37 == 0 else k]
    group = [k for k in GROUP if k < classes]
    for position, k in enumerate(group):
        labels += [k] * 20
        predictions += [k] * 8 + [group[(position + 1) % len(group)]] * 12
    names = [f"class_{k:05d}" for k in range(classes)]
    return np.asarray(labels), np.asarray(predictions), names


def by_hand(labels, predictions):
    """The non-zero confusion cells, {(true, predicted): count}."""
    return collections.Counter(zip(labels.tolist(), predictions.tolist()))


def as_dict(cells):
    return {(int(t), int(p)): int(c) for t, p, c in cells}


def write_report(folder, summary, fingerprint="0123456789abcdef"):
    os.makedirs(folder, exist_ok=True)
    reports.write_json(folder, {"dataset": "many", "split": {"fingerprints": {"test": fingerprint}},
                                **summary})
    return os.path.join(folder, "report.json")


@pytest.fixture(scope="module")
def large():
    """(labels, predictions, names, classification_summary) of the 10,000-class planted set."""
    labels, predictions, names = planted()
    return labels, predictions, names, reports.classification_summary(labels, predictions, names)


def test_a_large_label_sets_report_is_proportional_to_its_classes(tmp_path):
    labels, predictions, names = planted()
    tracemalloc.start()
    try:
        summary = reports.classification_summary(labels, predictions, names)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # A dense (classes, classes) int64 matrix alone is 800 MB; 10,000 per-class entries and a
    # few arrays of the 20,800 images are a few MB. 100 MB is 8x below the dense matrix.
    assert peak < 100 * 2 ** 20, peak
    path = write_report(tmp_path, summary)
    cells = by_hand(labels, predictions)
    # The bound, from report.json's indented layout: per class a per_class entry (four
    # numbers of at most 24 characters, their keys, the name) and a class_names line, under
    # 2 * name + 250 bytes; per non-zero cell three numbers of at most 6 digits on lines of
    # their own, under 80 bytes; 4 KB for the rest.
    longest = max(len(name) for name in names)
    bound = 4096 + CLASSES * (2 * longest + 250) + len(cells) * 80
    size = os.path.getsize(path)
    assert size <= bound, (size, bound)
    assert bound < CLASSES ** 2  # a dense matrix, one byte an entry, would not fit the bound
    report = reports.read_report(path)
    assert as_dict(reports.confusion_cells(report["confusion_matrix"])) == cells
    assert report["per_class"]["class_05000"]["support"] == 22


@pytest.mark.parametrize("classes, dense", [(reports.SPARSE_CONFUSION_CLASSES, True),
                                            (reports.SPARSE_CONFUSION_CLASSES + 1, False)])
def test_the_matrix_is_dense_up_to_the_documented_class_count_and_both_read_back(
        tmp_path, classes, dense):
    labels, predictions, names = planted(classes)
    summary = reports.classification_summary(labels, predictions, names)
    matrix = summary["confusion_matrix"]
    assert isinstance(matrix, list) is dense
    if dense:  # rows true classes, columns predicted, as scikit-learn's matrix is
        expected = np.zeros((classes, classes), int)
        for (t, p), c in by_hand(labels, predictions).items():
            expected[t, p] = c
        assert np.array_equal(matrix, expected)
    report = reports.read_report(write_report(tmp_path, summary))
    assert as_dict(reports.confusion_cells(report["confusion_matrix"])) == \
        by_hand(labels, predictions)


@pytest.mark.parametrize("matrix, field", [
    ({"cells": [[0, 1, 0]]}, "confusion_matrix.cells[0]"),
    ({"cells": [[0, 101, 1]]}, "confusion_matrix.cells[0]"),
    ({"cells": "many"}, "confusion_matrix.cells"),
    ([[1, 2]], "confusion_matrix"),
], ids=["a-zero-count", "a-class-out-of-range", "cells-a-string", "a-dense-matrix-of-one-row"])
def test_a_confusion_matrix_of_neither_form_is_refused_naming_the_field(tmp_path, matrix, field):
    labels, predictions, names = planted(101)
    summary = reports.classification_summary(labels, predictions, names)
    summary["confusion_matrix"] = matrix
    with pytest.raises(reports.DatasetError) as raised:
        reports.read_report(write_report(tmp_path, summary))
    assert f"report.json: {field} is" in str(raised.value)


@pytest.fixture
def drawn(monkeypatch):
    """What plot_confusion hands scikit-learn's ConfusionMatrixDisplay: [(matrix, labels)]."""
    import sklearn.metrics

    calls = []

    class Recording(sklearn.metrics.ConfusionMatrixDisplay):
        def __init__(self, confusion_matrix, *, display_labels=None):
            calls.append((np.asarray(confusion_matrix), list(display_labels)))
            super().__init__(confusion_matrix, display_labels=display_labels)

    monkeypatch.setattr(sklearn.metrics, "ConfusionMatrixDisplay", Recording)
    return calls


def png_size(path):
    with open(path, "rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_the_figure_of_a_large_label_set_shows_its_most_confused_classes(tmp_path, drawn, large):
    labels, predictions, names, summary = large
    path = str(tmp_path / "confusion.png")
    reports.plot_confusion(summary["confusion_matrix"], names, path)
    (matrix, shown), = drawn
    assert shown == [names[k] for k in GROUP]
    cells = by_hand(labels, predictions)
    expected = [[cells.get((t, p), 0) for p in GROUP] for t in GROUP]
    assert np.array_equal(matrix, expected)
    # 0.5 inch a class plus 2, at 100 dpi, for FIGURE_CLASSES classes (tight_layout may trim).
    side = (0.5 * reports.FIGURE_CLASSES + 2) * 100
    assert all(pixels <= side for pixels in png_size(path)), png_size(path)


def test_out_of_memory_drawing_the_figure_names_the_step_not_a_batch_size(tmp_path, monkeypatch,
                                                                         capsys, large):
    import sklearn.metrics

    def no_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(sklearn.metrics.ConfusionMatrixDisplay, "plot", no_memory)
    labels, predictions, names, summary = large
    path = str(tmp_path / "confusion.png")
    with pytest.raises(OutOfMemoryError, match=f"drawing {path} for 10,000 classes"):
        reports.plot_confusion(summary["confusion_matrix"], names, path)

    def command(args):
        reports.plot_confusion(summary["confusion_matrix"], names, path)

    assert report_errors("keras-vit evaluate", command, argparse.Namespace(batch_size=32)) == 2
    err = capsys.readouterr().err
    assert err == (f"keras-vit evaluate: error: out of host memory drawing {path} for 10,000 "
                   "classes (MemoryError).\n")
    assert not os.path.exists(path)


def test_evaluations_rows_give_a_sparse_report_and_each_rows_top_classes(tmp_path, monkeypatch):
    """evaluate's own report and predictions.csv from planted rows of 10,000 scores: the
    arg-maxes and top-5 against numpy's full stable sort, with ties."""
    rng = np.random.default_rng(0)
    names = [f"c{k}" for k in range(CLASSES)]
    rows = []
    for i in range(60):
        scores = rng.integers(0, 4, CLASSES).astype(np.float32)  # many ties
        scores[rng.integers(0, CLASSES, 3)] = 9.0  # three tied best
        rows.append((f"img{i}", int(rng.integers(0, CLASSES)), scores))
    report = evaluation._report(rows, names, "many", [], {"fingerprints": {"test": "ab"}})
    ranked = [np.argsort(-scores, kind="stable") for _, _, scores in rows]
    assert as_dict(reports.confusion_cells(report["confusion_matrix"])) == collections.Counter(
        (label, int(order[0])) for (_, label, _), order in zip(rows, ranked))
    assert report["top5_accuracy"] == np.mean([label in order[:5] for (_, label, _), order
                                               in zip(rows, ranked)])
    drawn = []  # the figure's own test is above; here, what evaluate hands it
    monkeypatch.setattr(evaluation, "plot_confusion", lambda *args: drawn.append(args))
    evaluation._write_evaluation(str(tmp_path), report, rows, names, top=7)
    assert drawn == [(report["confusion_matrix"], names, str(tmp_path / "confusion.png"))]
    with open(tmp_path / "predictions.csv") as f:
        lines = f.read().splitlines()[1:]
    for line, (item, label, _), order in zip(lines, rows, ranked):
        assert line.split(",")[:3] == [item, names[label], names[order[0]]]
        assert line.split(",")[3::2] == [names[k] for k in order[:7]]
    with open(tmp_path / "report.json") as f:
        assert "cells" in json.load(f)["confusion_matrix"]


def test_compare_reads_sparse_reports(tmp_path):
    labels, predictions, names = planted(reports.SPARSE_CONFUSION_CLASSES + 1)
    folders = []
    for name, shift in (("a", 0), ("b", 1)):
        summary = reports.classification_summary(labels, (predictions + shift) % len(names),
                                                 names)
        write_report(tmp_path / name, summary)
        folders.append(str(tmp_path / name))
    compare_runs(folders, str(tmp_path / "cmp"))
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    accuracy = [np.mean(labels == (predictions + shift) % len(names)) for shift in (0, 1)]
    assert f"| test accuracy | {accuracy[0]:.4f} | {accuracy[1]:.4f} |" in markdown
    assert sum(line.startswith("| class_") for line in markdown.splitlines()) == len(names)
