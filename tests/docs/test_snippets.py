"""Every code block a user would paste from README.md and docs/*.md runs, in smoke form.

The blocks of one page run in order in one namespace, in a fresh folder, as a
user following the page would. Smoke form: `keras_vit.ViT` (and with it every
named constructor and the CLI) builds the same kind of model shrunk to one
narrow block, with random weights but the checkpoint's class count and
resolution, and `keras_vit.ResNetV2` a trunk with one unit per stage, so
nothing is downloaded; the digits demo trains four steps; the connection to any other machine is
refused. Loading real weights is covered by tests/checkpoints/test_loader.py and the
parity tests.

Bash blocks: `keras-vit ...` runs in-process through `keras_vit.cli.main`,
`saved_model_cli` as a subprocess; anything else must be marked. Blocks that
cannot run here are skipped either by a `<!-- no-test: REASON -->` line before
the block (pages written with this test) or by an entry in `SKIPPED` below
(pages whose blocks are illustrative output or need a server); the reasons are
part of this file and checked to match a block.
"""

import contextlib
import dataclasses
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import cli
from tests import snippets
from tests.offline import sitecustomize as offline

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "bash"}

# (page, text the block contains) -> why it cannot run in the test suite.
SKIPPED = {
    ("README.md", "pip install -e . && keras-vit train"):
        "installs the package; .ci/run runs it as written, and its keras-vit train command "
        "is the first block of docs/fine-tuning.md, the suite's shared digits run "
        "(tests/conftest.py)",
    ("README.md", 'pip install -e ".[dev,oracle,export]"'):
        "installs packages and runs this test suite; .ci/run runs it as written",
    ("docs/fine-tuning.md", "--dataset tf_flowers --model B/16 --weights imagenet21k --output"):
        "downloads tf_flowers",
    ("docs/fine-tuning.md", "--strategy mirrored"): "downloads tf_flowers; several GPUs",
    ("docs/fine-tuning.md", "export TF_CONFIG"): "needs a cluster of machines",
    ("docs/performance.md", "python -m benchmarks.run --quick"):
        "installs the peers and runs the hour-long benchmark; tests/benchmarks/test_benchmarks.py runs "
        "the --quick mode",
    ("docs/performance.md", "python -m venv --system-site-packages .venv-bench"):
        "creates a virtual environment and installs packages",
    ("docs/vit-vs-resnet.md", "runs/vit-vs-resnet/bit"):
        "tests/docs/test_vit_vs_resnet_page.py runs these commands in smoke size and checks that they make "
        "the page's table",
    ("docs/serving.md", "saved_model_cli show"):
        "tests/export/test_export.py runs saved_model_cli show --all and run on an export",
    ("docs/serving.md", "docker run"): "starts TF Serving in Docker",
    ("docs/serving.md", "curl -s http://localhost:8501/v1/models/vit:predict -d \"{"):
        "a REST request to a running TF Serving (tests/export/test_export.py sends the same body "
        "to the SavedModel in-process)",
    ("docs/serving.md", "request.json"): "a REST request to a running TF Serving",
    ("docs/serving.md", "prediction_service_pb2_grpc"):
        "needs tensorflow-serving-api and a running TF Serving",
    ("docs/serving.md", 'Interpreter(model_path="vit.tflite")'):
        "reads the B/16 file the block above writes from downloaded weights, and cat.jpg "
        "(tutorial 04 runs a TFLite file of its own with LiteRT's interpreter)",
}

# Per page: what a reader already has before the first block (images, files).
SETUP = {
    "README.md": """
x = np.random.uniform(-1, 1, (1, 384, 384, 3)).astype("float32")
""",
    "docs/looking-inside.md": """
images = np.random.uniform(-1, 1, (2, 384, 512, 3)).astype("float32")
raw_images = (images + 1) * 127.5
rng = np.random.default_rng(0)
train_images = rng.uniform(-1, 1, (20, 384, 512, 3)).astype("float32")
train_labels = np.repeat(np.arange(4), 5)
test_images = rng.uniform(-1, 1, (8, 384, 512, 3)).astype("float32")
test_labels = np.repeat(np.arange(4), 2)
write_photo("a.jpg", 0); write_photo("b.jpg", 1)
os.makedirs("photos"); write_photo("photos/one.jpg", 0); write_photo("photos/two.png", 1)
keras_vit.ViT("B/16", classes=10, image_size=224).save("my_finetuned.keras")
""",
    "docs/models-and-weights.md": """
images = np.random.uniform(-1, 1, (1, 224, 224, 3)).astype("float32")
""",
    "docs/serving.md": """
write_photo("cat.jpg", 0); write_photo("dog.png", 1); write_photo("flower.jpg", 1)
keras_vit.ViT("B/16", classes=5, image_size=224).save("flowers.keras")
with open("flowers.txt", "w") as f:
    f.write("daisy\\ndandelion\\nroses\\nsunflowers\\ntulips\\n")
""",
}


def write_photo(path, index):
    """One of scikit-learn's two photos, as an image file (format from the suffix)."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    Image.fromarray(load_sample_images().images[index]).save(path)


def _all_blocks():
    return [block for page in PAGES for block in snippets.read_blocks(page, ROOT)]


def _table_reason(block):
    reasons = [why for (page, text), why in SKIPPED.items()
               if page == block.page and text in block.code]
    return reasons[0] if reasons else None


def _pages_with_code():
    return sorted({b.page for b in _all_blocks() if b.language in RUNNABLE
                   and not b.skip_reason and not _table_reason(b)})


@pytest.fixture
def smoke(monkeypatch, tmp_path):
    """Tiny models instead of downloads, no network, a fresh working folder."""
    import keras_vit.training

    stand_ins = {"ViT": (keras_vit.models.ViT, snippets.make_smoke_vit(keras_vit.models.ViT)),
                 "ResNetV2": (keras_vit.ResNetV2, snippets.make_smoke_resnet(keras_vit.ResNetV2))}
    for name, module in list(sys.modules.items()):
        for attribute, (real, smoke_version) in stand_ins.items():
            if name.startswith("keras_vit") and getattr(module, attribute, None) is real:
                monkeypatch.setattr(module, attribute, smoke_version)
    monkeypatch.setattr(socket.socket, "connect", offline.connect)
    monkeypatch.setattr(socket.socket, "connect_ex", offline.connect_ex)
    # The digits demo trains four weight updates instead of 80 epochs: the pages' commands
    # are checked to run and write their outputs; what a whole run learns is
    # tests/training/test_run.py's and benchmarks/digits_seeds.py's to measure.
    digits = keras_vit.data.PRESETS["digits"]
    four_steps = {"scratch": {**digits.overrides("scratch"), "epochs": None, "steps": 4}}
    monkeypatch.setitem(keras_vit.data.PRESETS, "digits",
                        dataclasses.replace(digits, recipe_overrides=four_steps))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    keras.backend.clear_session()


def _run_bash(block):
    for command in snippets.shell_commands(block.code):
        if command[0] == "keras-vit":
            status = cli.main(command[1:])
            assert status in (0, None), f"{block.name}: {' '.join(command)} returned {status}"
        elif command[0] == "saved_model_cli":
            result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                    env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            assert result.returncode == 0, f"{block.name}: {result.stderr[-2000:]}"
        else:
            pytest.fail(f"{block.name}: no way to run {command[0]!r} here; run it in "
                        "tests/docs/test_snippets.py or mark the block no-test with a reason")


# Pages whose blocks read the run of a `keras-vit train --dataset digits` block that is no-test
# because it is the suite's shared digits run's command (tests/conftest.py, digits_run): the
# page gets a copy of that run where its blocks look for it, instead of a training of its own.
SHARED_DIGITS_RUN = {"docs/fine-tuning.md": "runs/digits"}

# The Serving page's blocks export and serve three SavedModels (half a minute of CPU); what
# they run, tests/export/test_export.py and tests/data/test_pixel_budget.py run by default. The
# Looking inside page's (a quarter of a minute) are what tests/analysis runs by default.
SLOW_PAGES = {"docs/serving.md", "docs/looking-inside.md"}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PAGES else p
                                  for p in _pages_with_code()])
def test_page_code_blocks_run(page, smoke, request):
    if page in SHARED_DIGITS_RUN:
        shutil.copytree(request.getfixturevalue("digits_run")[0], smoke / SHARED_DIGITS_RUN[page])
    namespace = {"__name__": "__main__", "np": np, "os": os, "keras_vit": keras_vit,
                 "write_photo": write_photo}
    exec(SETUP.get(page, ""), namespace)
    namespace.pop("np"), namespace.pop("os")  # the page imports what it uses
    ran = 0
    for block in snippets.read_blocks(ROOT / page, ROOT):
        if block.language not in RUNNABLE or block.skip_reason or _table_reason(block):
            continue
        if block.language == "python":
            with contextlib.chdir(smoke):
                exec(compile(block.code, block.name, "exec"), namespace)
        else:
            _run_bash(block)
        ran += 1
    assert ran, f"{page} has code blocks but none ran"


def test_skipped_blocks_are_justified():
    """Every skipped block says why; every SKIPPED entry still names exactly one block."""
    blocks = [b for b in _all_blocks() if b.language in RUNNABLE]
    skipped = [(b.name, b.skip_reason or _table_reason(b)) for b in blocks
               if b.skip_reason is not None or _table_reason(b)]
    for name, reason in skipped:
        assert reason and len(reason) > 10, f"{name}: say why it cannot run"
    for (page, text), _ in SKIPPED.items():
        matching = [b for b in blocks if b.page == page and text in b.code]
        assert len(matching) == 1, f"SKIPPED entry ({page}, {text!r}) matches {len(matching)} blocks"
    print(f"\n{len(skipped)} of {len(blocks)} python/bash blocks skipped:")
    for name, reason in skipped:
        print(f"  {name}: {reason}")


def test_unlabelled_fences_are_not_code():
    """A fence without a language is output or a file listing; code must say python or bash."""
    for block in _all_blocks():
        if block.language == "":
            first = block.code.lstrip().split("\n", 1)[0]
            assert not first.startswith(("import ", "from ", "keras-vit ", "pip ")), \
                f"{block.name}: label this block ```python or ```bash"
