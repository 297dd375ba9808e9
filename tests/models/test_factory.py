"""keras_vit.models.factory: the one way from a name or a file to a model, and the one
`.keras` loader."""

import ast
import pathlib
import zipfile

import numpy as np
import pytest

import keras_vit
from keras_vit.models import factory

PACKAGE = pathlib.Path(keras_vit.__file__).parent


@pytest.mark.parametrize("name,kind", [("demo", "ViT"), ("Ti/16", "ViT"), ("R+Ti/16", "ViT"),
                                       ("BiT-R50x1", "BiT")])
def test_build_takes_every_kind_of_architecture_name(name, kind, monkeypatch):
    """ViT variants, hybrids, "demo" and BiT sizes reach their constructor, with the keywords."""
    from keras_vit.models import bit, vit

    calls = []
    monkeypatch.setattr(vit, "ViT", lambda variant, **kw: calls.append(("ViT", variant.name, kw)))
    monkeypatch.setattr(bit, "BiT", lambda variant, **kw: calls.append(("BiT", variant.name, kw)))
    factory.build(name, image_size=64)
    assert calls == [(kind, keras_vit.variants.get_architecture(name).name, {"image_size": 64})]


def test_load_turns_a_name_a_model_and_a_keras_file_into_the_same_model(tmp_path):
    model = factory.load("demo", image_size=32, classes=3)
    assert model.output_shape == (None, 3)
    assert factory.load(model) is model
    model.save(tmp_path / "demo.keras")
    loaded = factory.load(str(tmp_path / "demo.keras"))
    pixels = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(loaded(pixels), model(pixels))
    with pytest.raises(keras_vit.ArgumentError, match="is a saved model; image_size cannot"):
        factory.load(str(tmp_path / "demo.keras"), image_size=64)


def test_a_missing_or_foreign_keras_file_is_one_family_error(tmp_path):
    with pytest.raises(keras_vit.ArgumentError, match="No .keras file at"):
        factory.load(str(tmp_path / "missing.keras"))
    (tmp_path / "text.keras").write_text("not a zip")
    with pytest.raises(keras_vit.CheckpointError, match=r"not a \.keras file \(a zip\)"):
        factory.load_keras(tmp_path / "text.keras")
    with zipfile.ZipFile(tmp_path / "empty.keras", "w") as archive:
        archive.writestr("nothing.txt", "no config.json")
    with pytest.raises(keras_vit.CheckpointError, match="is not a .keras model keras_vit can load"):
        factory.load_keras(tmp_path / "empty.keras")


def test_load_refuses_what_is_no_model():
    with pytest.raises(keras_vit.ArgumentError, match="got int"):
        factory.load(3)


def _load_model_calls(root):
    """{(file, line)} of every call of `keras.saving.load_model` (or `saving.load_model`,
    `load_model` imported from keras.saving) under `root`."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.asname or alias.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom)
                    and (node.module == "keras" or (node.module or "").startswith("keras."))
                    for alias in node.names if alias.name == "load_model"}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            if (isinstance(function, ast.Attribute) and function.attr == "load_model"
                    and isinstance(function.value, ast.Attribute) and function.value.attr == "saving") \
                    or (isinstance(function, ast.Name) and function.id in imported):
                found.add((path.relative_to(root).as_posix(), node.lineno))
    return found


def test_one_keras_loader_in_the_package():
    """Every `.keras` file keras_vit reads goes through factory.load_keras: one set of errors."""
    sites = _load_model_calls(PACKAGE)
    assert {file for file, _ in sites} == {"models/factory.py"}, sorted(sites)
    assert len(sites) == 1, sorted(sites)


def test_the_loader_scan_sees_a_second_loader(tmp_path):
    """The scan above can fail: a module calling keras.saving.load_model is listed."""
    (tmp_path / "other.py").write_text("import keras\n\ndef read(p):\n"
                                       "    return keras.saving.load_model(p)\n")
    (tmp_path / "aliased.py").write_text("from keras.saving import load_model as lm\n"
                                         "model = lm('x.keras')\n")
    assert _load_model_calls(tmp_path) == {("other.py", 4), ("aliased.py", 2)}


def test_the_command_and_the_library_load_through_the_factory(tmp_path, monkeypatch):
    """The command's load_model, predict_images' runner, a distillation teacher and a run
    started from an earlier run all turn their model argument into a model by factory.load,
    which reads a .keras file by factory.load_keras."""
    from keras_vit.cli import common
    from keras_vit.runtime import runners
    from keras_vit.training import distillation, transfer

    model = factory.build("demo", image_size=32, classes=2)
    model.save(tmp_path / "m.keras")
    run = tmp_path / "run"
    run.mkdir()
    model.save(run / "model.keras")
    (run / "run.json").write_text("{}")
    loads, reads = [], []
    load, load_keras = factory.load, factory.load_keras
    monkeypatch.setattr(factory, "load", lambda spec, **kw: loads.append(str(spec))
                        or load(spec, **kw))
    monkeypatch.setattr(factory, "load_keras", lambda path, **kw: reads.append(str(path))
                        or load_keras(path, **kw))

    def args(model, **given):
        return type("Args", (), {"model": model, "weights": None, "image_size": None,
                                 "classes": None, **given})()

    keras_file, folder = str(tmp_path / "m.keras"), str(run)
    common.load_model(args(keras_file))
    assert common.load_model(args("demo", image_size=32, classes=3)).output_shape == (None, 3)
    runners.model_runner(keras_file, 1, 10 ** 6)
    distillation.load_teacher(keras_file)
    assert transfer.source_architecture(folder) == keras_vit.variants.get_architecture("demo").name
    assert loads == [keras_file, "demo", keras_file, keras_file, str(run / "model.keras")]
    assert reads == [keras_file] * 3 + [str(run / "model.keras")]


def test_a_run_folder_loads_its_model_and_an_unfinished_one_is_refused(tmp_path):
    model = factory.build("demo", image_size=32, classes=2)
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(keras_vit.CheckpointError, match="run folder without model.keras"):
        factory.load(str(tmp_path))
    model.save(tmp_path / "model.keras")
    pixels = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(factory.load(str(tmp_path))(pixels), model(pixels))
    with pytest.raises(keras_vit.ArgumentError, match="is a saved model; classes cannot"):
        factory.load(str(tmp_path), classes=3)
