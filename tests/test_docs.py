"""The documentation says what the code does."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_models_page_is_generated_from_the_tables():
    render = _load_script("make_models_page").render
    page = (ROOT / "docs" / "models-and-weights.md").read_text()
    assert page == render(), "run: python tools/make_models_page.py"
