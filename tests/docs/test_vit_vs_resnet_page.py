"""The "ViT against ResNet" page: its digits commands make the table it shows.

The page's digits block runs here as a user would paste it (`keras-vit ...` in-process),
in smoke size: one epoch instead of 80, and BiT-R50x1 with one unit per stage instead of
(3, 4, 6, 3), so the run takes seconds. The accuracies then differ from the page's; what
must not differ is the table itself: the same rows, the same runs as columns, the same
per-class rows. The page's numbers are the full-size commands' output, pasted with the
machine and date they were measured on.
"""

import dataclasses
import pathlib

import keras
import pytest

import keras_vit
from keras_vit import cli
from tests import snippets

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "vit-vs-resnet.md"
DIGITS_BLOCK = "runs/vit-vs-resnet/bit"  # text only the page's digits block holds


def _digits_commands():
    blocks = [b for b in snippets.read_blocks(PAGE, ROOT)
              if b.language == "bash" and DIGITS_BLOCK in b.code]
    assert len(blocks) == 1, f"{PAGE.name} must hold one digits block, found {len(blocks)}"
    commands = snippets.shell_commands(blocks[0].code)
    assert [c[:2] for c in commands] == [["keras-vit", "train"], ["keras-vit", "train"],
                                         ["keras-vit", "evaluate"], ["keras-vit", "compare"]]
    return commands


def markdown_tables(text):
    """Every Markdown table of `text`: a list of rows, each a list of cell strings, the
    separator row (|---|) left out."""
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set("-:") for cell in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _shape(table):
    """What the numbers must not change: the header row and the first column."""
    return table[0], [row[0] for row in table[1:]], {len(row) for row in table}


@pytest.fixture
def smoke_size(monkeypatch, tmp_path):
    digits = keras_vit.data.PRESETS["digits"]
    one_epoch = {"scratch": {**digits.overrides("scratch"), "epochs": 1}}
    monkeypatch.setitem(keras_vit.data.PRESETS, "digits",
                        dataclasses.replace(digits, recipe_overrides=one_epoch))
    monkeypatch.setitem(keras_vit.variants.BIT_UNITS, 50, (1, 1, 1, 1))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    keras.backend.clear_session()


def test_the_pages_digits_commands_are_valid_commands():
    """What the default suite checks of the page: each command parses as `keras-vit` would
    (its sub-command, flags and values), so a renamed flag fails here without a run."""
    parser = cli.build_parser()
    for command in _digits_commands():
        args = parser.parse_args(command[1:])
        assert args.command == command[1]


# Slow (-m slow): the four commands train two models and took 44 to 58 s of a default suite
# that had reached ten minutes on two cores. The test above keeps the commands valid; the
# compare command itself runs in the default suite (tests/analysis/test_compare.py).
@pytest.mark.slow
def test_the_pages_digits_commands_make_the_pages_table(smoke_size):
    commands = _digits_commands()
    for command in commands:
        status = cli.main(command[1:])
        assert status in (0, None), f"{' '.join(command)} returned {status}"
    output = smoke_size / commands[-1][commands[-1].index("--output") + 1]
    made = markdown_tables((output / "comparison.md").read_text())
    shown = markdown_tables(PAGE.read_text())
    assert len(made) == 2 and len(shown) == 2, (len(made), len(shown))
    for made_table, shown_table in zip(made, shown):
        assert _shape(made_table) == _shape(shown_table)
    summary = {row[0]: row[1:] for row in made[0][1:]}
    assert summary["model"] == ["ViT-demo_4", "BiT-R50x1", "ViT-demo_4"]
    assert all(0.0 <= float(value) <= 1.0 for value in summary["test accuracy"])
    assert (output / "comparison.png").stat().st_size > 0
