"""`keras-vit compare`: two runs side by side (summary, per-class table, curves), the refusal
of runs on other datasets or splits, evaluation folders, and the FLOP count it shows."""

import json
import os
import re
import shutil

import keras
import numpy as np
import pytest

from benchmarks.flops import vit_forward_flops
from keras_vit.analysis import compare_runs, forward_flops
from keras_vit.errors import DatasetError
from keras_vit.variants import get_variant


def read_report(folder):
    with open(os.path.join(folder, "report.json")) as f:
        return json.load(f)


def table_rows(markdown, first_cell):
    """The cells of the Markdown rows whose first cell is `first_cell`."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in markdown.splitlines() if line.startswith("|")]
    return [row[1:] for row in rows if row[0] == first_cell]


def _scores(matrix):
    """report.json's accuracy, per-class and macro scores of a confusion matrix (rows: true)."""
    per_class = {}
    for i in range(len(matrix)):
        tp, predicted, support = matrix[i, i], matrix[:, i].sum(), matrix[i].sum()
        precision = tp / predicted if predicted else 0.0
        recall = tp / support
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[str(i)] = {"precision": precision, "recall": recall, "f1": f1,
                             "support": int(support)}
    macro = {k: float(np.mean([c[k] for c in per_class.values()]))
             for k in ("precision", "recall", "f1")}
    return float(np.trace(matrix) / matrix.sum()), per_class, macro


def _one_more_error(report):
    """A class-0 test image moved from right to wrong (class 1), the scores recomputed."""
    matrix = np.asarray(report["confusion_matrix"], int)
    assert matrix[0, 0] > 0, matrix  # two epochs of digits get some zeros right
    matrix[0, 0] -= 1
    matrix[0, 1] += 1
    report["confusion_matrix"] = matrix.tolist()
    report["accuracy"], report["per_class"], report["macro_avg"] = _scores(matrix)


@pytest.fixture(params=["edited", pytest.param("trained", marks=pytest.mark.slow)])
def second_run(request, digits_run, tmp_path):
    """The shared run's report with one more error and its model (the default), or a second
    real digits run: one epoch, another training seed, same split (~15 CPU-s)."""
    if request.param == "edited":
        folder = edited_copy(digits_run[0], tmp_path / "edited", _one_more_error)
        shutil.copy(os.path.join(digits_run[0], "model.keras"), folder)
        return folder
    from keras_vit.training import train

    output = str(tmp_path / "one_epoch")
    train("digits", epochs=1, seed=1, output=output, verbose=0)
    return output


def test_compare_two_runs_shows_both_accuracies_and_a_row_per_class(digits_run, second_run,
                                                                     cli, tmp_path):
    """The shared two-epoch run against a second run. Every number checked against the
    confusion matrix of each report.json, recomputed here."""
    first = digits_run[0]
    result = cli(["compare", first, second_run, "--output", str(tmp_path / "cmp")])
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    with open(tmp_path / "cmp" / "comparison.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    reports = [read_report(first), read_report(second_run)]
    matrices = [np.asarray(r["confusion_matrix"], float) for r in reports]
    accuracies = [np.trace(m) / m.sum() for m in matrices]
    assert table_rows(markdown, "test accuracy") == [[f"{a:.4f}" for a in accuracies]]
    assert accuracies[0] != accuracies[1]  # two different runs, told apart in the table
    assert table_rows(markdown, "model") == [["ViT-demo_4", "ViT-demo_4"]]
    assert table_rows(markdown, "parameters") == [[f"{r['parameters']:,}" for r in reports]]
    # One row per class, each run's precision, recall and F1 in its own group of columns.
    for index, name in enumerate(reports[0]["class_names"]):
        rows = table_rows(markdown, name)
        assert len(rows) == 1, name
        expected = [str(int(matrices[0][index].sum()))]
        for m in matrices:
            tp = m[index, index]
            precision = tp / m[:, index].sum() if m[:, index].sum() else 0.0
            recall = tp / m[index].sum()
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            expected += [f"{precision:.3f}", f"{recall:.3f}", f"{f1:.3f}"]
        assert rows[0] == expected, name
    # GFLOPs from the run's model.keras, against the analytic count of benchmarks/flops.py.
    demo = get_variant("demo")
    flops = vit_forward_flops(demo.width, demo.depth, demo.mlp_dim, demo.patch_size, 16,
                              classes=10, class_token_last_block=True)
    assert table_rows(markdown, "GFLOPs per image") == [[f"{flops / 1e9:.4g}"] * 2]


def edited_copy(run, folder, edit):
    """run's report.json and log.csv in `folder`, report.json changed by `edit`."""
    os.makedirs(folder)
    shutil.copy(os.path.join(run, "log.csv"), folder)
    report = read_report(run)
    edit(report)
    with open(os.path.join(folder, "report.json"), "w") as f:
        json.dump(report, f)
    return str(folder)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["split"]["fingerprints"].update(test="feedfacefeedface"),
     r"used different test splits of 'digits' \(fingerprints [0-9a-f]{16} and feedfacefeedface\)"),
    (lambda r: r["split"]["fingerprints"].update(validation="feedfacefeedface"),
     r"used different validation splits of 'digits' \(fingerprints [0-9a-f]{16} and "
     r"feedfacefeedface\)"),
    (lambda r: r.update(dataset="flower_photos"),
     r"are on different datasets \('digits' and 'flower_photos'\)"),
], ids=["test-split", "validation-split", "dataset"])
def test_compare_refuses_runs_on_other_splits_or_datasets_naming_the_difference(
        digits_run, cli, tmp_path, edit, message):
    """Copies of the shared run's report.json with one field changed (cheaper than a
    second run on another split): one line, exit 2, nothing written."""
    other = edited_copy(digits_run[0], tmp_path / "other", edit)
    result = cli(["compare", digits_run[0], other, "--output", str(tmp_path / "cmp")])
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-vit compare: error: "), result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "cmp").exists()
    with pytest.raises(DatasetError):
        compare_runs([digits_run[0], other], str(tmp_path / "cmp"))


def test_compare_reads_an_evaluation_folder_through_the_documented_fields(digits_run, tmp_path):
    """A folder with a report.json holding only the fields compare documents as required
    (what `keras-vit evaluate --output` writes), no log.csv and no model: compared with a run,
    its missing numbers show as "-"."""
    report = read_report(digits_run[0])
    required = {key: report[key] for key in ("dataset", "class_names", "accuracy", "macro_avg",
                                            "per_class")}
    required["split"] = {"fingerprints": {"test": report["split"]["fingerprints"]["test"]}}
    required["accuracy"] = 0.5
    os.makedirs(tmp_path / "eval")
    (tmp_path / "eval" / "report.json").write_text(json.dumps(required))
    compare_runs([digits_run[0], str(tmp_path / "eval")], str(tmp_path / "cmp"))
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    assert table_rows(markdown, "test accuracy") == [[f"{report['accuracy']:.4f}", "0.5000"]]
    assert table_rows(markdown, "parameters")[0][1] == table_rows(
        markdown, "training time (s)")[0][1] == "-"
    # Without the test split's fingerprint there is no telling which examples it measured.
    del required["split"]
    (tmp_path / "eval" / "report.json").write_text(json.dumps(required))
    with pytest.raises(DatasetError, match="lacks split.fingerprints.test"):
        compare_runs([digits_run[0], str(tmp_path / "eval")], str(tmp_path / "cmp2"))


def test_forward_flops_of_a_cnn_is_its_convolutions_and_dense_layers():
    """Any model, not only a ViT: counted by hand (2 per multiply-add)."""
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(inputs)  # 16 x 16 x 8
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(5)(x)
    model = keras.Model(inputs, outputs)
    expected = 2 * (16 * 16 * 8 * 3 * 3 * 3 + 16 * 16 * 8 * 3 * 3 + 8 * 5)
    assert forward_flops(model) == expected
