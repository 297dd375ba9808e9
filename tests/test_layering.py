"""Layers point down: analysis/, inference.py and evaluation.py stand below training (they read
report.json through keras_vit.reports and load models through keras_vit.models.factory), and
execution.py below the checkpoints package (its cache folder comes from _support/paths.py).
Checked on the source, so an import inside a function counts too."""

import ast
import pathlib

import keras_vit

PACKAGE = pathlib.Path(keras_vit.__file__).parent
BELOW_TRAINING = [*sorted((PACKAGE / "analysis").rglob("*.py")), PACKAGE / "inference.py",
                  PACKAGE / "evaluation.py"]


def imported_modules(source):
    """Every module a Python source imports, at any depth (`from a import b` gives a and a.b)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _from(package, source):
    return sorted(m for m in imported_modules(source) if m == package or m.startswith(package + "."))


def _from_training(source):
    return _from("keras_vit.training", source)


def test_analysis_inference_and_evaluation_import_nothing_from_training():
    reaching_up = {path.relative_to(PACKAGE).as_posix(): _from_training(path.read_text("utf-8"))
                   for path in BELOW_TRAINING}
    assert {path: modules for path, modules in reaching_up.items() if modules} == {}


def test_the_import_scan_sees_an_import_inside_a_function():
    """The check above can fail: each spelling of an import from training is found."""
    source = ("import os\n"
              "from keras_vit import training\n"
              "def f():\n"
              "    from keras_vit.training.report import read_log\n"
              "    import keras_vit.training.optimizers\n")
    assert _from_training(source) == ["keras_vit.training", "keras_vit.training.optimizers",
                                      "keras_vit.training.report",
                                      "keras_vit.training.report.read_log"]


def test_execution_imports_nothing_from_the_checkpoints_package():
    assert _from("keras_vit.checkpoints", (PACKAGE / "execution.py").read_text("utf-8")) == []
    assert _from("keras_vit.checkpoints", "from keras_vit.checkpoints.cache import x") != []
