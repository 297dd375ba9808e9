"""`keras-vit compare` on folders it did not write: hand-edited or foreign report.json, log.csv
and model.keras are refused in one line naming the file and the field, and names holding
Markdown or HTML are shown as text in comparison.md (rendered here by markdown-it, parsed by
BeautifulSoup: libraries of their own, not the code under test).

The folders are written by hand (report.json holds only the schema's fields), so no test here
trains or loads a model."""

import json
import os
import zipfile

import pytest
from bs4 import BeautifulSoup
from markdown_it import MarkdownIt

from keras_vit.analysis import compare_runs
from keras_vit.errors import KerasViTError

FINGERPRINT = "0123456789abcdef"


def valid_report(class_names=("cat", "dog")):
    """A report.json with the schema's required fields, every number consistent."""
    scores = {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    return {"dataset": "pets", "class_names": list(class_names), "accuracy": 0.5,
            "macro_avg": dict(scores),
            "per_class": {name: {**scores, "support": 2} for name in class_names},
            "split": {"fingerprints": {"test": FINGERPRINT}}}


def write_folder(folder, report=None, log=None, model=None):
    """A run folder: report.json (a dict is dumped as JSON, a str written as it is), and
    log.csv and model.keras (bytes or a callable that writes it) when given."""
    os.makedirs(folder, exist_ok=True)
    report = valid_report() if report is None else report
    with open(os.path.join(folder, "report.json"), "w") as f:
        f.write(report if isinstance(report, str) else json.dumps(report))
    if log is not None:
        with open(os.path.join(folder, "log.csv"), "w") as f:
            f.write(log)
    if model is not None:
        path = os.path.join(folder, "model.keras")
        if callable(model):
            model(path)
        else:
            with open(path, "wb") as f:
                f.write(model)
    return str(folder)


def edited(edit):
    report = valid_report()
    edit(report)
    return report


def zip_holding(members):
    def write(path):
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
    return write


LOG = "epoch,accuracy,loss,val_accuracy,val_loss\n0,0.5,1.0,0.5,1.0\n1,0.6,0.9,0.6,0.9\n"

# (id, what the foreign folder holds, the file named, the field or reason named)
CASES = [
    ("accuracy-a-word", dict(report=edited(lambda r: r.update(accuracy="high"))),
     "report.json", "accuracy is 'high'"),
    ("accuracy-nan", dict(report=json.dumps(valid_report()).replace('"accuracy": 0.5',
                                                                     '"accuracy": NaN')),
     "report.json", "accuracy is nan"),
    ("accuracy-infinite", dict(report=json.dumps(valid_report()).replace('"accuracy": 0.5',
                                                                          '"accuracy": Infinity')),
     "report.json", "accuracy is inf"),
    ("accuracy-above-one", dict(report=edited(lambda r: r.update(accuracy=3))),
     "report.json", "accuracy is 3, not a number from 0 to 1"),
    ("accuracy-a-bool", dict(report=edited(lambda r: r.update(accuracy=True))),
     "report.json", "accuracy is True"),
    ("per-class-a-list", dict(report=edited(lambda r: r.update(per_class=[1, 2]))),
     "report.json", "per_class is [1, 2], not an object"),
    ("per-class-entry-a-number", dict(report=edited(lambda r: r["per_class"].update(cat=1))),
     "report.json", "per_class['cat'] is 1"),
    ("support-a-string", dict(report=edited(lambda r: r["per_class"]["dog"].update(support="2"))),
     "report.json", "per_class['dog'].support is '2'"),
    ("class-names-a-number", dict(report=edited(lambda r: r.update(class_names=7))),
     "report.json", "class_names is 7"),
    ("class-names-of-numbers", dict(report=edited(lambda r: r.update(class_names=[1, 2]))),
     "report.json", "class_names is [1, 2]"),
    ("macro-f1-missing", dict(report=edited(lambda r: r["macro_avg"].pop("f1"))),
     "report.json", "macro_avg.f1 is None"),
    ("dataset-a-list", dict(report=edited(lambda r: r.update(dataset=["pets"]))),
     "report.json", "dataset is ['pets']"),
    ("split-a-string", dict(report=edited(lambda r: r.update(split="test"))),
     "report.json", "split is 'test', not an object"),
    ("fingerprint-a-number", dict(report=edited(
        lambda r: r["split"]["fingerprints"].update(test=12))),
     "report.json", "split.fingerprints.test is 12"),
    ("validation-without-its-fraction", dict(report=edited(
        lambda r: r["split"]["fingerprints"].update(validation=FINGERPRINT))),
     "report.json", "split.validation_fraction is None"),
    ("parameters-a-word", dict(report=edited(lambda r: r.update(parameters="many"))),
     "report.json", "parameters is 'many'"),
    ("train-seconds-negative", dict(report=edited(lambda r: r.update(train_seconds=-1))),
     "report.json", "train_seconds is -1"),
    ("recipe-a-list", dict(report=edited(lambda r: r.update(recipe=["scratch"]))),
     "report.json", "recipe is ['scratch']"),
    ("batch-size-a-word", dict(report=edited(
        lambda r: r.update(recipe={"name": "scratch", "batch_size": "big"}, train_seconds=5,
                           steps_per_epoch=3, epochs_logged=2))),
     "report.json", "recipe.batch_size is 'big'"),
    ("model-a-number", dict(report=edited(lambda r: r.update(model=5))),
     "report.json", "model is 5, not a string"),
    ("report-a-list", dict(report="[1, 2, 3]"), "report.json", "the file is [1, 2, 3]"),
    ("report-not-json", dict(report="{accuracy: high"), "report.json", "not valid JSON"),
    ("log-epoch-a-word", dict(log=LOG.replace("\n1,", "\nlast,")),
     "log.csv", "line 3: epoch is 'last'"),
    ("log-accuracy-a-word", dict(log=LOG.replace("0,0.5,1.0", "0,high,1.0")),
     "log.csv", "line 2: accuracy is 'high'"),
    ("log-row-short", dict(log=LOG + "2\n"), "log.csv", "line 4 has not the header's 5 fields"),
    ("log-not-utf8", dict(log="epoch,loss\n0,\udcff\n".encode("utf-8", "surrogateescape")
                          .decode("latin-1")), "log.csv", None),
    ("model-a-text-file", dict(model=b"not a model"), "model.keras", "not a .keras file"),
    ("model-an-empty-zip", dict(model=zip_holding({})), "model.keras", "not a .keras model"),
    ("model-config-a-list", dict(model=zip_holding({"config.json": "[]",
                                                    "metadata.json": "{}"})),
     "model.keras", "not a .keras model"),
    ("model-config-not-json", dict(model=zip_holding({"config.json": "{",
                                                      "metadata.json": "{}"})),
     "model.keras", "not a .keras model"),
]


@pytest.mark.parametrize("content, file, named", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_a_foreign_run_folder_is_refused_naming_its_file_and_field(cli, tmp_path, content, file,
                                                                   named):
    good = write_folder(tmp_path / "good", log=LOG)
    bad = write_folder(tmp_path / "bad", **content)
    output = tmp_path / "cmp"
    result = cli(["compare", good, bad, "--output", str(output)])
    assert result.returncode == 2 and result.stdout == "", result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-vit compare: error: "), result.stderr
    assert os.path.join(bad, file) in lines[0], lines[0]
    if named is not None:
        assert named in lines[0], lines[0]
    assert not output.exists()
    with pytest.raises(KerasViTError):
        compare_runs([good, bad], str(output))


def test_the_valid_folders_of_the_cases_compare(cli, tmp_path):
    """The baseline every case above edits is accepted: each refusal is the edit's."""
    good = write_folder(tmp_path / "good", log=LOG)
    other = write_folder(tmp_path / "other", log=LOG.replace("0.6,0.9", "nan,inf"),
                         report=edited(lambda r: r.update(
                             recipe={"name": "scratch", "batch_size": 8}, train_seconds=5,
                             steps_per_epoch=3, epochs_logged=2, parameters=10,
                             model=None)))
    result = cli(["compare", good, other, "--output", str(tmp_path / "cmp")])
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "| training images/s | - | 9.6 |" in markdown  # 3 * 8 * 2 / 5


def rendered(markdown):
    """comparison.md as a GFM renderer shows it, raw HTML allowed through (as GitHub would
    sanitise it, but a local viewer may not): the parsed HTML."""
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    return BeautifulSoup(md.render(markdown), "html.parser")


HOSTILE_NAMES = ["a|b", "two\nlines", "# heading\n## another", "<script>alert(1)</script>",
                 "<img src=x onerror=alert(1)>", "*bold* _it_ `code` [link](http://x) ~~s~~",
                 "back\\slash|", "&lt;entity&gt;", "$\\frac{$"]


def test_names_holding_markdown_or_html_are_shown_as_text(tmp_path):
    """Class names, the model name, the dataset and the folder labels hold Markdown table
    syntax, line breaks and HTML: the rendered page has exactly the two tables and two
    headings compare writes, no element from a name, and each cell reads as the name."""
    report = valid_report(HOSTILE_NAMES)
    report.update(model="<script>x</script>|m", dataset="<b>pets</b>\n# x`y`")
    first = write_folder(tmp_path / "run <b>|1", report=report, log=LOG)
    second = write_folder(tmp_path / "run\n# 2", report=report)
    compare_runs([first, second], str(tmp_path / "cmp"))
    markdown = (tmp_path / "cmp" / "comparison.md").read_text()
    page = rendered(markdown)
    assert [h.name for h in page.find_all(["h1", "h2", "h3", "h4", "h5", "h6"])] == ["h1", "h2"]
    assert not page.find_all(["script", "img", "b", "em", "strong", "a", "del", "s", "ul",
                              "ol", "br"])
    summary, per_class = page.find_all("table")
    header = [th.get_text() for th in summary.find_all("th")]
    assert header == ["", "run <b>|1", "run # 2"]
    model = [td.get_text() for td in summary.find_all("tr")[1].find_all("td")]
    assert model == ["model", "<script>x</script>|m", "<script>x</script>|m"]
    rows = per_class.find("tbody").find_all("tr")
    assert [row.find("td").get_text() for row in rows] == [" ".join(name.splitlines())
                                                          for name in HOSTILE_NAMES]
    assert all(len(row.find_all("td")) == 2 + 3 * 2 for row in rows)
    assert "<b>pets</b> # x`y`" in page.find("p").get_text()
    with open(tmp_path / "cmp" / "comparison.png", "rb") as f:  # the `$` label drew
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
