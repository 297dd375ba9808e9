"""The one bounded JSON reader (keras_vit/_support/json_files.py): every JSON the package reads
goes through it, and a file nested 100,000 deep or larger than its cap is refused in one line
of the caller's error family at each place that reads one (the execution cache, being a cache,
is measured again instead: tests/runtime/test_execution.py)."""

import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit._support.files import MAX_TEXT_BYTES
from keras_vit._support.json_files import MAX_JSON_DEPTH, json_depth, parse_json
from keras_vit.analysis.compare import compare_runs
from keras_vit.checkpoints.formats import inspect_checkpoint
from keras_vit.checkpoints.formats.keras_hub import keras_hub_config, task_config
from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY
from keras_vit.errors import ArgumentError, DatasetError, KerasViTError

PACKAGE = pathlib.Path(keras_vit.__file__).parent
FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
DEEP = "[" * 100_000 + "]" * 100_000  # Python's parser recurses once per "[": RecursionError
READER = PACKAGE / "_support" / "json_files.py"
# json.load / json.loads, however spaced, and the names imported from json.
_DIRECT_READ = re.compile(r"\bjson\s*\.\s*loads?\s*\(|\bfrom\s+json\s+import\b")


def direct_json_reads(source):
    """The lines of a Python source that parse JSON without the bounded reader."""
    return [line.strip() for line in source.splitlines() if _DIRECT_READ.search(line)]


def test_every_json_read_in_the_package_goes_through_the_bounded_reader():
    found = {path.relative_to(PACKAGE).as_posix(): direct_json_reads(path.read_text("utf-8"))
             for path in PACKAGE.rglob("*.py") if path != READER}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_the_scan_sees_each_spelling_of_a_direct_read():
    """The check above can fail."""
    source = ("a = json.loads(text)\nb = json.load( f)\nc = json . loads(t)\n"
              "from json import loads\nd = json.dumps(x)\ne = parse_json(t, p, E)\n")
    assert direct_json_reads(source) == ["a = json.loads(text)", "b = json.load( f)",
                                         "c = json . loads(t)", "from json import loads"]


def _recursive_depth(value):
    """The reference: the nesting of a parsed value, counted by walking it."""
    if isinstance(value, dict):
        return 1 + max(map(_recursive_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_recursive_depth, value), default=0)
    return 0


@pytest.mark.parametrize("value", [
    1, "[[{", [], {}, [[[]]], {"a": [1, {"b": "]]]}"}]}, [r'\"[', {"[": ["\\", "}"]}],
    {"é[": [["ü"]], "k": '"{'}, [[1], [[2]], [[[3]]]], {"x": {"y": {"z": {}}}},
])
def test_the_depth_scan_agrees_with_walking_the_parsed_value(value):
    text = json.dumps(value, ensure_ascii=False)
    assert json_depth(text) == json_depth(text.encode("utf-8")) == _recursive_depth(value)


def test_the_depth_scan_does_not_recurse_and_parse_json_refuses_past_the_cap():
    assert json_depth(DEEP) == 100_000
    with pytest.raises(ArgumentError) as error:
        parse_json(DEEP, "the text", ArgumentError)
    assert str(error.value) == (f"the text nests too deeply: 100000 levels, where keras_vit "
                                f"reads JSON nested at most {MAX_JSON_DEPTH} deep.")
    at_cap = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert _recursive_depth(parse_json(at_cap, "the text", ArgumentError)) == MAX_JSON_DEPTH


@pytest.mark.parametrize("text, words", [
    ("{not json", "is not valid JSON (Expecting property name"),
    ("1" * 5000, "is not valid JSON (Exceeds the limit"),  # int() refuses, a ValueError
    (b"\xff\xfe{}", "is not UTF-8 text"),
])
def test_text_that_is_not_json_is_one_line_of_the_callers_family(text, words):
    with pytest.raises(DatasetError) as error:
        parse_json(text, "x.json", DatasetError)
    assert words in str(error.value) and "\n" not in str(error.value)


# --- each place that reads JSON, given a 100,000-deep file --------------------------------

def _demo_safetensors(folder):
    folder.mkdir()
    keras_vit.save_safetensors(keras_vit.ViT("demo", image_size=32, classes=3),
                               folder / "model.safetensors")
    return folder


def _timm_config(tmp_path):
    folder = _demo_safetensors(tmp_path / "timm")
    (folder / "config.json").write_text(DEEP)
    return lambda: inspect_checkpoint(str(folder)), folder / "config.json", CheckpointError


def _safetensors_index(tmp_path):
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(DEEP)
    return (lambda: inspect_checkpoint(str(folder)), folder / "model.safetensors.index.json",
            CheckpointError)


def _transformers_config(tmp_path):
    folder = tmp_path / "hybrid"
    shutil.copytree(FIXTURES / "vit_hybrid_tiny", folder)
    (folder / "config.json").write_text(DEEP)
    return lambda: inspect_checkpoint(str(folder)), folder / "config.json", CheckpointError


def _keras_hub_file(name, read=None):
    """A preset folder holding the deep file, read by `read` (default: opened as a checkpoint,
    recognised by its model.weights.h5)."""
    def make(tmp_path):
        folder = tmp_path / "preset"
        folder.mkdir()
        (folder / name).write_text(DEEP)
        for weights in ("model.weights.h5", "task.weights.h5"):
            (folder / weights).write_bytes(b"")
        return lambda: (read or inspect_checkpoint)(str(folder)), folder / name, CheckpointError
    return make


def _npz_metadata(tmp_path):
    """20,000 deep: within the member's size cap (64 KiB), and past the parser's recursion."""
    path = tmp_path / "deep.npz"
    deep = "[" * 20_000 + "]" * 20_000
    np.savez(path, **{METADATA_KEY: np.frombuffer(deep.encode(), np.uint8),
                      "embedding/kernel": np.zeros((4, 4, 3, 8), np.float32)})
    return lambda: inspect_checkpoint(str(path)), path, CheckpointError


def _compare_report(tmp_path):
    folders = [tmp_path / "run_a", tmp_path / "run_b"]
    for folder in folders:
        folder.mkdir()
        (folder / "report.json").write_text(DEEP)
    return (lambda: compare_runs([str(f) for f in folders], str(tmp_path / "out")),
            folders[0] / "report.json", DatasetError)


PLACES = {
    "timm config.json": _timm_config,
    "model.safetensors.index.json": _safetensors_index,
    "transformers config.json": _transformers_config,
    "keras-hub config.json": _keras_hub_file("config.json"),
    "keras-hub config.json, read alone": _keras_hub_file("config.json", keras_hub_config),
    "keras-hub task.json": _keras_hub_file("task.json", task_config),
    "npz metadata": _npz_metadata,
    "compare's report.json": _compare_report,
}


@pytest.mark.parametrize("place", PLACES)
def test_a_100000_deep_file_is_one_line_at_each_place_that_reads_json(tmp_path, place):
    call, path, family = PLACES[place](tmp_path)
    with pytest.raises(family) as error:
        call()
    message = str(error.value)
    assert "\n" not in message and str(path) in message and "nests too deeply" in message


def test_a_100000_deep_tf_config_is_one_line(monkeypatch):
    from keras_vit.training.distribute import _tf_config

    monkeypatch.setenv("TF_CONFIG", DEEP)
    with pytest.raises(ArgumentError, match="^the TF_CONFIG variable nests too deeply"):
        _tf_config()


def test_an_unreadable_run_record_or_pin_file_is_not_a_traceback(tmp_path, monkeypatch):
    """run.json read by a re-run: unreadable means "not a run keras_vit can resume", and the
    command says so; the checksum pins: unreadable means none pinned yet."""
    from keras_vit.checkpoints import cache
    from keras_vit.training.run_folder import RUN_FILE, read_run_file

    (tmp_path / RUN_FILE).write_text(DEEP)
    assert read_run_file(str(tmp_path)) is None
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    os.makedirs(os.path.dirname(cache._pins_path()))
    pathlib.Path(cache._pins_path()).write_text(DEEP)
    assert cache._pins() == {}


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_an_oversized_json_file_is_refused_by_its_size_before_it_is_read_whole(tmp_path, name):
    """A sparse file of 1 TiB: refused having read its cap plus one byte; read whole, it
    could not fit in any machine's memory, so the refusal shows it was not."""
    folder = _demo_safetensors(tmp_path / "folder") if name == "config.json" else tmp_path
    path = folder / name
    try:
        with open(path, "wb") as f:
            f.truncate(2 ** 40)
    except OSError as error:  # a file system without files this large
        pytest.skip(f"no 1 TiB sparse file here ({error})")
    with pytest.raises(CheckpointError) as error:
        inspect_checkpoint(str(folder))
    what = "a JSON file" if name == "config.json" else "a safetensors index"
    assert str(error.value) == (f"{path} is larger than {MAX_TEXT_BYTES // 2 ** 20} MB, too "
                                f"large for {what}.")
    assert isinstance(error.value, KerasViTError)


def test_an_oversized_npz_metadata_member_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from keras_vit.checkpoints.formats.npz import NpzFile

    path = tmp_path / "large.npz"
    np.savez(path, **{METADATA_KEY: np.zeros(2 ** 20, np.uint8)})
    monkeypatch.setattr(NpzFile, "read", lambda *args: pytest.fail("the member was read"))
    with pytest.raises(CheckpointError, match="member holds 1048576 values"):
        inspect_checkpoint(str(path))
