"""The tutorials that run on the bundled digits alone are committed with the outputs of a real
run (tools/execute_tutorials.py), and those outputs are the committed code's: each code cell
records the SHA-256 of the source that produced them, and a re-run gives the same text, its
numbers aside (training on another machine moves the last digits). The other tutorials start
from downloaded weights and are committed without outputs (test_tutorials.py)."""

import importlib.util
import re
import tempfile

import nbformat
import pytest

from tests.docs.test_tutorials import NOTEBOOKS, OFFLINE_TUTORIALS, ROOT

_spec = importlib.util.spec_from_file_location("execute_tutorials",
                                               ROOT / "tools" / "execute_tutorials.py")
execute_tutorials = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute_tutorials)
OFFLINE = [ROOT / "tutorials" / name for name in execute_tutorials.OFFLINE_TUTORIALS]


def _code_cells(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_the_offline_tutorials_are_tutorials():
    assert OFFLINE and set(OFFLINE) <= set(NOTEBOOKS)
    assert OFFLINE_TUTORIALS == execute_tutorials.OFFLINE_TUTORIALS  # one list, read twice


@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.stem)
def test_each_output_was_made_by_the_committed_source(path):
    cells = _code_cells(path)
    assert any(cell.outputs for cell in cells), f"{path.name} holds no outputs: run " \
        "python tools/execute_tutorials.py"
    for index, cell in enumerate(cells):
        recorded = cell.metadata.get(execute_tutorials.METADATA_KEY, {}).get("source_sha256")
        assert recorded == execute_tutorials.source_hash(cell.source), \
            f"{path.name}, code cell {index}: edited after its outputs were made; run " \
            "python tools/execute_tutorials.py " + path.name
        assert cell.execution_count is not None or "google.colab" in cell.source
        assert not [o for o in cell.outputs if o.output_type == "error"]


def _text(cell):
    """A cell's outputs as text with every number masked, and the spaces that pad a column
    of numbers to its widest one collapsed: what the code prints, not what one run's training
    reached or how many digits its timings took (a loaded machine's 1,234 ms/step pads a
    table's columns otherwise than a quiet one's 987)."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif "text/plain" in output.get("data", {}):
            parts.append(output.data["text/plain"])
        if "image/png" in output.get("data", {}):
            parts.append("<image>")
    return re.sub(r" +", " ", re.sub(r"\d+(?:[.,]\d+)*", "#", "".join(parts)))


def test_text_with_numbers_masked_tells_printed_text_apart():
    one = nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="scratch    accuracy 0.312\n")])
    other = nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="scratch    accuracy 0.874\n")])
    changed = nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="scratch    top-1 0.312\n")])
    padded = nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="scratch     accuracy 10.312\n")])
    assert _text(one) == _text(other) == _text(padded) != _text(changed)


# A real run of each offline tutorial: 09 trains the demo for 300 steps, then three times for
# 50 (minutes on two cores). The default test above covers that no cell changed since its run.
@pytest.mark.slow
@pytest.mark.parametrize("path", OFFLINE, ids=lambda p: p.stem)
def test_a_re_run_prints_what_is_committed(path):
    with tempfile.TemporaryDirectory() as workdir:
        fresh = [c for c in execute_tutorials.execute(path, workdir).cells if c.cell_type == "code"]
    committed = _code_cells(path)
    assert [_text(c) for c in fresh] == [_text(c) for c in committed]
