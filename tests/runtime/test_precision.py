"""float32 or bfloat16 inference (keras_vit.runtime.precision): the bfloat16 copy, the "auto" choice with
planted timings and capabilities (as tests/runtime/test_execution.py plants the execution timings), and
predict, evaluate and export recording bfloat16's agreement with float32, each checked against
an agreement computed here from a float32 run and a model built under mixed_bfloat16 by Keras.
"""

import csv
import dataclasses
import itertools
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.errors import ArgumentError
from keras_vit.runtime import execution
from keras_vit.runtime import precision as precisions
from keras_vit.variants import DEMO_VARIANT

SHAPE = (8, 32, 32, 3)
TIMINGS = ("float32 graph", "float32 xla", "bfloat16 graph", "bfloat16 xla")


# The demo ViT with one block instead of four: what these tests check (the copy's policies
# and weights, the agreement each command records) holds at any depth, and every predict,
# evaluate and export traces the model, at a cost that grows with the blocks.
VARIANT = dataclasses.replace(DEMO_VARIANT, depth=1)


def tiny_classifier(classes=10):
    """The one-block demo ViT with a random head (keras_vit's head starts at zero, whose logits
    would agree between any two precisions)."""
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(VARIANT, image_size=32, classes=classes)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape))
    return model


def under_mixed_bfloat16(model):
    """The same model built by keras_vit.ViT under Keras' global mixed_bfloat16 policy (the
    training path's bfloat16), holding `model`'s weights: the reference for the copy."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        built = keras_vit.ViT(VARIANT, image_size=32, classes=int(model.output_shape[-1]))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    built.set_weights(model.get_weights())
    return built


def logits(model, pixels):
    """A direct call on [0, 255] `pixels`, normalised to [-1, 1] here."""
    return np.asarray(model(np.asarray(pixels, np.float32) / 127.5 - 1.0, training=False),
                      np.float32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(the model, its .keras file, 8 PNG images in a folder, their pixels)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("precision")
    model = tiny_classifier()
    path = str(folder / "tiny.keras")
    model.save(path)
    images = folder / "images"
    images.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (8, 32, 32, 3), dtype=np.uint8)
    for i, image in enumerate(pixels):
        Image.fromarray(image).save(images / f"{i}.png")
    return model, path, str(images), pixels


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.delenv(execution.ENVIRONMENT_VARIABLE, raising=False)  # conftest pins graph
    monkeypatch.setattr(execution, "_MEASURED", {})
    return tmp_path / "keras_home" / "keras_vit" / "execution.json"


@pytest.fixture
def planted(monkeypatch, cache_home):
    """Plants the hardware's bfloat16, the timings (execution's too: float32's graph and XLA)
    and the measured agreement; counts the timings and the agreements measured. The bfloat16
    copy is the model itself: the choice reads only the planted numbers (the copy has its own
    test)."""
    counts = {"timed": 0, "agreements": 0}
    monkeypatch.setattr(precisions, "bfloat16_model", lambda model: model)

    def install(native=True, seconds=None, top1=1.0):
        cache_home.unlink(missing_ok=True)
        execution._MEASURED.clear()
        monkeypatch.setattr(precisions, "bfloat16_native", lambda: native)
        monkeypatch.setattr(execution, "time_modes", lambda model, shape, training=False: {
            "graph": seconds["float32 graph"], "xla": seconds["float32 xla"]})

        def time_precisions(models, batch_shape, modes, rounds=None):
            counts["timed"] += 1
            assert set(models) == {"float32", "bfloat16"} and modes == ("graph", "xla")
            return dict(seconds)
        monkeypatch.setattr(precisions, "time_precisions", time_precisions)

        def agreement(reference, outputs, probabilities=False):
            counts["agreements"] += 1
            return {"images": len(reference), "top1_agreement": top1,
                    "max_logit_difference": 0.01}
        monkeypatch.setattr(precisions, "agreement", agreement)
        return counts
    return install


def choose(model, **kwargs):
    """choose_precision's "auto"; the outputs compared are planted (`planted`), not run."""
    pixels = np.zeros(SHAPE, np.float32)
    return precisions.choose_precision(model, SHAPE, "auto", calibration=pixels,
                                       reference=lambda model, jit_compile, x: x, **kwargs)


@pytest.fixture(scope="module")
def model():
    return tiny_classifier()


def timings(f32_graph, f32_xla, bf16_graph, bf16_xla):
    return dict(zip(TIMINGS, (f32_graph, f32_xla, bf16_graph, bf16_xla)))


def test_a_precision_that_does_not_exist_is_refused_by_name(tiny, cli):
    model, path, images, _ = tiny
    with pytest.raises(ArgumentError, match="precision='float16' is not one of float32, "
                                            "bfloat16, auto"):
        precisions.check_precision("float16")
    with pytest.raises(ArgumentError, match="precision='half'"):
        keras_vit.predict_images(model, images, precision="half")
    with pytest.raises(ArgumentError, match="precision='bf16'"):
        keras_vit.evaluate(model, "digits", precision="bf16")
    with pytest.raises(ArgumentError, match="precision='fp16'"):
        keras_vit.export_saved_model(model, "unused", precision="fp16")
    for command in (["predict", images, "--model", path], ["evaluate", "--model", path,
                    "--dataset", "digits", "--output", "unused"],
                    ["export", "--model", path, "--output", "unused"]):
        result = cli([*command, "--precision", "half"])
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
        assert "invalid choice: 'half'" in result.stderr, command


def test_the_bfloat16_copy_computes_as_keras_mixed_bfloat16_with_the_same_weights(tiny):
    model, _, _, pixels = tiny
    copy, mixed = precisions.bfloat16_model(model), under_mixed_bfloat16(model)

    def policies(model):  # the input layer's policy is no computation's
        return [layer.dtype_policy.name for layer in model.layers[1:]]
    assert policies(copy) == policies(mixed)
    assert set(policies(copy)) == {"mixed_bfloat16", "float32"}
    for mine, theirs in zip(copy.weights, model.weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    # The same layers, policies and weights: the same computation, bit for bit.
    np.testing.assert_array_equal(logits(copy, pixels), logits(mixed, pixels))
    # And not float32's: bfloat16 keeps 8 bits of mantissa.
    assert np.abs(logits(copy, pixels) - logits(model, pixels)).max() > 0


@pytest.mark.parametrize("native, seconds, top1, expected", [
    (False, timings(1.0, 1.0, 0.5, 0.5), 1.0, ("float32", False)),
    (True, timings(1.0, 1.0, 1.2, 1.5), 1.0, ("float32", False)),  # bfloat16 emulated: slower
    (True, timings(1.0, 0.8, 0.9, 1.0), 1.0, ("float32", True)),  # float32 under XLA is faster
    (True, timings(1.0, 1.0, 0.6, 0.7), 0.99, ("float32", False)),  # faster, but disagrees
    (True, timings(1.0, 1.0, 0.6, 0.7), 0.995, ("bfloat16", False)),
    # The 2-core AVX512-BF16 EPYC's ViT-B/16 at batch 8 (issue 33): float32 graph 11.7 img/s,
    # mixed_bfloat16 graph 18.6, mixed_bfloat16 under XLA 10.5 (float32 XLA as the graph).
    (True, timings(8 / 11.7, 8 / 11.7, 8 / 18.6, 8 / 10.5), 1.0, ("bfloat16", False)),
    (True, timings(1.0, 1.0, 0.9, 0.5), 1.0, ("bfloat16", True)),
], ids=["not-native", "bf16-slower", "f32-xla-fastest", "agreement-below-bound",
        "all-hold", "avx512-bf16-epyc", "bf16-xla-fastest"])
def test_auto_picks_bfloat16_only_when_native_faster_and_in_agreement(
        planted, model, native, seconds, top1, expected):
    counts = planted(native=native, seconds=seconds, top1=top1)
    choice = choose(model)
    assert (choice.precision, choice.jit_compile) == expected
    assert choice.record["precision"] == expected[0] and choice.record["asked"] == "auto"
    assert counts["timed"] == (1 if native else 0)
    if expected[0] == "bfloat16":
        assert choice.record["calibration_agreement"]["top1_agreement"] >= precisions.MIN_AGREEMENT


def test_auto_is_never_slower_than_float32_as_a_graph(planted, model):
    """Over a grid of planted timings: the mode and precision chosen is never timed slower than
    float32 as a graph."""
    for values in itertools.product((0.5, 0.98, 1.0, 1.5), repeat=3):
        planted_times = timings(1.0, *values)  # planted numbers: no clock is read
        planted(seconds=planted_times, top1=1.0)
        choice = choose(model)
        mode = {False: "graph", True: "xla"}[choice.jit_compile]
        chosen = planted_times[f"{choice.precision} {mode}"]
        assert chosen <= planted_times["float32 graph"], planted_times


def test_auto_stores_the_timings_but_measures_the_agreement_on_each_run(planted, cache_home,
                                                                       model, monkeypatch):
    counts = planted(seconds=timings(1.0, 1.0, 0.5, 0.6))
    assert choose(model).precision == "bfloat16"
    (key, stored), = json.loads(cache_home.read_text()).items()
    assert key.startswith("precision | ") and stored["seconds_per_call"]["bfloat16 graph"] == 0.5
    assert choose(model).precision == "bfloat16"
    assert counts == {"timed": 1, "agreements": 2}  # another model's weights may disagree
    # The stored timings still say bfloat16 is faster; this run's images disagree.
    monkeypatch.setattr(precisions, "agreement", lambda *a, **k: {
        "images": 8, "top1_agreement": 0.5, "max_logit_difference": 3.0})
    assert choose(model).precision == "float32" and counts["timed"] == 1



@pytest.mark.parametrize("edited", [{"bfloat16 graph": "0.5"}, {"bfloat16 graph": None},
                                    {"float32 graph": -1.0}, {"bfloat16 xla": True},
                                    {"bfloat16 fast": 0.1}, "fast"],
                         ids=["a-string", "null", "negative", "a-bool", "an-unknown-mode",
                              "not-a-table"])
def test_an_edited_stored_timing_is_measured_again_not_read(planted, cache_home, model, edited):
    """execution.json is the user's file: an entry whose timings are not finite positive
    numbers of known modes is measured again (and rewritten), never read."""
    counts = planted(seconds=timings(1.0, 1.0, 0.5, 0.6))
    assert choose(model).precision == "bfloat16" and counts["timed"] == 1
    (key, stored), = json.loads(cache_home.read_text()).items()
    stored["seconds_per_call"] = (edited if isinstance(edited, str)
                                  else {**stored["seconds_per_call"], **edited})
    cache_home.write_text(json.dumps({key: stored}))
    execution._MEASURED.clear()
    assert choose(model).precision == "bfloat16" and counts["timed"] == 2
    assert json.loads(cache_home.read_text())[key]["seconds_per_call"] == timings(1.0, 1.0, 0.5, 0.6)


def test_an_edited_execution_timing_does_not_break_the_recheck(cache_home, model):
    """A stored mode whose other mode's timing was edited into a string: no recheck, no error."""
    key = execution._cache_key(model, SHAPE, False)
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text(json.dumps({key: {"mode": "graph",
                                            "seconds_per_call": {"graph": 1.0, "xla": "2"}}}))
    assert execution.recheck_choice(model, SHAPE, False, 100.0) is False
    cache_home.write_text(json.dumps({key: {"mode": "graph", "seconds_per_call": "fast"}}))
    assert execution.recheck_choice(model, SHAPE, False, 100.0) is False


def test_auto_without_enough_work_to_time_runs_float32(planted, cache_home, model):
    counts = planted(seconds=timings(1.0, 1.0, 0.5, 0.5))
    choice = choose(model, measure=False)
    assert choice.precision == "float32" and counts["timed"] == 0 and not cache_home.exists()


def test_native_bfloat16_is_read_from_the_cpu_flags_and_the_gpu_capability(monkeypatch):
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda *a: [])
    for flags, native in (({"avx2", "fma"}, False), ({"avx512f", "avx512_bf16"}, True),
                          ({"amx_bf16", "amx_tile"}, True)):
        monkeypatch.setattr(precisions, "_cpu_flags", lambda flags=flags: flags)
        assert precisions.bfloat16_native() is native
    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [gpu] if kind == "GPU" else [])
    for capability, native in (((7, 5), False), ((8, 0), True), ((9, 0), True)):
        monkeypatch.setattr(tf.config.experimental, "get_device_details",
                            lambda device, c=capability: {"compute_capability": c})
        assert precisions.bfloat16_native() is native


def test_predict_in_bfloat16_records_its_agreement_with_float32(tiny, cli, tmp_path):
    model, path, images, pixels = tiny
    output = str(tmp_path / "predictions.csv")
    result = cli(["predict", images, "--model", path, "--precision", "bfloat16",
                  "--output", output])
    assert result.returncode == 0, result.stderr
    with open(output + ".precision.json") as f:
        record = json.load(f)
    # Computed here: float32's logits and those of a model Keras built under mixed_bfloat16, on
    # the same pixels (PNG is lossless, 32x32 the model's size), called directly as predict
    # calls a handful of images.
    reference, bfloat16 = logits(model, pixels), logits(under_mixed_bfloat16(model), pixels)
    same = np.mean(reference.argmax(-1) == bfloat16.argmax(-1))
    assert record["precision"] == "bfloat16" and record["agreement"]["images"] == 8
    assert record["agreement"]["top1_agreement"] == same
    # Logits of |x| < 16 in float32 round at 2**-20; the bfloat16 difference is ~2**-5.
    assert record["agreement"]["max_logit_difference"] == pytest.approx(
        np.abs(reference - bfloat16).max(), abs=1e-4)
    assert f"top-1 agreement with float32 {same:.4f}" in result.stderr
    with open(output) as f:
        probabilities = [float(row["top1_probability"]) for row in csv.DictReader(f)]
    assert probabilities == pytest.approx(np.max(tf.nn.softmax(bfloat16).numpy(), -1), abs=1e-6)


def test_a_saved_model_is_not_run_in_another_precision(tmp_path):
    from keras_vit.runtime.runners import model_runner

    with pytest.raises(ArgumentError, match="SavedModel computes in the precision it was "
                                            "exported with"):
        model_runner(str(_a_saved_model(tmp_path)), 4, 100, precision="bfloat16")


def _a_saved_model(tmp_path):
    folder = tmp_path / "saved" / "1"
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"")
    return folder


def test_evaluate_in_bfloat16_records_its_agreement_on_every_image(tiny, cli, tmp_path):
    model, path, _, _ = tiny
    predicted = {}
    for precision in ("float32", "bfloat16"):
        output = str(tmp_path / precision)
        result = cli(["evaluate", "--model", path, "--dataset", "digits", "--output", output,
                      "--precision", precision, "--batch-size", "120"])
        assert result.returncode == 0, result.stderr
        with open(os.path.join(output, "predictions.csv")) as f:
            predicted[precision] = [row["predicted"] for row in csv.DictReader(f)]
        with open(os.path.join(output, "report.json")) as f:
            report = json.load(f)
    measured = report["precision"]["agreement"]
    same = np.mean([a == b for a, b in zip(predicted["float32"], predicted["bfloat16"])])
    assert measured["images"] == len(predicted["float32"]) == 360
    assert measured["top1_agreement"] == pytest.approx(same, abs=1e-12)
    assert measured["max_logit_difference"] > 0
    assert f"top-1 agreement with float32 {same:.4f}" in result.stdout


def test_export_in_bfloat16_records_its_agreement(tiny, cli, tmp_path):
    from keras_vit.export.quantized import calibration_pixels

    model, path, _, _ = tiny
    output = str(tmp_path / "bf16.keras")
    result = cli(["export", "--model", path, "--format", "keras", "--precision", "bfloat16",
                  "--calibration-data", "digits", "--output", output])
    assert result.returncode == 0, result.stderr
    with open(output + ".agreement.json") as f:
        record = json.load(f)
    exported = keras.saving.load_model(output, compile=False)
    assert exported.get_layer("encoderblock_0").dtype_policy.name == "mixed_bfloat16"
    _, held_out = calibration_pixels("digits", (32, 32), 1)
    # Through Keras' predict, as the export's measurement runs them (a direct call rounds
    # bfloat16 in another order: an image near a tie can change class).
    x = held_out / 127.5 - 1.0
    reference = model.predict(x, verbose=0)
    bfloat16 = under_mixed_bfloat16(model).predict(x, verbose=0).astype(np.float32)
    assert record["images"] == 360 and record["precision"] == "bfloat16"
    assert record["top1_agreement"] == np.mean(reference.argmax(-1) == bfloat16.argmax(-1))
    assert record["max_logit_difference"] == pytest.approx(
        np.abs(reference - bfloat16).max(), abs=1e-4)
    assert f"{record['top1_agreement']:.4f}" in result.stdout


def test_export_refuses_bfloat16_where_it_does_not_apply(tiny, cli, tmp_path):
    model, path, _, _ = tiny
    for extra, message in ((["--format", "tflite"], "TFLite has no bfloat16 kernels"),
                           (["--format", "keras", "--quantize", "int8"], "give one of them")):
        result = cli(["export", "--model", path, "--precision", "bfloat16",
                      "--output", str(tmp_path / "x.keras"), *extra])
        assert result.returncode == 2 and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    with pytest.raises(ArgumentError, match="TFLite"):
        keras_vit.export_tflite(model, str(tmp_path / "x.tflite"), precision="bfloat16")


@pytest.mark.slow  # test_export_in_bfloat16_records_its_agreement covers the same copy and record
def test_a_bfloat16_saved_model_computes_in_bfloat16(tiny, tmp_path):
    """The written graph holds bfloat16 tensors and its logits are not float32's. (Not compared
    with the eager copy to a tolerance: the graph rounds bfloat16 in another order, which moves
    logits as much as bfloat16 itself does, 0.08 on this model.)"""
    model, _, _, pixels = tiny
    path = keras_vit.export_saved_model(model, str(tmp_path / "served"), precision="bfloat16")
    signature = tf.saved_model.load(path).signatures["serving_default"]
    served = signature(images=tf.constant(pixels, tf.float32))["logits"].numpy()
    graph = signature.graph.as_graph_def()
    types = {value.type for function in graph.library.function for node in function.node_def
             for value in node.attr.values()}
    assert tf.bfloat16.as_datatype_enum in types
    assert np.abs(served - logits(model, pixels)).max() > 0
    assert served.dtype == np.float32
