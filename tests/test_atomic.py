"""One write path: no rename outside keras_vit/atomic.py, concurrent writers never tear a file,
and a writer killed mid-write leaves the old file and a temporary the next write removes."""

import ast
import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import keras_vit
from keras_vit.atomic import TEMP_PREFIX, atomic_path, publish_folder, temporary_folder
from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY
from keras_vit.checkpoints.formats.safetensors import read_safetensors
from keras_vit.checkpoints.formats.timm import official_to_timm
from keras_vit.checkpoints.layout import official_arrays
from keras_vit.variants import Variant
from tests.bare_packages import PRELUDE
from tests.conftest import ROOT

PACKAGE = os.path.join(ROOT, "keras_vit")
# Small, but a few hundred kB, so that two unsynchronised writers would interleave.
TINY = Variant("ViT-test_4", width=64, depth=2, mlp_dim=128, heads=2, patch_size=4)


def tiny_model(seed):
    keras_vit_model = keras_vit.ViT(TINY, image_size=16, classes=3)
    rng = np.random.default_rng(seed)
    for weight in keras_vit_model.weights:  # every array differs between two seeds
        weight.assign(rng.standard_normal(weight.shape).astype("float32"))
    return keras_vit_model


# --- no rename outside atomic.py ------------------------------------------------------------

RENAMES = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move")}


def renames_in(source):
    """The lines of `source` that rename a file or folder: os.replace/rename/renames,
    shutil.move (however imported), Path.rename, and Path.replace (one argument: str.replace
    takes two)."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil")
                for alias in node.names if (node.module, alias.name) in RENAMES}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in imported:
            lines.append(node.lineno)
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if ((owner, func.attr) in RENAMES or func.attr == "rename"
                    or (func.attr == "replace" and len(node.args) == 1 and not node.keywords)):
                lines.append(node.lineno)
    return lines


def test_the_scan_finds_every_kind_of_rename():
    source = ("import os, shutil\nfrom os import replace as swap\nfrom pathlib import Path\n"
              "os.replace(a, b)\nos.rename(a, b)\nshutil.move(a, b)\nswap(a, b)\n"
              "Path(a).rename(b)\nPath(a).replace(b)\n"
              "name.replace('_', '-')\ndataclasses.replace(recipe, epochs=3)\n")
    assert renames_in(source) == [4, 5, 6, 7, 8, 9]


def test_nothing_outside_atomic_py_renames():
    found = []
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != os.path.join(PACKAGE, "atomic.py"):
                with open(path, encoding="utf-8") as f:
                    found += [f"{os.path.relpath(path, ROOT)}:{line}" for line in renames_in(f.read())]
    assert found == [], f"renames outside keras_vit/atomic.py: {found}"


# --- concurrent writers ---------------------------------------------------------------------

def read_npz(path):
    """The weights of a saved npz, without keras_vit's own metadata member."""
    with np.load(path) as file:
        return {key: file[key] for key in file.files if key != METADATA_KEY}


def same_arrays(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def race(save, models, path):
    """Calls `save(model, path)` for each model in its own thread, all at once;
    returns what the calls returned and what they raised."""
    start = threading.Barrier(len(models))
    returned, errors = [], []

    def write(model):
        start.wait()
        try:
            returned.append(save(model, path))
        except BaseException as error:  # noqa: BLE001 (the test reports it)
            errors.append(error)

    threads = [threading.Thread(target=write, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return returned, errors


@pytest.mark.parametrize("save, read, expected", [
    (keras_vit.save_npz, read_npz, official_arrays),
    (keras_vit.save_safetensors, read_safetensors,
     lambda model: official_to_timm(official_arrays(model)))], ids=["npz", "safetensors"])
def test_two_threads_writing_one_path_leave_one_whole_file(tmp_path, save, read, expected):
    models = [tiny_model(1), tiny_model(2)]
    wanted = [expected(m) for m in models]
    suffix = ".npz" if save is keras_vit.save_npz else ".safetensors"
    winners = []
    for trial in range(40):
        path = str(tmp_path / f"trial-{trial}{suffix}")
        returned, errors = race(save, models, path)
        assert errors == [] and returned == [path, path], f"trial {trial}: {errors}"
        written = read(path)
        matches = [i for i, arrays in enumerate(wanted) if same_arrays(written, arrays)]
        assert len(matches) == 1, f"trial {trial}: the file is neither model's whole file"
        winners += matches
    assert sorted(os.listdir(tmp_path)) == sorted(f"trial-{i}{suffix}" for i in range(40))
    print(f"\nlast writer per trial: {winners}")


# --- a writer killed mid-write --------------------------------------------------------------

# Writes argv[2]'s bytes (model seed 2 as save_npz wrote it) to argv[1] through
# keras_vit.atomic, the one write path of save_npz and every other writer, announcing the
# temporary once it is on disk, then held until killed. It imports keras_vit.atomic alone
# (tests/bare_packages.py): no TensorFlow start-up.
KILLED_WRITER = PRELUDE + """
from keras_vit.atomic import atomic_open
from tests.writes import hold_writes_open
target, source = sys.argv[1:]
data = open(source, "rb").read()
hold_writes_open(600, announce=lambda path: print(path, flush=True))
with atomic_open(target, "wb") as file:
    file.write(data)
"""


def temporaries(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith(TEMP_PREFIX))


def test_a_writer_killed_mid_write_leaves_the_old_file_and_the_next_write_cleans_up(tmp_path):
    path = str(tmp_path / "model.npz")
    keras_vit.save_npz(tiny_model(1), path)
    old = open(path, "rb").read()
    new = keras_vit.save_npz(tiny_model(2), str(tmp_path / "new.npz"))  # what the writer writes
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, path, new], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        held = writer.stdout.readline().strip()  # the temporary, whole, not yet renamed
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert open(path, "rb").read() == old
    left = temporaries(tmp_path)
    assert left == [os.path.basename(held)], left
    assert same_arrays(read_npz(held), official_arrays(tiny_model(2)))  # the new file, whole

    # A temporary of the same target whose writer is alive, here a sleeping process.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        host_and_pid = re.compile(rf"^(\.tmp-model\.[0-9a-f]{{8}}-){writer.pid}-")
        assert host_and_pid.match(left[0]), f"{left[0]} does not name its writer {writer.pid}"
        alive_name = host_and_pid.sub(rf"\g<1>{live.pid}-", left[0])
        with open(tmp_path / alive_name, "wb") as f:
            f.write(b"being written")
        keras_vit.save_npz(tiny_model(3), path)
        assert temporaries(tmp_path) == [alive_name]  # the dead writer's is gone, not the live one
        assert same_arrays(read_npz(path), official_arrays(tiny_model(3)))
    finally:
        live.kill()
        live.wait()
    keras_vit.save_npz(tiny_model(3), path)
    assert temporaries(tmp_path) == []  # that writer is dead now too


# --- folders --------------------------------------------------------------------------------

def build(folder, text):
    os.makedirs(folder)
    with open(os.path.join(folder, "content.txt"), "w") as f:
        f.write(text)


def content(folder):
    return sorted(os.listdir(os.path.dirname(folder))), open(os.path.join(folder, "content.txt")).read()


def test_a_folder_is_published_whole_never_merged_and_replaced_in_one_rename(tmp_path, monkeypatch):
    target = str(tmp_path / "1")
    with temporary_folder(target) as tmp:
        build(tmp, "old")
        publish_folder(tmp, target)
    with temporary_folder(target) as tmp:
        build(tmp, "other")
        with pytest.raises(FileExistsError):
            publish_folder(tmp, target)  # another writer's folder: neither replaced nor merged
    assert content(target) == (["1"], "old")  # and the refused temporary is gone

    rename = os.rename
    with temporary_folder(target) as tmp:
        build(tmp, "new")

        def rename_fails(source, destination):
            if source == tmp:  # the new folder's rename, after the old one was set aside
                raise OSError("disk gone")
            rename(source, destination)

        monkeypatch.setattr(os, "rename", rename_fails)
        with pytest.raises(OSError, match="disk gone"):
            publish_folder(tmp, target, replace=True)
        monkeypatch.undo()
    assert content(target) == (["1"], "old")  # the old folder is back in place

    with temporary_folder(target) as tmp:
        build(tmp, "new")
        publish_folder(tmp, target, replace=True)
    assert content(target) == (["1"], "new")  # and the old one, set aside, deleted


def test_a_temporary_keeps_the_targets_extensions_and_names_it(tmp_path):
    with atomic_path(tmp_path / "best.weights.h5") as tmp:
        name = os.path.basename(tmp)
        assert name.startswith(TEMP_PREFIX + "best.") and name.endswith(".weights.h5")
        assert f"-{os.getpid()}-{threading.get_native_id()}-" in name
        open(tmp, "wb").close()
