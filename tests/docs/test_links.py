"""Every link in the README, the docs pages, mkdocs.yml and setup.cfg leads somewhere: a relative
link to a file in the repository, or a link to a site known to exist (issue 31: the site's
"GitHub" button and the package's project URLs named github.com/keras-vit/keras_vit, which is not
a repository)."""

import configparser
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
# The places the pages link to today, each a real site or a real owner's folder on one: the
# official checkpoints' buckets, the Hub, TensorFlow's own repository, the papers. A new one is
# added here after checking that it exists.
KNOWN = (
    "https://storage.googleapis.com/vit_models/",
    "https://storage.googleapis.com/bit_models/",
    "https://huggingface.co/",
    "https://github.com/tensorflow/",
    "https://github.com/google-research/",
    "https://github.com/huggingface/",
    "https://arxiv.org/",
    "https://keras.io/",
    "https://www.tensorflow.org/",
    "https://pypi.org/project/",
    "https://colab.research.google.com/",
)
# Markdown links `[text](target "title")`, images alike, and autolinks `<https://...>`.
MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<(https?://[^>\s]+)>")
URL = re.compile(r"https?://[^\s)\]>\"'`]+")


def _prose(text):
    """The page without its code: fenced blocks and inline code are commands and examples
    (`http://localhost:8501`), not links."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def links(text):
    """The link targets of a Markdown page: its links, images, autolinks and bare URLs in prose."""
    prose = _prose(text)
    found = [a or b for a, b in MARKDOWN_LINK.findall(prose)]
    bare = URL.findall(MARKDOWN_LINK.sub(" ", prose))
    return found + bare


def problem(target, page):
    """Why `target`, linked from `page`, leads nowhere known; None when it is fine."""
    if re.match(r"[a-z][a-z+.-]*:", target, re.I):
        if not target.startswith(("https://", "http://")):
            return None if target.startswith("mailto:") else "an unknown scheme"
        return None if target.startswith(KNOWN) else "not a known site (tests/docs/test_links.py KNOWN)"
    path = target.split("#")[0]
    if not path:
        return None  # a heading on the same page
    return None if (page.parent / path).exists() else "no such file"


def _metadata_urls():
    """Every URL in setup.cfg's metadata and in mkdocs.yml (its comments aside)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    urls = [("setup.cfg", url) for value in config["metadata"].values() for url in URL.findall(value)]
    site = [line.split(" #")[0] for line in (ROOT / "mkdocs.yml").read_text().splitlines()
            if not line.lstrip().startswith("#")]
    return urls + [("mkdocs.yml", url) for line in site for url in URL.findall(line)]


def test_every_link_in_the_pages_leads_somewhere():
    bad = [(str(page.relative_to(ROOT)), target, why) for page in PAGES
           for target in links(page.read_text(encoding="utf-8"))
           if (why := problem(target, page))]
    assert not bad, bad


def _markdown_of(notebook):
    return "\n\n".join("".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]
                       if cell["cell_type"] == "markdown")


def test_every_link_in_the_tutorials_leads_somewhere():
    bad = [(notebook.name, target, why) for notebook in NOTEBOOKS
           for target in links(_markdown_of(notebook)) if (why := problem(target, notebook))]
    assert NOTEBOOKS and not bad, bad


def test_the_metadata_links_only_to_known_sites():
    bad = [(where, url) for where, url in _metadata_urls() if not url.startswith(KNOWN)]
    assert not bad, bad


def test_the_check_tells_a_dead_link_from_a_live_one(tmp_path):
    """It can fail: the address that was not a repository, a missing file and an unknown site
    are found; a relative file, a heading, a known site and code are not."""
    (tmp_path / "there.md").write_text("x")
    page = tmp_path / "page.md"
    text = ("[home](https://github.com/keras-vit/keras_vit) [gone](missing.md) <http://example.com/x>\n"
            "see https://github.com/keras-vit/keras_vit/issues.\n"
            "[ok](there.md#part) [top](#top) [paper](https://arxiv.org/abs/2010.11929)\n"
            "`curl http://localhost:8501` and\n```\ngit clone https://nowhere.example/x\n```\n")
    found = {target: problem(target, page) for target in links(text)}
    assert {t for t, why in found.items() if why} == {
        "https://github.com/keras-vit/keras_vit", "missing.md", "http://example.com/x",
        "https://github.com/keras-vit/keras_vit/issues."}, found
    assert {t for t, why in found.items() if not why} == {
        "there.md#part", "#top", "https://arxiv.org/abs/2010.11929"}, found
