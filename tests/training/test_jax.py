"""Training on the JAX backend with keras.distribution, in subprocesses (the backend and
the two virtual CPU devices are fixed before Keras and JAX start; this process runs
TensorFlow)."""

import json
import os

import numpy as np
import pytest

from tests.conftest import JAX_ENV, ROOT
from tests.training.test_run import kill_after_an_epoch_and_rerun

pytest.importorskip("jax", reason="the JAX backend needs jax (pip install -e '.[jax]')")


def result_of(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, stdout[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _check_distribution(result, *arguments):
    assert result["devices"] == 2
    single = result["none"]
    assert single["iterations"] == 3  # 6 batches of 4, accumulated in pairs: 3 updates
    assert result["max_abs_update"] > 1e-3  # the updates moved the weights
    for name in arguments:
        if name != "clipping":
            assert result[name]["iterations"] == 3
            # 1e-5: float32 sums over the batch and the split matmuls in another order
            # (seen: 1.5e-8 for both).
            assert result[name]["max_abs_diff"] < 1e-5, result
    return result


def test_model_parallel_ends_with_the_one_device_weights(jax_backend_run):
    """The kernel split over both devices; every XLA program compiled costs seconds, so the
    default run (the shared JAX process, tests/conftest.py) compiles two (one device,
    model-parallel) and the slow test all four."""
    code, stderr, result = jax_backend_run
    assert code == 0 and result is not None, stderr
    model = _check_distribution(result, "model-parallel")["model-parallel"]
    assert model["strategy"] == "ModelParallel"
    assert model["qkv_devices"] == 2 and model["qkv_shard_shape"] == [64, 96]  # split


@pytest.mark.slow  # four XLA compilations, ~40 CPU-s; model-parallel alone is the default test
def test_data_and_model_parallel_end_with_the_one_device_weights(python):
    arguments = ("data-parallel", "model-parallel", "clipping")
    run = python(["tests/scripts/jax_backend.py", *arguments], timeout=400, env=JAX_ENV)
    assert run.returncode == 0, run.stderr[-3000:]
    result = _check_distribution(result_of(run.stdout), *arguments)
    # Clipping was active: the same run without it ends elsewhere.
    assert result["clipping_changed_weights_by"] > 1e-2
    data, model = result["data-parallel"], result["model-parallel"]
    assert data["strategy"] == "DataParallel" and data["replicas"] == 2
    assert data["qkv_devices"] == 2 and data["qkv_shard_shape"] == [64, 192]  # replicated
    assert model["strategy"] == "ModelParallel"
    assert model["qkv_devices"] == 2 and model["qkv_shard_shape"] == [64, 96]  # split


def test_tensorflow_names_and_impossible_splits_fail_clearly_on_jax(jax_backend_run):
    """`train(strategy="mirrored")` and a 3-head model split over 2 devices (the shared JAX
    process, tests/conftest.py)."""
    code, stderr, result = jax_backend_run
    assert code == 0 and result is not None, stderr
    errors = result["errors"]
    assert len(errors) == 2, errors
    assert errors[0].startswith('strategy "mirrored" is tf.distribute')
    assert "over 2 devices, which must divide its 3 heads" in errors[1]


@pytest.mark.slow  # two digits runs, about three minutes on two shared cores
def test_resume_after_sigkill_on_jax_data_parallel(tmp_path):
    """The TensorFlow resume test, on JAX with DataParallel over two devices."""
    _, report = kill_after_an_epoch_and_rerun(str(tmp_path / "run"), env=JAX_ENV, wait_s=300,
                                              rerun_timeout_s=400)
    assert report["strategy"] == "data-parallel" and report["replicas"] == 2
    # No guessed threshold on the run's quality: the accuracy the report states is the one its
    # own confusion matrix holds.
    matrix = np.asarray(report["confusion_matrix"])
    assert matrix.sum() == 360 and report["accuracy"] == pytest.approx(np.trace(matrix) / 360)


@pytest.mark.slow  # keras.distribution on virtual devices stays in the default suite (above)
def test_tpu_recipe_of_the_docs(python, tmp_path):
    """docs/distributed.md's JAX recipe, as written, with digits and the demo ViT in place of
    tf_flowers and B/16 (no download), on two virtual devices standing in for TPU cores."""
    from tests import snippets

    blocks = [b for b in snippets.read_blocks(os.path.join(ROOT, "docs", "distributed.md"), ROOT)
              if b.language == "python" and "strategy=\"data-parallel\"" in b.code]
    assert len(blocks) == 1, "the JAX recipe block of docs/distributed.md moved"
    smoke = ("import keras_vit.training.run as run\n"
             "original = run.train\n"
             "def train(dataset, model=None, weights=None, output=None, **kwargs):\n"
             "    assert (dataset, model, weights) == ('tf_flowers', 'B/16', 'imagenet21k')\n"
             "    return original('digits', model='demo', steps=4, verbose=0,\n"
             f"                    output={str(tmp_path / 'run')!r}, **kwargs)\n"
             "import keras_vit\n"
             "keras_vit.train = train\n")
    script = tmp_path / "recipe.py"
    script.write_text(smoke + blocks[0].code)
    run = python([str(script)], timeout=400, env=JAX_ENV)
    assert run.returncode == 0, run.stderr[-3000:]
    strategy, replicas, _ = run.stdout.strip().splitlines()[-1].split()
    # The report names the strategy as train() takes it (docs/distributed.md's table).
    assert (strategy, replicas) == ("data-parallel", "2"), run.stdout[-2000:]
    with open(tmp_path / "run" / "report.json") as f:
        report = json.load(f)
    assert report["precision"] == "mixed_bfloat16" and report["optimizer_iterations"] == 4
