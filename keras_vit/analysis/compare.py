"""Runs side by side: `compare_runs(folders, output)` writes comparison.md and comparison.png.

A folder is a `keras-vit train` run or an evaluation folder (`keras-vit evaluate --output`);
both are read through the same fields, so an evaluation folder only has to write them.

What compare reads from a folder's report.json (the schema `train` writes):

- required: `dataset` (the dataset's name: "digits", a folder's name, a TFDS name),
  `class_names` (the head's order), `split.fingerprints.test`
  (`keras_vit.data.split_fingerprint` of the test split's example ids), and the numbers
  measured on that test split: `accuracy`, `macro_avg` {precision, recall, f1},
  `per_class` {class name: {precision, recall, f1, support}}.
- optional (shown as "-" when absent): `model`, `weights`, `recipe.name`, `teacher` (a
  distilled run's teacher and its distillation; "none" for a run trained without one), `parameters`,
  `gflops_per_image` (else counted from the folder's model.keras, `forward_flops`),
  `train_seconds`, `images_per_second` (else training images per second:
  `steps_per_epoch * recipe.batch_size * epochs_logged / train_seconds`), and
  `split.fingerprints.train` / `.validation`, checked when both folders have them.
- log.csv (optional): the learning curves (`accuracy`, `loss`, `val_accuracy`, `val_loss`
  per `epoch`).

Every folder is checked once, when read, against the schema (`keras_vit.reports.read_report`
and `check_log`; a model.keras through the one `.keras` loader): a hand-edited or foreign
folder is refused in one line naming the file and the field. Folders on different datasets,
classes or splits are refused (`DatasetError`, naming what differs): their numbers do not
measure the same thing.

comparison.md is safe to render: names (classes, models, folders) are escaped as Markdown
table cells and HTML, so a `|`, a line break or a `<script>` in a name stays text.
"""

import html
import math
import os
import re

from keras_vit.errors import ArgumentError, DatasetError, PathNotFoundError
from keras_vit.reports import check_log, read_log, read_report

__all__ = ["compare_runs", "read_run"]

MISSING = "-"


def read_run(folder):
    """A folder's report.json (checked for what compare needs), log rows, and its label."""
    path = os.path.join(folder, "report.json")
    if not os.path.isfile(path):
        raise PathNotFoundError(f"{folder} has no report.json: not a training run or an "
                                "evaluation folder.")
    report = read_report(path)
    log_path = os.path.join(folder, "log.csv")
    log = read_log(log_path)
    check_log(log, log_path)
    return {"folder": folder, "report": report, "log": log}


def check_comparable(runs):
    """Raises DatasetError naming the first difference of dataset, classes or split."""
    first = runs[0]
    for other in runs[1:]:
        a, b = first["report"], other["report"]
        pair = f"{first['folder']} and {other['folder']}"
        if a["dataset"] != b["dataset"]:
            raise DatasetError(f"{pair} are on different datasets ({a['dataset']!r} and "
                               f"{b['dataset']!r}); compare runs on the same dataset and split.")
        if list(a["class_names"]) != list(b["class_names"]):
            raise DatasetError(f"{pair} have different classes ({_short(a['class_names'])} and "
                               f"{_short(b['class_names'])}); compare runs on the same dataset.")
        prints_a, prints_b = a["split"]["fingerprints"], b["split"]["fingerprints"]
        for name in ("test", "train", "validation"):
            if name in prints_a and name in prints_b and prints_a[name] != prints_b[name]:
                raise DatasetError(f"{pair} used different {name} splits of {a['dataset']!r} "
                                   f"(fingerprints {prints_a[name]} and {prints_b[name]}); "
                                   "compare runs on the same split.")


def _short(names, shown=4):
    names = [str(n) for n in names]
    return ", ".join(names[:shown]) + (f", ... ({len(names)})" if len(names) > shown else "")


def compare_runs(folders, output):
    """Writes `output`/comparison.md and comparison.png for run or evaluation `folders`.

    comparison.md: one column per run (model, weights, recipe, parameters, GFLOPs per
    image, training time, images/s, test accuracy, macro precision/recall/F1), then the
    per-class precision/recall/F1 table side by side (a row per class, three columns per
    run). comparison.png: the learning curves of every run with a log.csv, overlaid.
    Returns the paths written.
    """
    if isinstance(folders, (str, os.PathLike)) or not folders:
        raise ArgumentError(f"folders must be a list of run folders, got {folders!r}.")
    runs = [read_run(folder) for folder in folders]
    check_comparable(runs)
    labels = _labels(folders)
    for run, label in zip(runs, labels):
        run["label"] = label
        run["gflops"] = _gflops(run)
    from keras_vit.atomic import atomic_open

    os.makedirs(output, exist_ok=True)
    markdown = os.path.join(output, "comparison.md")
    with atomic_open(markdown, "w", encoding="utf-8") as f:
        f.write(comparison_markdown(runs))
    figure = os.path.join(output, "comparison.png")
    plot_curves(runs, figure)
    return [markdown, figure]


def _labels(folders):
    """Each folder's name, with as many parent folders as it takes to tell them apart."""
    parts = [os.path.abspath(folder).rstrip(os.sep).split(os.sep) for folder in folders]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{i + 1}: {label}" for i, label in enumerate(labels)]


def _gflops(run):
    report = run["report"]
    if report.get("gflops_per_image") is not None:
        return float(report["gflops_per_image"])
    path = os.path.join(run["folder"], "model.keras")
    if not os.path.isfile(path):
        return None
    from keras_vit.analysis.flops import forward_flops
    from keras_vit.models.factory import load_keras

    try:
        model = load_keras(path, compile=False)  # no optimizer needed
    except ArgumentError as error:  # a path that stopped being a file
        raise DatasetError(str(error)) from error
    flops = forward_flops(model)
    return None if flops is None else flops / 1e9


def _images_per_second(report):
    if report.get("images_per_second") is not None:
        return float(report["images_per_second"])
    seconds = report.get("train_seconds")
    try:
        images = (report["steps_per_epoch"] * report["recipe"]["batch_size"]
                  * report["epochs_logged"])
    except (KeyError, TypeError):
        return None
    return images / seconds if seconds else None


def _number(value, spec):
    # read_report refuses non-finite numbers; this is for those computed here (images/s).
    if value is None or not math.isfinite(value):
        return MISSING
    return format(value, spec)


# Markdown's inline punctuation (emphasis, code, links, tables, strikethrough, escapes); an
# underscore inside a word ("ViT-demo_4") opens no emphasis and stays as it is.
_MARKDOWN = re.compile(r"([\\`*\[\]|~!]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")


def _cell(value):
    r"""`value` as the text of one Markdown table cell: on one line, its Markdown punctuation
    backslash-escaped (`\|` is GFM's escaped pipe) and HTML's `<`, `>`, `&` as entities."""
    text = " ".join(str(value).splitlines())
    return html.escape(_MARKDOWN.sub(r"\\\1", text), quote=False)


def _code(value):
    """`value` as a Markdown code span (shown verbatim, HTML included): on one line, fenced by
    more backticks than it holds in a row."""
    text = " ".join(str(value).splitlines())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def comparison_markdown(runs):
    """The comparison as Markdown: the summary table, then the per-class table."""
    first = runs[0]["report"]
    split = first["split"]
    support = sum(int(v.get("support", 0)) for v in first["per_class"].values())
    lines = [
        "# Comparison", "",
        f"Dataset {_code(first['dataset'])}, {len(first['class_names'])} classes. Every number "
        f"is measured on the test split ({support} images, fingerprint "
        f"{_code(split['fingerprints']['test'])}"
        + (f"; validation split: {split['validation_fraction']:.0%} of the training examples, "
           f"seed {split['validation_seed']}, fingerprint "
           f"{_code(split['fingerprints']['validation'])}"
           if "validation" in split.get("fingerprints", {}) else "") + "), the same for every run.",
        "",
        "| | " + " | ".join(_cell(run["label"]) for run in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    rows = [
        ("model", lambda r, run: _cell(r.get("model") or MISSING)),
        # A run records its starting weights (None: from scratch); an evaluation folder none.
        ("weights", lambda r, run: MISSING if "weights" not in r else _cell(r["weights"] or "none")),
        ("recipe", lambda r, run: _cell((r.get("recipe") or {}).get("name") or MISSING)),
        # A distilled run's teacher and how it taught; "none" for a run trained without one.
        ("teacher", lambda r, run: MISSING if "teacher" not in r else _cell(_teacher(r["teacher"]))),
        ("parameters", lambda r, run: _number(r.get("parameters"), ",")),
        ("GFLOPs per image", lambda r, run: _number(run["gflops"], ".4g")),
        ("training time (s)", lambda r, run: _number(r.get("train_seconds"), ".1f")),
        ("training images/s", lambda r, run: _number(_images_per_second(r), ".1f")),
        ("test accuracy", lambda r, run: _number(r["accuracy"], ".4f")),
        ("macro precision", lambda r, run: _number(r["macro_avg"]["precision"], ".4f")),
        ("macro recall", lambda r, run: _number(r["macro_avg"]["recall"], ".4f")),
        ("macro F1", lambda r, run: _number(r["macro_avg"]["f1"], ".4f")),
    ]
    for name, cell in rows:
        lines.append(f"| {name} | " + " | ".join(cell(run["report"], run) for run in runs) + " |")
    lines += ["", "## Per class (test split)", "",
              "| class | support | " + " | ".join(f"{_cell(run['label'])} {metric}" for run in runs
                                                 for metric in ("precision", "recall", "F1"))
              + " |",
              "|---|---:|" + "---:|" * (3 * len(runs))]
    for name in first["class_names"]:
        cells = []
        for run in runs:
            scores = run["report"]["per_class"].get(str(name), {})
            cells += [_number(scores.get(metric), ".3f") for metric in ("precision", "recall", "f1")]
        support = first["per_class"].get(str(name), {}).get("support")
        lines.append(f"| {_cell(name)} | {_number(support, 'd')} | " + " | ".join(cells) + " |")
    lines += ["", "GFLOPs per image: the forward pass's matrix multiplies and convolutions, "
              "2 per multiply-add (keras_vit.analysis.forward_flops). Training images/s: "
              "images through training steps per second of logged epoch time.", ""]
    return "\n".join(lines)


def _teacher(teacher):
    if not teacher:
        return "none"
    how = teacher["distillation"] + (f" T={teacher['temperature']:g}"
                                     if teacher.get("temperature") else "")
    return f"{teacher['model']} ({how}, alpha {teacher['alpha']:g})"


def _plain(text):
    """`text` drawn as itself: matplotlib reads `$...$` as math, and bad math fails the figure."""
    return text.replace("$", r"\$")


def plot_curves(runs, path):
    """Accuracy and loss per epoch of every run with a log, overlaid: validation solid,
    training dashed, one colour per run."""
    from matplotlib.figure import Figure

    from keras_vit.atomic import atomic_path

    figure = Figure(figsize=(11, 4))
    axes = figure.subplots(ncols=2)
    for index, run in enumerate(runs):
        for ax, metric in zip(axes, ("accuracy", "loss")):
            for key, style, kind in ((f"val_{metric}", "-", "validation"),
                                     (metric, "--", "train")):
                # read_log checked these are numbers; an infinite one is left out, a NaN a gap.
                points = [(int(row["epoch"]) + 1, float(row[key])) for row in run["log"]
                          if row.get(key) and not math.isinf(float(row[key]))]
                if points:
                    ax.plot(*zip(*points), style, color=f"C{index}", marker="o",
                            markersize=3, label=_plain(f"{run['label']} ({kind})"))
    for ax, metric in zip(axes, ("accuracy", "loss")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no log.csv in these folders", ha="center", transform=ax.transAxes)
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=100)
