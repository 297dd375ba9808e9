"""Every tutorial notebook runs top to bottom in smoke mode, offline.

`KERAS_VIT_SMOKE=1` makes each notebook's `parameters` cell pick a tiny
configuration (small variant, random weights, built-in data). The kernel runs
with `tests/offline` first on its PYTHONPATH, whose sitecustomize refuses any
connection that leaves the machine, and with an empty KERAS_HOME, so a
notebook that tries to download weights or data fails here, as does one that
raises.
"""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

from tests.distribution_names import INSTALL

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The tutorials committed with their outputs (tools/execute_tutorials.py's list).
OFFLINE_TUTORIALS = ("09_transfer_methods.ipynb",)
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
# The project has no public repository yet, so Colab opens a notebook the user uploads.
COLAB = "https://colab.research.google.com/"
TIMEOUT_PER_CELL = 180


def test_there_are_nine_tutorials():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb", "02_flowers_transfer.ipynb", "03_inside_a_vit.ipynb",
        "04_export_and_serve.ipynb", "05_distributed_training.ipynb", "06_hybrids.ipynb",
        "07_vit_vs_resnet.ipynb", "08_features_and_linear_probe.ipynb",
        "09_transfer_methods.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_well_formed(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    cells = notebook.cells
    assert cells[0].cell_type == "markdown" and f"({COLAB})" in cells[0].source \
        and f"`{path.name}`" in cells[0].source, \
        "the first cell must say how to open this notebook in Colab"
    first_code = next(c for c in cells if c.cell_type == "code")
    assert 'if "google.colab" in sys.modules:' in first_code.source
    # The canonical line (tests/distribution_names.py), quiet: `pip install -q ...`.
    assert "!" + INSTALL.replace("pip install ", "pip install -q ", 1) in first_code.source
    parameters = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1, "exactly one cell tagged 'parameters'"
    assert 'SMOKE = os.environ.get("KERAS_VIT_SMOKE") == "1"' in parameters[0].source
    if path.name in OFFLINE_TUTORIALS:  # committed with a real run's outputs (test_tutorial_outputs.py)
        return
    for cell in cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, \
                f"{path.name}: commit notebooks that need downloads with outputs cleared"


# Every notebook run is `slow`: each starts a fresh kernel and TensorFlow (the quick-start
# notebook alone took 2 minutes of a default run on two cores, its longest test). Every one is
# still read by test_notebook_is_well_formed, and what each runs is run by default elsewhere:
# - 01 quick start: a named constructor, preprocess_input, predict, decode_predictions, the
#   pooled and token features, variant_names and the catalogue, as the Quick start page's
#   snippets (test_snippets.py) run them.
# - 02 flowers transfer: `keras_vit.train`, its report and best.keras, as the Fine-tuning page's
#   snippets (test_snippets.py) and tests/training/test_run.py run them.
# - 03 inside a ViT: AttentionProbe, rollout, distances, embeddings and their plots, as the
#   Looking inside page's snippets and tests/analysis run them.
# - 04 export and serve: export_saved_model, its signatures and export_tflite, as the Serving
#   page's snippets and tests/export/test_export.py run them.
# - 05 distributed training: MirroredStrategy (tests/training/test_distributed.py),
#   keras.distribution on JAX (tests/training/test_jax.py), the Distributed page's snippets.
# - 06 hybrids: hybrid backbones, ResNetV2 and the few-shot probe, as tests/models/test_tables.py,
#   the hybrid parity tests and tests/analysis/test_probe.py run them.
# - 07 ViT against ResNet trains a full-size BiT-R50x1 (three 280 MB files); its commands are
#   the ViT against ResNet page's, which tests/docs/test_vit_vs_resnet_page.py runs.
# - 08 features and linear probe: from_pretrained on a timm Hub folder
#   (tests/models/test_pretrained.py), DINOv2 features and the few-shot probe, as
#   tests/cli/test_family_commands.py and tests/analysis run them.
# - 09 transfer methods: train from an earlier run's folder, LoRA and the few-shot probe, as
#   tests/training/test_transfer.py, test_lora_run.py and tests/benchmarks/test_benchmark_transfer.py run
#   them.
# Run them all with `pytest -m slow tests/docs/test_tutorials.py`.
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_smoke_mode(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    python_path = [str(ROOT / "tests" / "offline"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "KERAS_VIT_SMOKE": "1", "KERAS_HOME": str(tmp_path / "keras_home"),
           "PYTHONPATH": os.pathsep.join(p for p in python_path if p), "TF_CPP_MIN_LOG_LEVEL": "3"}
    client = NotebookClient(notebook, timeout=TIMEOUT_PER_CELL, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)  # raises CellExecutionError, naming the cell, if any cell fails
