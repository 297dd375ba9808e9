"""Runs the tutorials that need no download, for real, and commits their outputs into them.

    python tools/execute_tutorials.py               # every notebook of OFFLINE_TUTORIALS
    python tools/execute_tutorials.py 09_transfer_methods.ipynb

Each notebook runs top to bottom in a fresh kernel, in a temporary folder, cut off the network
(tests/offline first on its PYTHONPATH) and with an empty KERAS_HOME, so what it shows needs
nothing a reader lacks. Each code cell then records the SHA-256 of the source that produced its
outputs (metadata "keras_vit": {"source_sha256": ...}): tests/docs/test_tutorial_outputs.py
fails for a cell edited after the run, and re-runs the notebook to compare its text.
"""

import hashlib
import os
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
# The tutorials that run on the bundled digits alone; the others start from downloaded
# weights (B/16, DINOv2, BiT-R50x1, the flowers dataset), which a run here cannot reach.
OFFLINE_TUTORIALS = ("09_transfer_methods.ipynb",)
TIMEOUT_PER_CELL = 1200
METADATA_KEY = "keras_vit"


def source_hash(source):
    """The SHA-256 of a cell's source, as each executed cell records it."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def execute(path, workdir):
    """The notebook at `path`, run top to bottom in `workdir`, each code cell stamped."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    python_path = [str(ROOT / "tests" / "offline"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "KERAS_HOME": os.path.join(workdir, "keras_home"),
           "PYTHONPATH": os.pathsep.join(p for p in python_path if p), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("KERAS_VIT_SMOKE", None)
    client = NotebookClient(notebook, timeout=TIMEOUT_PER_CELL, kernel_name="python3",
                            resources={"metadata": {"path": workdir}})
    client.execute(env=env)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.metadata[METADATA_KEY] = {"source_sha256": source_hash(cell.source)}
            cell.metadata.pop("execution", None)  # this run's timestamps: noise in a diff
    return without_logs(notebook)


def without_logs(notebook):
    """`notebook` without the libraries' log lines: stderr (TensorFlow's start-up, Keras'
    warnings) and TensorFlow's "WARNING:" lines on stdout, which differ between machines and
    runs (retracing counts, addresses) and are not what the tutorial shows."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs:
            if output.output_type == "stream":
                if output.name == "stderr":
                    continue
                output.text = "".join(line for line in output.text.splitlines(keepends=True)
                                      if not line.startswith("WARNING:"))
                if not output.text:
                    continue
            kept.append(output)
        cell.outputs = kept
    return notebook


def main(names):
    import nbformat

    from keras_vit.atomic import atomic_open

    for name in names or OFFLINE_TUTORIALS:
        path = TUTORIALS / name
        with tempfile.TemporaryDirectory() as workdir:
            notebook = execute(path, workdir)
        with atomic_open(path, "w", encoding="utf-8") as file:
            nbformat.write(notebook, file)
        print(f"{path.relative_to(ROOT)}: executed, outputs written")


if __name__ == "__main__":
    main(sys.argv[1:])
