"""Publishing: the distribution's name, the one install line, and what the wheel and sdist hold."""

import configparser
import glob
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from tests.conftest import ROOT
from tests.distribution_names import DISTRIBUTION, INSTALL

PACKAGE_DATA = ("keras_vit/checkpoints/catalogue.json", "keras_vit/labels/imagenet1k_labels.tsv",
                "keras_vit/labels/imagenet21k_labels.tsv")


def _extras():
    config = configparser.ConfigParser()
    config.read(f"{ROOT}/setup.cfg")
    return set(config["options.extras_require"])


def _pages():
    """README, every docs page, the source of every notebook's cells, and keras_vit's modules
    (whose error messages give install hints)."""
    pages = {"README.md": open(f"{ROOT}/README.md").read()}
    for path in sorted(glob.glob(f"{ROOT}/keras_vit/**/*.py", recursive=True)):
        if not path.endswith("_distribution.py"):  # the constants themselves, and their comment
            pages[path[len(ROOT) + 1:]] = open(path).read()
    for path in sorted(glob.glob(f"{ROOT}/docs/*.md")):
        pages[path[len(ROOT) + 1:]] = open(path).read()
    for path in sorted(glob.glob(f"{ROOT}/tutorials/*.ipynb")):
        with open(path) as f:
            cells = json.load(f)["cells"]
        pages[path[len(ROOT) + 1:]] = "\n".join("".join(c["source"]) for c in cells)
    return pages


def test_setup_cfg_declares_the_distribution():
    """Its links, if any, lead somewhere: tests/docs/test_links.py."""
    config = configparser.ConfigParser()
    config.read(f"{ROOT}/setup.cfg")
    assert config["metadata"]["name"] == DISTRIBUTION
    assert DISTRIBUTION != "keras-vit"  # that name on PyPI is an unrelated project


def test_every_page_installs_with_the_one_canonical_line():
    requirement = INSTALL.removeprefix("pip install ")
    assert requirement == DISTRIBUTION  # the name the release workflow publishes
    with_extras = {f'"{DISTRIBUTION}[{extra}]"' for extra in _extras()}
    pages = _pages()
    # Every `pip install` of this project by name or URL, whatever its spelling, is the
    # canonical line, or the canonical name with an extra (`pip install -e .` from a clone is
    # the developer's install, not a name). `keras_vit[hub]` would install the other project.
    for name, text in pages.items():
        for found in re.finditer(r"""pip install(?: -q)? ("[^"\n]*"|'[^'\n]*'|[^\s`'"]+)""", text):
            arguments = found.group(1)  # the first argument, quotes and all
            if re.search(r"keras-vit|keras_vit|github\.com/keras-vit", arguments):
                assert arguments == requirement or arguments in with_extras, \
                    f"{name}: {found.group(0)!r} is not {INSTALL!r}"
    for name in ("README.md", "docs/install.md"):
        assert INSTALL in pages[name], name
        assert "`keras-vit` on PyPI is a different" in " ".join(pages[name].split()), name
    notebooks = [name for name in pages if name.endswith(".ipynb")]
    assert len(notebooks) == 9  # every tutorial (tests/docs/test_tutorials.py names them)
    for name in notebooks:
        assert f"!pip install -q {requirement}" in pages[name], name


def test_the_install_page_lists_every_extra():
    table = open(f"{ROOT}/docs/install.md").read().split("## Optional extras", 1)[1]
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE))
    assert listed == _extras()


def test_the_license_is_the_one_the_metadata_names():
    config = configparser.ConfigParser()
    config.read(f"{ROOT}/setup.cfg")
    assert config["metadata"]["license"] == "Apache-2.0"
    assert config["metadata"]["license_files"].split() == ["LICENSE"]
    text = open(f"{ROOT}/LICENSE").read()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """`python -m build` on a clean copy of the source: the sdist, and the wheel built from it."""
    source = tmp_path_factory.mktemp("source")
    shutil.copytree(ROOT, source / "src", ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", ".venv*", "runs", "site", "__pycache__",
        ".pytest_cache", "benchmarks/results"))
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend (setuptools) comes from this environment, offline.
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                             str(source / "src")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheels, sdists = glob.glob(f"{out}/*.whl"), glob.glob(f"{out}/*.tar.gz")
    assert len(wheels) == 1 and len(sdists) == 1, sorted(glob.glob(f"{out}/*"))
    return wheels[0], sdists[0]


def test_wheel_and_sdist_hold_the_package_data(artifacts):
    wheel, sdist = artifacts
    assert wheel.rsplit("/", 1)[-1].startswith(DISTRIBUTION.replace("-", "_") + "-")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for path in PACKAGE_DATA:
            assert path in names, path
        checkpoints = json.loads(z.read("keras_vit/checkpoints/catalogue.json"))["checkpoints"]
        assert len(checkpoints) > 10
        assert len(z.read("keras_vit/labels/imagenet1k_labels.tsv").decode().splitlines()) == 1000
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "keras-vit = keras_vit.cli" in z.read(entry_points).decode()
        assert not any(n.startswith("tests/") for n in names)
        licenses = [n for n in names if n.endswith("LICENSE") and ".dist-info/" in n]
        assert len(licenses) == 1 and z.read(licenses[0]) == open(f"{ROOT}/LICENSE", "rb").read()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        assert "License-File: LICENSE" in metadata or "License: Apache-2.0" in metadata
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    for path in (*PACKAGE_DATA, "LICENSE"):
        assert path in members, path


def test_twine_check_passes(artifacts):
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *artifacts],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout
