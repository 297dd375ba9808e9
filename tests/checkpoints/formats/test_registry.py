"""The format registry: a new format is one file and one registry line; a load detects the
format once and opens each file once; a file replaced during loads never gives a mix."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import formats
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.layout import official_arrays
from keras_vit.variants import Variant
from tests.conftest import ROOT

TINY = Variant("ViT-registry", width=32, depth=2, mlp_dim=64, heads=2, patch_size=4)

# A whole format in one file: JSON holding official-key arrays as nested lists.
DUMMY_FORMAT = '''
"""A test format: {"vit_json": {official key: nested lists}} in a .vitjson file."""
import json

from keras_vit.checkpoints.formats.base import ArraysReader, CheckpointFormat


def _recognises(source):
    return source.path.endswith(".vitjson")


def _open(source):
    with open(source.path) as f:
        arrays = json.load(f)["vit_json"]
    return ArraysReader(arrays, path=source.path, source=source, format=FORMAT)


FORMAT = CheckpointFormat(name="vitjson", description="a .vitjson test file",
                          recognises=_recognises, open=_open, numerics=(True, 1e-6))
'''


def tiny_model(seed, include_top=True):
    model = keras_vit.ViT(TINY, image_size=16, **({"classes": 3} if include_top else
                                                   {"include_top": False}))
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.standard_normal(weight.shape).astype("float32"))
    return model


def test_a_new_format_is_one_file_and_one_registry_line(tmp_path, monkeypatch):
    (tmp_path / "vitjson_format.py").write_text(DUMMY_FORMAT)
    monkeypatch.syspath_prepend(str(tmp_path))
    import vitjson_format

    source = tiny_model(1)
    arrays = official_arrays(source)
    path = tmp_path / "model.vitjson"
    path.write_text('{"vit_json": {' + ", ".join(
        f'"{k}": {np.asarray(v).tolist()}' for k, v in arrays.items()) + "}}")
    with pytest.raises(CheckpointError):  # unknown until registered
        formats.inspect_checkpoint(str(path))
    monkeypatch.setattr(formats, "FORMATS", [vitjson_format.FORMAT, *formats.FORMATS])  # the line
    assert formats.inspect_checkpoint(str(path)).format == "vitjson"
    loaded = keras_vit.ViT(TINY, weights=str(path), image_size=16)
    assert loaded.get_layer("head").kernel.shape == (32, 3)  # classes read from the file
    for ours, theirs in zip(loaded.weights, source.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # The Architecture page's table lists every registered format, as its module describes it.
    with open(os.path.join(ROOT, "docs", "architecture.md")) as page:
        text = page.read()
    for registered in formats.FORMATS:
        if registered is not vitjson_format.FORMAT:
            assert f"| `{registered.name}` | {registered.description} |" in text, registered.name


def _sources(tmp_path):
    """One checkpoint per format keras_vit writes or tests write with the library: {name: path}."""
    model = tiny_model(2)
    npz = keras_vit.save_npz(model, str(tmp_path / "model.npz"))
    timm_file = keras_vit.save_safetensors(model, str(tmp_path / "model.safetensors"))
    folder = tmp_path / "timm_folder"
    folder.mkdir()
    keras_vit.save_safetensors(model, str(folder / "model.safetensors"))
    return {"npz": npz, "timm file": timm_file, "timm folder": str(folder)}


def test_a_load_detects_once_and_opens_each_file_once(tmp_path, monkeypatch):
    sources = _sources(tmp_path)
    detections, opened = [], []
    detect = formats.detect

    def counting_detect(source):
        detections.append(source.path)
        return detect(source)

    monkeypatch.setattr(formats, "detect", counting_detect)
    # The interpreter's own record of every open() (PEP 578): independent of the code under test.
    watching = [str(tmp_path)]

    def hook(event, args):
        if (watching and event == "open" and isinstance(args[0], str)
                and args[0].startswith(watching[0])):
            opened.append(args[0])

    sys.addaudithook(hook)  # cannot be removed: it stops recording when the test ends
    for name, path in sources.items():
        detections.clear()
        opened.clear()
        keras_vit.ViT(TINY, weights=path, image_size=16)
        assert detections == [path], name
        assert sorted(opened) == sorted(set(opened)) and opened, (name, opened)
    watching.clear()


def test_a_file_replaced_during_200_loads_gives_one_file_or_an_error(tmp_path):
    """A writer process swaps the file between a model with a head and one without (each swap
    an atomic rename); every load must give one file's weights whole. 200 loads, not 500:
    200 still saw each file about 100 times (106 and 94 in one run). The writer rests a
    millisecond after each swap instead of spinning a core for as long as the loads take: it
    still swaps some 300 times a second (330 measured on the 2-core machine under load), so
    a load of 25 ms or more meets several swaps."""
    with_head, headless = tiny_model(3), tiny_model(4, include_top=False)
    files = [keras_vit.save_npz(with_head, str(tmp_path / "a.npz")),
             keras_vit.save_npz(headless, str(tmp_path / "b.npz"))]
    path = str(tmp_path / "model.npz")
    writer_code = textwrap.dedent("""
        import os, sys, time
        blobs = [open(p, "rb").read() for p in sys.argv[2:]]
        target, i = sys.argv[1], 0
        while True:
            temporary = f"{target}.{i}"
            with open(temporary, "wb") as f:
                f.write(blobs[i % 2])
            os.replace(temporary, target)
            i += 1
            time.sleep(0.001)
        """)
    with open(path, "wb") as f:
        f.write(open(files[0], "rb").read())
    expected_a = [w.numpy() for w in with_head.weights]
    trunk_b = {w.path: w.numpy() for w in headless.weights}
    writer = subprocess.Popen([sys.executable, "-c", writer_code, path, *files])
    model = keras_vit.ViT(TINY, image_size=16, classes=3)
    outcomes = {"a": 0, "b": 0, "refused": 0}
    try:
        for trial in range(200):
            try:
                keras_vit.load_weights(model, path)
            except CheckpointError:
                outcomes["refused"] += 1
                continue
            got = [w.numpy() for w in model.weights]
            if all(np.array_equal(g, e) for g, e in zip(got, expected_a)):
                outcomes["a"] += 1
                continue
            # b: b's trunk, and the zero head a headless file gives
            trunk_ok = all(np.array_equal(w.numpy(), trunk_b[w.path]) for w in model.weights
                           if w.path in trunk_b)
            head_zero = all(not np.any(w.numpy()) for w in model.get_layer("head").weights)
            assert trunk_ok and head_zero, f"load {trial} mixed the two files"
            outcomes["b"] += 1
    finally:
        writer.kill()
        writer.wait()
    print(f"\n200 loads during replacement: {outcomes}")
    assert outcomes["a"] and outcomes["b"], outcomes  # the race did happen both ways
