"""The reference libraries the README installs without their dependencies are a pair that
belongs together: pip's `--no-deps` checks nothing, and a torchvision built for another
torch fails to import beside it (and transformers with it)."""

import importlib.metadata
import importlib.util
import re

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("torchvision") is None,
    reason="needs torch and torchvision (the oracle extra and the README's test command)")

# torchvision's compatibility table (its README): torch 2.X pairs with torchvision 0.(X + 15).
TORCHVISION_FOR_TORCH = {"2.12": "0.27", "2.13": "0.28", "2.14": "0.29"}


def _minor(version):
    return ".".join(version.split("+")[0].split(".")[:2])


def test_torch_and_torchvision_are_a_matching_pair():
    torch_version = importlib.metadata.version("torch")
    torchvision_version = importlib.metadata.version("torchvision")
    assert _minor(torch_version) in TORCHVISION_FOR_TORCH, f"no torchvision known for torch {torch_version}"
    assert _minor(torchvision_version) == TORCHVISION_FOR_TORCH[_minor(torch_version)], (
        f"torchvision {torchvision_version} is not the release for torch {torch_version}")
    # torchvision's own metadata names the one torch it was built against.
    pins = [re.sub(r"[\s()]", "", r) for r in importlib.metadata.requires("torchvision") or []
            if re.match(r"torch\b", r)]
    assert pins == [f"torch=={torch_version.split('+')[0]}"], (pins, torch_version)


def test_torchvision_imports_beside_torch():
    """Through the oracle's import: the registry's torchvision is a CUDA build, whose C ops
    do not register on a CPU torch (tests/oracle.py); everything the tests use imports."""
    from tests.oracle import import_timm

    if importlib.util.find_spec("timm") is None:
        pytest.skip("needs timm (the README's test command)")
    import_timm()
    import torch
    import torchvision
    import transformers

    assert _minor(torchvision.__version__) == TORCHVISION_FOR_TORCH[_minor(torch.__version__)]
    assert transformers.ViTForImageClassification.__name__ == "ViTForImageClassification"
