"""What `keras-vit predict` and `evaluate` write, under hostile names and places: a file name that
is not UTF-8 is written byte for byte (never a lost run), a cell a spreadsheet would run is
quoted, and an output place that cannot be written fails in one line (before any prediction
where it can be known)."""

import csv
import errno
import importlib
import io
import json
import os
import sys

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit import atomic
from keras_vit._support.outputs import spreadsheet_cell
from keras_vit.runtime import inference
from tests.export.test_export import CLASSES, SIZE, tiny_classifier

cli_main = importlib.import_module("keras_vit.cli.main")  # the module (the package exports main)
HOSTILE_NAME = b"\xff\xfe.png"  # not UTF-8: Python sees it as '\udcff\udcfe.png'
FORMULAS = ["=1+1", "+SUM(A1)", "-2+3", "@cmd", "\tx", "\r=1", "'quoted"]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    tiny_classifier(seed=3).save(path)
    return str(path)


def _png(path, seed):
    pixels = np.random.default_rng(seed).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format="PNG")


@pytest.fixture
def photos(tmp_path):
    """A folder with a.png, b.png and one file whose name is not UTF-8 (bytes, as Linux allows)."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed, name in enumerate([b"a.png", HOSTILE_NAME, b"b.png"]):
        _png(os.path.join(os.fsencode(folder), name), seed)
    return folder


def run_bytes(argv, monkeypatch):
    """Runs `keras-vit ARGV` in this process with stdout and stderr as a UTF-8 terminal's
    (strict: a lone surrogate cannot be encoded); returns (status, stdout bytes, stderr bytes)."""
    out, err = io.BytesIO(), io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out, "utf-8", "strict", write_through=True))
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(err, "utf-8", "strict", write_through=True))
    try:
        status = cli_main.main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return status, out.getvalue(), err.getvalue()


# --- names that are not UTF-8 -------------------------------------------------------------------

def test_a_name_that_is_not_utf8_is_written_byte_for_byte_in_csv_jsonl_and_stdout(
        model_file, photos, tmp_path, monkeypatch):
    hostile = os.path.join(os.fsencode(photos), HOSTILE_NAME)
    expected = [os.path.join(os.fsencode(photos), name) for name in (b"a.png", b"b.png")] + [hostile]

    status, _, err = run_bytes(["predict", str(photos), "--model", model_file, "--output",
                                str(tmp_path / "preds.csv")], monkeypatch)
    assert status == 0, err
    # The documented way back: UTF-8 with surrogate escapes, then os.fsencode.
    with open(tmp_path / "preds.csv", newline="", encoding="utf-8",
              errors="surrogateescape") as f:
        rows = list(csv.reader(f))[1:]
    assert sorted(os.fsencode(row[0]) for row in rows) == sorted(expected)
    assert all(row[1] == "" and row[2].startswith("class ") for row in rows)
    assert hostile in (tmp_path / "preds.csv").read_bytes()  # the bytes themselves

    status, _, err = run_bytes(["predict", str(photos), "--model", model_file, "--output",
                                str(tmp_path / "preds.jsonl")], monkeypatch)
    assert status == 0, err
    lines = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text("ascii").splitlines()]
    assert sorted(os.fsencode(line["path"]) for line in lines) == sorted(expected)
    assert all(line["error"] is None and len(line["labels"]) == 5 for line in lines)

    status, out, err = run_bytes(["predict", str(photos), "--model", model_file], monkeypatch)
    assert status == 0, err
    printed = [line for line in out.split(b"\n") if line and not line.startswith(b" ")]
    assert sorted(printed) == sorted(expected)


def test_a_list_file_names_files_as_the_platform_does(model_file, photos, tmp_path, monkeypatch):
    """A .txt list holding a name that is not UTF-8 (as `ls > list.txt` writes it) names that
    file; a binary list (UTF-16: NUL bytes) is one line, exit 2."""
    listed = tmp_path / "list.txt"
    listed.write_bytes(os.path.join(os.fsencode(photos), HOSTILE_NAME) + b"\n")
    status, out, err = run_bytes(["predict", str(listed), "--model", model_file], monkeypatch)
    assert status == 0, err
    assert out.split(b"\n")[0] == os.path.join(os.fsencode(photos), HOSTILE_NAME)

    utf16 = tmp_path / "utf16.txt"
    utf16.write_text(f"{photos}/a.png\n", encoding="utf-16")
    status, out, err = run_bytes(["predict", str(utf16), "--model", model_file], monkeypatch)
    assert status == 2 and out == b""
    assert err.decode().splitlines() == [
        f"keras-vit predict: error: {utf16} is not a text list of image paths (it holds NUL "
        "bytes; save it as UTF-8 text, one path a line)."]


def test_a_path_that_cannot_name_a_file_is_its_rows_error(model_file, photos):
    """A NUL (which the C library would cut the name at) or a lone surrogate that no file name
    encodes: that row's error; the rows around it are predicted."""
    good = str(photos / "a.png")
    paths = inference.ImageFiles([good, good + "\0.png", "\ud800.png", good])
    results = list(keras_vit.predict_images(model_file, paths, batch_size=2, top=1))
    assert [r.error is None for r in results] == [True, False, False, True]
    assert "cannot name a file" in results[1].error and "cannot name a file" in results[2].error
    assert results[0].top == results[3].top


# --- spreadsheet-safe CSV -----------------------------------------------------------------------

@pytest.mark.parametrize("text", FORMULAS)
def test_a_cell_a_spreadsheet_would_run_is_quoted_and_reads_back(text):
    cell = spreadsheet_cell(text)
    assert cell == "'" + text
    assert cell[1:] == text  # the documented way back: drop the added quote


@pytest.mark.parametrize("value, cell", [("cat", "cat"), ("", ""), (None, ""), (0.25, "0.25"),
                                         (-1.5e-05, "-1.5e-05"), (np.float32(0.5), "0.5"),
                                         (np.int64(7), "7"), ("a=b", "a=b")])
def test_numbers_and_plain_text_are_written_as_they_are(value, cell):
    assert spreadsheet_cell(value) == cell


def _labels_file(folder, names):
    path = folder / "labels.txt"
    path.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
    return path


def test_predict_quotes_formula_paths_and_labels(model_file, tmp_path, monkeypatch, cli):
    """Labels and a relative path beginning with = + - @ are quoted in preds.csv, and reading
    back by the documented rule gives the names given."""
    labels = ["=HYPERLINK(\"http://x\")", "+1", "-1", "@SUM(1)", "'q", "\ttab"] + \
        [f"class {i}" for i in range(CLASSES - 6)]
    monkeypatch.chdir(tmp_path)
    _png(tmp_path / "=1+1.png", 0)
    result = cli(["predict", "=1+1.png", "--model", model_file, "--labels",
                  str(_labels_file(tmp_path, labels)), "--top", str(CLASSES), "--output",
                  "preds.csv"])
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "preds.csv", newline="", encoding="utf-8") as f:
        header, row = list(csv.reader(f))
    text = [row[0], *row[2::2]]
    assert not [cell for cell in text if cell.startswith(("=", "+", "-", "@", "\t", "\r"))]
    originals = [cell[1:] if cell.startswith("'") else cell for cell in text]
    assert originals[0] == "=1+1.png" and sorted(originals[1:]) == sorted(labels)
    assert all(float(p) > 0 for p in row[3::2])  # probabilities stay numbers


def test_evaluate_quotes_formula_class_names(model_file, tmp_path, cli):
    """predictions.csv of `evaluate` on class folders named like formulas: every text cell
    quoted, and each reads back to its folder's name."""
    names = ["=cmd", "+plus", "-minus", "@at", "'quote", *[f"c{i}" for i in range(CLASSES - 5)]]
    for label, name in enumerate(names):
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(5):  # 50 images: a 20% held-out split holds one of each of 10 classes
            _png(tmp_path / "data" / name / f"{i}.png", 10 * label + i)
    out = tmp_path / "out"
    result = cli(["evaluate", "--model", model_file, "--dataset", str(tmp_path / "data"),
                  "--output", str(out)])
    assert result.returncode == 0, result.stderr
    with open(out / "predictions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    assert rows
    for row in rows:
        text = [row[0], row[1], row[2], *row[3::2]]
        assert not [c for c in text if c.startswith(("=", "+", "-", "@", "\t", "\r"))], row
        item, label, predicted = (c[1:] if c.startswith("'") else c for c in row[:3])
        assert label == os.path.basename(os.path.dirname(item)) and {label, predicted} <= set(names)


# --- output places --------------------------------------------------------------------------

def _no_prediction(monkeypatch):
    """Fails the test if anything is predicted (the refusal must come first)."""
    def refuse(*args, **kwargs):
        raise AssertionError("predicted before the output place was checked")
    monkeypatch.setattr(inference, "predict_images", refuse)


def test_an_output_that_is_a_folder_is_refused_before_any_prediction(model_file, photos, tmp_path,
                                                                      monkeypatch, cli):
    (tmp_path / "taken.csv").mkdir()
    _no_prediction(monkeypatch)
    result = cli(["predict", str(photos), "--model", model_file, "--output",
                  str(tmp_path / "taken.csv")])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"keras-vit predict: error: --output {tmp_path / 'taken.csv'} is a folder; name a file "
        "to write."]
    assert os.listdir(tmp_path / "taken.csv") == []


def test_an_output_in_a_folder_that_cannot_be_written_is_refused_before_any_prediction(
        model_file, photos, tmp_path, monkeypatch, cli):
    """access(2) says no (as on a read-only mount): refused before the first image."""
    real_access = os.access
    monkeypatch.setattr(atomic.os, "access", lambda path, mode: False if str(path).startswith(
        str(tmp_path)) else real_access(path, mode))
    _no_prediction(monkeypatch)
    result = cli(["predict", str(photos), "--model", model_file, "--output",
                  str(tmp_path / "new" / "preds.csv")])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"keras-vit predict: error: --output {tmp_path / 'new' / 'preds.csv'} cannot be written: "
        f"the folder {tmp_path} is not writable (a read-only file system, or no permission)."]
    assert not (tmp_path / "new").exists()


class _FailingFile:
    """A file whose writes fail with `code` once `after` bytes are written, as a full disk's."""

    def __init__(self, file, code, after):
        self.file, self.code, self.left = file, code, after

    def write(self, text):
        self.left -= len(text)
        if self.left < 0:
            raise OSError(self.code, os.strerror(self.code))
        return self.file.write(text)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.file.__exit__(*exc)


@pytest.mark.parametrize("output, code, at_open", [("preds.csv", errno.ENOSPC, False),
                                                   ("preds.jsonl", errno.ENOSPC, False),
                                                   ("preds.csv", errno.EROFS, True)])
def test_a_full_or_read_only_file_system_is_one_line_and_the_earlier_file_stays(
        output, code, at_open, model_file, photos, tmp_path, monkeypatch, cli):
    """The OSError injected where the system raises it: ENOSPC at a write (after the header),
    EROFS when the temporary is opened. One line naming the file and the reason, exit 2; the
    earlier file as it was; no temporary left."""
    target = tmp_path / output
    target.write_text("earlier\n")
    real_open = open

    def failing_open(path, mode="r", *args, **kwargs):
        if at_open:
            raise OSError(code, os.strerror(code), path)
        return _FailingFile(real_open(path, mode, *args, **kwargs), code, after=200)

    monkeypatch.setattr(atomic, "open", failing_open, raising=False)
    result = cli(["predict", str(photos), "--model", model_file, "--output", str(target)])
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"keras-vit predict: error: {target} could not be written: {os.strerror(code)} "
        f"({errno.errorcode[code]}); any earlier file of that name is left as it was."]
    assert target.read_text() == "earlier\n"
    assert sorted(os.listdir(tmp_path)) == sorted(["photos", output])


def test_the_injected_failures_are_raised_where_they_were_meant_to_be(tmp_path, monkeypatch):
    """The test above can fail: without atomic.py's conversion, the injected write error is the
    bare OSError (a traceback at the command line)."""
    monkeypatch.setattr(atomic, "_about_writing", lambda error, path, tmp: False)
    real_open = open
    monkeypatch.setattr(atomic, "open", lambda path, mode="r", *a, **k: _FailingFile(
        real_open(path, mode, *a, **k), errno.ENOSPC, after=0), raising=False)
    with pytest.raises(OSError) as error:
        with atomic.atomic_open(tmp_path / "x.csv", "w") as f:
            f.write("row\n")
    assert error.value.errno == errno.ENOSPC and not isinstance(error.value, keras_vit.KerasViTError)


# --- Ctrl-C's line --------------------------------------------------------------------------

@pytest.mark.parametrize("argv, resumes", [(["predict", "a.png", "--model", "B/16"], False),
                                           (["evaluate", "--model", "B/16", "--dataset",
                                             "digits", "--output", "out"], False),
                                           (["export", "--model", "B/16", "--output", "out"],
                                            False),
                                           (["train", "--dataset", "digits"], True)])
def test_ctrl_c_promises_a_resume_only_where_the_command_resumes(argv, resumes, monkeypatch):
    """The line Ctrl-C prints while the command runs (keras_vit/cli/main.py): only train
    resumes an interrupted run (keras_vit/training/resume.py)."""
    seen = []
    monkeypatch.setattr(cli_main, "report_errors",
                        lambda prog, run, args: seen.append(cli_main._interrupted_note) or 0)
    cli_main.main(argv)
    assert ("resume" in seen[0]) == resumes, seen[0]
    assert cli_main._interrupted_note == cli_main.INTERRUPTED  # not left for the next command
