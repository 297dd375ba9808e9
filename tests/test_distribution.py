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

from keras_vit._distribution import DISTRIBUTION, INSTALL, REPOSITORY
from tests.conftest import ROOT

PACKAGE_DATA = ("keras_vit/checkpoints/catalogue.json", "keras_vit/labels/imagenet1k_labels.tsv",
                "keras_vit/labels/imagenet21k_labels.tsv")


def _pages():
    """README, every docs page, and the source of every notebook's cells."""
    pages = {"README.md": open(f"{ROOT}/README.md").read()}
    for path in sorted(glob.glob(f"{ROOT}/docs/*.md")):
        pages[path[len(ROOT) + 1:]] = open(path).read()
    for path in sorted(glob.glob(f"{ROOT}/tutorials/*.ipynb")):
        with open(path) as f:
            cells = json.load(f)["cells"]
        pages[path[len(ROOT) + 1:]] = "\n".join("".join(c["source"]) for c in cells)
    return pages


def test_setup_cfg_declares_the_distribution_and_its_urls():
    config = configparser.ConfigParser()
    config.read(f"{ROOT}/setup.cfg")
    assert config["metadata"]["name"] == DISTRIBUTION
    assert config["metadata"]["url"] == REPOSITORY
    assert REPOSITORY in config["metadata"]["project_urls"]
    assert DISTRIBUTION != "keras-vit"  # that name on PyPI is an unrelated project


def test_every_page_installs_with_the_one_canonical_line():
    requirement = INSTALL.removeprefix("pip install ")
    pages = _pages()
    # Every `pip install` of this project by name or URL, whatever its spelling, is the
    # canonical line (`pip install -e .` from a clone is the developer's install, not a name).
    for name, text in pages.items():
        for found in re.finditer(r"pip install((?: -q)?) ([^\n&|;`]*)", text):
            arguments = found.group(2).strip()
            if re.search(r"keras-vit|keras_vit|github\.com/keras-vit", arguments):
                assert arguments == requirement, f"{name}: {found.group(0)!r} is not {INSTALL!r}"
    for name in ("README.md", "docs/install.md"):
        assert INSTALL in pages[name], name
        assert "`keras-vit` on PyPI is a different" in " ".join(pages[name].split()), name
    notebooks = [name for name in pages if name.endswith(".ipynb")]
    assert len(notebooks) == 6
    for name in notebooks:
        assert f"!pip install -q {requirement}" in pages[name], name


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
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    for path in PACKAGE_DATA:
        assert path in members, path


def test_twine_check_passes(artifacts):
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *artifacts],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout
