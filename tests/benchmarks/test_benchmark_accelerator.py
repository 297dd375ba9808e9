"""benchmarks/accelerator.py: the GPU benchmark's order of calls, its parity gate, its precision
settings and its refusals, here on the CPU; and a tiny run with TensorFlow unimportable, as on
the GPU machine (no TensorFlow, Keras from wheels)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import accelerator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIBRARIES = ("keras_vit", "timm")


def _recording_calls(outputs, order):
    """Stand-ins for build_pair's calls: each appends its "library setting" key to `order`
    and returns `outputs[key]`."""
    def call(key):
        def run():
            order.append(key)
            return outputs[key]
        return run

    return {lib: {s: call(f"{lib} {s}") for s in accelerator.SETTINGS} for lib in LIBRARIES}


def _outputs(timm_float32_offset):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2, 10)).astype(np.float32)
    outputs = {f"{lib} {s}": base + 0.01 * (i + 1) * rng.standard_normal((2, 10)).astype(np.float32)
               for i, lib in enumerate(LIBRARIES) for s in ("tf32", "bfloat16")}
    outputs["keras_vit float32"] = base
    outputs["timm float32"] = base + timm_float32_offset
    return outputs


def test_calls_are_timed_interleaved_after_a_first_call_and_a_warm_up():
    order = []
    outputs = _outputs(timm_float32_offset=1e-6)
    row = accelerator.measure_model(_recording_calls(outputs, order), batch=2, repeats=3,
                                    torch_device="cpu")
    every = [f"{lib} {s}" for lib in LIBRARIES for s in accelerator.SETTINGS]
    # The first call of each (timed apart), an untimed warm-up of each, then rounds that
    # alternate the libraries within each setting: keras_vit, timm, keras_vit, timm, ...
    rounds = [f"{lib} {s}" for s in accelerator.SETTINGS for lib in LIBRARIES] * 3
    assert order == every + every + rounds
    assert sorted(row["first_call_seconds"]) == sorted(every)
    for s in accelerator.SETTINGS:
        for lib in LIBRARIES:
            assert row["images_per_s"][s][lib]["n"] == 3
        assert row["ratio"][s] > 0
    # The parity measure and the agreements, from the outputs by hand.
    base = outputs["timm float32"]
    assert row["parity_relative_difference"] == pytest.approx(
        np.abs(outputs["keras_vit float32"] - base).max() / np.abs(base).max())
    for lib in LIBRARIES:
        for s in ("tf32", "bfloat16"):
            got = row["agreement_with_float32"][lib][s]
            diff = outputs[f"{lib} {s}"] - outputs[f"{lib} float32"]
            assert got["max_logit_difference"] == pytest.approx(np.abs(diff).max())
            assert got["top1_agreement"] == np.mean(
                outputs[f"{lib} {s}"].argmax(-1) == outputs[f"{lib} float32"].argmax(-1))
    assert row["outputs_per_image"] == 10


def test_a_model_whose_float32_outputs_differ_is_recorded_and_not_timed():
    order = []
    # 1e-2 on outputs of size ~2: about 5e-3 relative, fifty times the bound.
    row = accelerator.measure_model(_recording_calls(_outputs(timm_float32_offset=1e-2), order),
                                    batch=2, repeats=3, torch_device="cpu")
    assert row["parity_relative_difference"] > accelerator.RELATIVE_TOLERANCE
    assert "not timed" in row["parity_failed"] and "images_per_s" not in row
    assert len(order) == 6  # the first calls alone
    markdown = accelerator.to_markdown(_report({"vit_base_patch16_224": {
        "title": "ViT-B/16", **row}}))
    assert "| ViT-B/16 | parity failed |" in markdown


def test_a_failing_call_is_recorded_and_its_setting_left_out_for_both_libraries():
    order = []
    calls = _recording_calls(_outputs(timm_float32_offset=1e-6), order)

    def broken():
        raise RuntimeError("no kernel for this\nshape")

    calls["keras_vit"]["bfloat16"] = broken
    row = accelerator.measure_model(calls, batch=2, repeats=2, torch_device="cpu")
    assert row["errors"] == {"keras_vit bfloat16": "RuntimeError: no kernel for this shape"}
    assert list(row["images_per_s"]) == list(row["ratio"]) == ["float32", "tf32"]
    assert "timm bfloat16" not in order[5:]  # the first call alone: never timed
    markdown = accelerator.to_markdown(_report({"vit_base_patch16_224": {
        "title": "ViT-B/16", **row}}))
    # A failure's message is a code span: its brackets are never read as links (the site).
    assert "Failed: ViT-B/16 keras_vit bfloat16: `RuntimeError: no kernel for this shape`" in markdown
    assert [ln.split("|")[2].strip() for ln in markdown.splitlines()
            if ln.startswith("| ViT-B/16 |")][:2] == ["float32", "tf32"]


def test_settings_set_both_libraries_and_restore_them():
    import jax
    import torch

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              jax.config.jax_default_matmul_precision)
    with accelerator.setting("float32"):
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                jax.config.jax_default_matmul_precision) == (False, False, "float32")
    for name in ("tf32", "bfloat16"):
        with accelerator.setting(name):
            assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                    jax.config.jax_default_matmul_precision) == (True, True, "tensorfloat32")
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            jax.config.jax_default_matmul_precision) == before


def test_no_gpu_backend_or_unknown_model_is_a_one_line_refusal(monkeypatch):
    import keras

    with pytest.raises(SystemExit, match="unknown models") as raised:
        accelerator.main(["--models", "vit_huge_patch14_224"])
    assert "\n" not in str(raised.value)
    monkeypatch.setattr(keras.backend, "backend", lambda: "tensorflow")
    with pytest.raises(SystemExit, match="set KERAS_BACKEND=jax") as raised:
        accelerator.main(["--models", "vit_base_patch16_224"])
    assert "\n" not in str(raised.value)
    # This machine has no GPU: JAX sees its CPU alone.
    with pytest.raises(SystemExit, match="needs a GPU visible to JAX.*--allow-cpu") as raised:
        accelerator.check_devices(allow_cpu=False)
    assert "\n" not in str(raised.value)
    jax_device, torch_device = accelerator.check_devices(allow_cpu=True)
    assert (jax_device.platform, torch_device) == ("cpu", "cpu")


def _report(models):
    return {"batch": 2, "image_size": 112, "repeats": 3, "settings": {}, "notes": [],
            "models": models,
            "machine": {"torch_device": "cpu", "device_kind": "cpu", "versions": {
                "jax": "0", "keras": "3", "torch": "2", "torch_cuda": None, "timm": "1"}}}


def test_training_steps_record_first_losses_and_time_both_settings():
    order = []
    losses = {f"{lib} {s}": np.float32(i + 1) for i, (lib, s) in enumerate(
        (lib, s) for lib in LIBRARIES for s in accelerator.TRAIN_SETTINGS)}
    steps = {lib: {s: _recording_calls(losses, order)[lib][s] for s in accelerator.TRAIN_SETTINGS}
             for lib in LIBRARIES}
    row = accelerator.measure_training(steps, batch=2, repeats=2, torch_device="cpu")
    assert row["first_loss"] == {key: float(value) for key, value in losses.items()}
    assert list(row["images_per_s"]) == list(accelerator.TRAIN_SETTINGS)
    every = [f"{lib} {s}" for lib in LIBRARIES for s in accelerator.TRAIN_SETTINGS]
    rounds = [f"{lib} {s}" for s in accelerator.TRAIN_SETTINGS for lib in LIBRARIES] * 2
    assert order == every + every + rounds


# Imports JAX, torch and timm in a fresh process, builds, loads and compiles a width-64
# one-block DINOv2, and the training steps of ViT-B/16 and L/16 at 384 in three settings, with
# every block rematerialised and the largest-batch search (minutes on 2 loaded cores). The
# default tests cover the order of calls, the parity gate, the failures, the settings and
# the search (test_benchmark_accelerator_training.py); this one proves that the whole run
# needs no TensorFlow and that its tables hold what it measured.
@pytest.mark.slow
def test_tiny_run_without_tensorflow_checks_parity_and_writes_its_tables(tmp_path):
    block_tensorflow = ("import sys, runpy; sys.modules['tensorflow'] = None; "
                        "runpy.run_module('benchmarks.accelerator', run_name='__main__', "
                        "alter_sys=True)")
    env = {**os.environ, "PYTHONPATH": ROOT, "KERAS_BACKEND": "jax"}
    out = subprocess.run([sys.executable, "-c", block_tensorflow, "--tiny", "--allow-cpu",
                          "--models", "vit_base_patch14_dinov2", "--output", str(tmp_path),
                          "--libraries", "keras_vit,keras_vit-jit,timm", "--memory",
                          "--remat", "--largest-batch", "--budget-s", "3600"],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "accelerator.json").read_text())
    assert list(report["models"]) == ["vit_base_patch14_dinov2"] and report["batch"] == 2
    assert list(report["training"]) == ["vit_base_patch16_224", "vit_large_patch16_384"]
    assert report["remat"] is True
    row = report["models"]["vit_base_patch14_dinov2"]
    assert "errors" not in row and row["parity_relative_difference"] <= accelerator.RELATIVE_TOLERANCE
    for s in accelerator.SETTINGS:
        assert all(row["images_per_s"][s][lib]["median"] > 0 for lib in LIBRARIES)
    # On a CPU TF32 does not exist: the setting changes nothing, bit for bit.
    for lib in LIBRARIES:
        assert row["agreement_with_float32"][lib]["tf32"]["max_logit_difference"] == 0
    table = [ln for ln in (tmp_path / "accelerator.md").read_text().splitlines()
             if ln.startswith("| DINOv2-B/14 |")]
    assert [ln.split("|")[2].strip() for ln in table[:3]] == list(accelerator.SETTINGS)
    # images/s of keras_vit, keras_vit-jit and timm, then keras_vit against the other two
    assert table[2].split("|")[7].strip() == f"{row['ratio']['bfloat16']:.2f}x"
    # The bare jax.jit computes what predict_on_batch does, bit for bit in float32 on a CPU.
    assert row["agreement_with_float32"]["keras_vit-jit"]["tf32"]["max_logit_difference"] == 0
    # keras_vit's peak is its XLA program's (on a CPU too); torch's allocator peak is CUDA's.
    peaks = row["peak_memory"]
    assert peaks["keras_vit float32"]["peak_bytes"] > peaks["keras_vit float32"]["resident_bytes"] > 0
    assert peaks["timm float32"] is None
    # Training: the same weights and labels, so the first steps' losses (float32 on a CPU)
    # agree to the parity tests' relative bound.
    for train in report["training"].values():
        assert "errors" not in train and train["batch"] == 2
        loss = train["first_loss"]
        for s in ("float32", "tf32"):
            assert loss[f"keras_vit {s}"] == pytest.approx(loss[f"timm {s}"],
                                                           rel=accelerator.RELATIVE_TOLERANCE)
        assert all(train["images_per_s"][s][lib]["median"] > 0
                   for s in accelerator.TRAIN_SETTINGS for lib in LIBRARIES)
        # every setting's train step compiled: its memory read
        assert all(train["peak_memory"][f"keras_vit {s}"]["peak_bytes"] > 0
                   for s in accelerator.TRAIN_SETTINGS)
        # a CPU runs batch 2 and 4 of a width-64 model: the search's one doubling ran
        assert train["largest_batch"] == {lib: {"largest": 4, "failed_at": None, "error": None}
                                          for lib in LIBRARIES}
    assert "Largest batch whose bfloat16 training step ran" in \
        (tmp_path / "accelerator.md").read_text()


@pytest.mark.parametrize("flag,expected", [("auto", None), ("fused", True), ("explicit", False)])
def test_the_attention_flag_sets_every_attention_layer_of_both_models(monkeypatch, flag, expected):
    """--attention forces keras_vit's path in the float32 and the bfloat16 model alike; "auto"
    leaves each layer to keras_vit's own choice (None)."""
    import keras_vit
    from keras_vit.layers import MultiHeadSelfAttention
    from keras_vit.runtime.precision import bfloat16_model

    variant = keras_vit.Variant("ViT-tiny_8", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)
    model = keras_vit.ViT(variant, image_size=16, classes=3)
    monkeypatch.setattr(accelerator, "attention_setting", accelerator.FORCED_ATTENTION[flag])
    models = accelerator.force_attention(model, bfloat16_model(model))
    settings = [layer.fused_attention for m in models for layer in m._flatten_layers()
                if isinstance(layer, MultiHeadSelfAttention)]
    assert settings == [expected] * 4  # two blocks in each of the two models


def test_importing_the_benchmark_leaves_the_environment_alone(monkeypatch):
    """Its JAX settings are the benchmark run's: set on import here (the suite runs on
    TensorFlow), they reached every later subprocess of this worker (a MirroredStrategy
    script once started on JAX because of it)."""
    import importlib

    for name in ("KERAS_BACKEND", "XLA_PYTHON_CLIENT_PREALLOCATE"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    importlib.reload(accelerator)  # the module's code again, as a first import runs it
    assert dict(os.environ) == before


def test_added_libraries_join_the_rounds_and_are_compared_with_their_own_float32():
    """keras_vit-jit and timm-compiled (the latter only where GPUs run: tf32 and bfloat16) are
    timed in the same rounds; each is measured against keras_vit's or timm's float32."""
    order = []
    outputs = _outputs(timm_float32_offset=1e-6)
    outputs.update({"keras_vit-jit float32": outputs["keras_vit float32"],
                    "keras_vit-jit tf32": outputs["keras_vit tf32"] + 1.0,
                    "keras_vit-jit bfloat16": outputs["keras_vit bfloat16"],
                    "timm-compiled tf32": outputs["timm tf32"],
                    "timm-compiled bfloat16": outputs["timm bfloat16"] + 2.0})
    libraries = ("keras_vit", "keras_vit-jit", "timm", "timm-compiled")

    def call(key):
        return lambda: order.append(key) or outputs[key]

    calls = {lib: {s: call(f"{lib} {s}") for s in accelerator._settings_of(lib, accelerator.SETTINGS)}
             for lib in libraries}
    assert list(calls["timm-compiled"]) == list(accelerator.COMPILED_SETTINGS)
    row = accelerator.measure_model(calls, batch=2, repeats=2, torch_device="cpu")
    rounds = [f"{lib} {s}" for s in accelerator.SETTINGS for lib in libraries
              if s in calls[lib]] * 2
    assert order[-len(rounds):] == rounds
    assert row["ratio_to"]["float32"].keys() == {"keras_vit-jit", "timm"}
    assert row["ratio_to"]["tf32"].keys() == {"keras_vit-jit", "timm", "timm-compiled"}
    assert row["ratio"]["tf32"] == row["ratio_to"]["tf32"]["timm"]
    got = row["agreement_with_float32"]
    assert got["keras_vit-jit"]["tf32"]["max_logit_difference"] == pytest.approx(
        np.abs(outputs["keras_vit-jit tf32"] - outputs["keras_vit float32"]).max())
    assert got["timm-compiled"]["bfloat16"]["max_logit_difference"] == pytest.approx(
        np.abs(outputs["timm-compiled bfloat16"] - outputs["timm float32"]).max())
    markdown = accelerator.to_markdown({**_report({"m": {"title": "ViT-B/16", **row}}),
                                        "libraries": list(libraries)})
    line = next(ln for ln in markdown.splitlines() if ln.startswith("| ViT-B/16 | tf32 |"))
    cells = [c.strip() for c in line.split("|")[3:-1]]
    # images/s of the four libraries, then keras_vit against the other three
    assert cells[4:7] == [f"{row['ratio_to']['tf32'][lib]:.2f}x" for lib in libraries[1:]]


def test_memory_readings_run_in_their_setting_and_a_failing_one_is_recorded():
    import jax

    seen = {}

    def reading(name):
        def read():
            seen[name] = jax.config.jax_default_matmul_precision
            if name == "bfloat16":
                raise MemoryError("out of memory\nwhile reading")
            return {"peak_bytes": 3 * 2**30, "resident_bytes": 2**30}
        return read

    peaks = accelerator.read_memory({"timm": {s: reading(s) for s in accelerator.SETTINGS}})
    assert seen == {"float32": "float32", "tf32": "tensorfloat32", "bfloat16": "tensorfloat32"}
    assert peaks["timm bfloat16"] == {"error": "MemoryError: out of memory while reading"}
    markdown = accelerator.to_markdown(_report({"m": {
        "title": "ViT-B/16", "parity_relative_difference": 0.0, "parity_failed": "x",
        "peak_memory": peaks}}))
    assert "| ViT-B/16 | float32 | 3.00 (1.00) |" in markdown
    assert "| ViT-B/16 | bfloat16 | failed |" in markdown


def test_xla_peak_counts_arguments_outputs_and_temporaries_once():
    from types import SimpleNamespace

    from benchmarks.device_memory import xla_peak

    stats = SimpleNamespace(argument_size_in_bytes=1000, output_size_in_bytes=300,
                            alias_size_in_bytes=200, temp_size_in_bytes=50)
    compiled = SimpleNamespace(memory_analysis=lambda: stats)
    # An output that reuses a donated argument's buffer is not a second allocation.
    assert xla_peak(compiled)["peak_bytes"] == 1000 + 300 - 200 + 50
    assert xla_peak(compiled)["resident_bytes"] == 1000
