"""The documentation site builds offline with no warning, and its API reference is complete."""

import html as html_module
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest

import keras_vit
from keras_vit import analysis

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLIC = [(keras_vit, name) for name in keras_vit.__all__] + \
         [(analysis, name) for name in analysis.__all__]


# Building the site takes ~20 CPU-s (mkdocstrings imports keras_vit and TensorFlow), so the
# tests that read it are slow. The default run checks what it can without building: every
# public name on the API page with a docstring (below), every page in the nav (below), and
# every link of the pages and notebooks (tests/docs/test_links.py).
@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(out)], cwd=out, env=env, capture_output=True, text=True, timeout=300)
    warnings = [line for line in result.stderr.splitlines() if line.startswith(("WARNING -", "ERROR -"))]
    assert result.returncode == 0 and not warnings, "\n".join(warnings) or result.stderr[-3000:]
    return out


def test_every_public_name_is_in_the_api_page():
    page = (ROOT / "docs" / "api.md").read_text()
    entries = set(re.findall(r"^::: (\S+)$", page, flags=re.M))
    missing = [f"{module.__name__}.{name}" for module, name in PUBLIC
               if f"{module.__name__}.{name}" not in entries]
    assert not missing, f"add to docs/api.md: {missing}"


@pytest.mark.parametrize("module, name", PUBLIC, ids=[f"{m.__name__}.{n}" for m, n in PUBLIC])
def test_public_classes_and_functions_have_docstrings(module, name):
    obj = getattr(module, name)
    if inspect.isclass(obj) or callable(obj):
        assert inspect.getdoc(obj) and len(inspect.getdoc(obj)) > 20, f"{name} needs a docstring"


@pytest.mark.slow
def test_api_reference_renders_every_name_with_its_docstring(site):
    html = (site / "api" / "index.html").read_text()
    text = re.sub(r"\s+", " ", html_module.unescape(re.sub(r"<[^>]+>", " ", html)))
    for module, name in PUBLIC:
        obj = getattr(module, name)
        assert f'id="{module.__name__}.{name}"' in html, f"{name} is not rendered"
        if inspect.isclass(obj) or callable(obj):
            first_words = " ".join(inspect.getdoc(obj).split()[:4]).split("`")[0]
            assert first_words in text, f"{name}: its docstring is not on the API page"


@pytest.mark.slow
def test_tutorials_are_rendered_with_their_colab_links(site):
    for notebook in sorted((ROOT / "tutorials").glob("*.ipynb")):
        page = site / "tutorials" / notebook.stem / "index.html"
        assert page.is_file(), f"{notebook.name} is not rendered"
        assert 'href="https://colab.research.google.com/"' in page.read_text(), notebook.name


def test_every_page_of_the_docs_folder_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [p.name for p in (ROOT / "docs").glob("*.md")]
    assert [p for p in pages if p not in nav] == []


@pytest.mark.slow
def test_long_code_lines_wrap_on_every_page(site):
    """Code blocks wrap (docs/stylesheets/extra.css) instead of being cut at the right edge."""
    css = (site / "stylesheets" / "extra.css").read_text()
    assert re.search(r"\.md-typeset pre > code \{[^}]*white-space: pre-wrap", css), css
    for page in ("index.html", "quickstart/index.html", "fine-tuning/index.html"):
        assert "stylesheets/extra.css" in (site / page).read_text(), page
