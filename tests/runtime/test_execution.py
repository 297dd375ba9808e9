"""Graph or XLA (keras_vit.runtime.execution): the choice, where it is remembered, and every path that
uses it: predict, evaluate, training and export.

The suite runs with KERAS_VIT_EXECUTION=graph (conftest.py), so that its numbers do not depend
on which mode this CPU prefers; these tests set the mode they test.
"""

import dataclasses
import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.errors import ArgumentError
from keras_vit.runtime import execution
from keras_vit.variants import DEMO_VARIANT

SHAPE = (4, 32, 32, 3)


# The demo ViT with one block instead of four: which mode runs, and that both compute the
# same, hold at any depth, and tracing (and XLA's compiling) grows with the blocks.
VARIANT = dataclasses.replace(DEMO_VARIANT, depth=1)


def tiny_classifier(classes=5):
    """The one-block demo ViT with a random head (keras_vit's head starts at zero, whose logits
    would agree between any two modes)."""
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(VARIANT, image_size=32, classes=classes)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape))
    return model


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.delenv(execution.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(execution, "_MEASURED", {})  # this process's memory of earlier tests
    return tmp_path / "keras_home" / "keras_vit" / "execution.json"


@pytest.fixture
def timed(monkeypatch):
    """Replaces the timing with given seconds per call, and counts the timings."""
    calls = []

    def install(graph, xla):
        def fake(model, batch_shape, training=False, rounds=execution.ROUNDS):
            calls.append((tuple(batch_shape), training))
            return {"graph": graph, "xla": xla}
        monkeypatch.setattr(execution, "time_modes", fake)
        return calls
    return install


def test_a_mode_that_does_not_exist_is_refused_by_name(monkeypatch):
    with pytest.raises(ArgumentError, match="execution='jit'"):
        execution.check_execution("jit")
    monkeypatch.setenv(execution.ENVIRONMENT_VARIABLE, "fast")
    with pytest.raises(ArgumentError, match="KERAS_VIT_EXECUTION='fast'"):
        execution.check_execution()
    with pytest.raises(ArgumentError, match="execution='fast'"):
        keras_vit.predict_images(tiny_classifier(), ["x.png"], execution="fast")


def test_the_environment_sets_the_default_and_an_argument_wins(monkeypatch, timed):
    calls = timed(graph=1.0, xla=0.5)
    model = tiny_classifier()
    monkeypatch.setenv(execution.ENVIRONMENT_VARIABLE, "xla")
    assert execution.choose_jit_compile(model, SHAPE) is True
    assert execution.choose_jit_compile(model, SHAPE, "graph") is False
    assert calls == []  # a mode given is used as it is, never timed


def test_auto_takes_the_faster_mode_and_remembers_it(cache_home, timed):
    model = tiny_classifier()
    calls = timed(graph=1.0, xla=0.8)
    assert execution.choose_jit_compile(model, SHAPE) is True
    stored = json.loads(cache_home.read_text())
    (key, choice), = stored.items()
    assert choice["mode"] == "xla" and "4x32x32x3 inference" in key
    calls = timed(graph=0.1, xla=10.0)  # a second timing would now say graph
    calls.clear()
    assert execution.choose_jit_compile(model, SHAPE) is True and calls == []
    # Another batch shape, or training, is another computation: timed on its own.
    assert execution.choose_jit_compile(model, (8, 32, 32, 3)) is False
    assert execution.choose_jit_compile(model, SHAPE, training=True) is False
    assert calls == [((8, 32, 32, 3), False), (SHAPE, True)]
    assert len(json.loads(cache_home.read_text())) == 3


# ViT-B/16, batch 8, images/s measured on the two CPUs docs/performance.md reports:
# an AMD EPYC with AVX2 and FMA only, and one with AVX-512 (XLA 1-5% slower there).
@pytest.mark.parametrize("graph_rate, xla_rate, expected", [(3.58, 4.30, True), (5.61, 5.65, False)],
                         ids=["avx2-epyc", "avx512-epyc"])
def test_the_measured_cpus_get_their_faster_mode(cache_home, timed, graph_rate, xla_rate, expected):
    timed(graph=8 / graph_rate, xla=8 / xla_rate)
    assert execution.choose_jit_compile(tiny_classifier(), (8, 224, 224, 3)) is expected


def test_xla_must_beat_the_graph_by_the_margin(cache_home, timed):
    timed(graph=1.0, xla=1.0 - execution.XLA_MARGIN / 2)
    assert execution.choose_jit_compile(tiny_classifier(), SHAPE) is False


def _planted_timing(monkeypatch, seconds):
    """Calls that take the planted `seconds` ({mode: one per call, warm-up first}) on a clock
    of their own: the timing's rounds and statistic run as written, on known durations."""
    now = [0.0]
    monkeypatch.setattr(execution, "_clock", lambda: now[0])

    def planted(model, training, jit_compile):
        durations = iter(seconds["xla" if jit_compile else "graph"])

        def call(images):
            now[0] += next(durations)
        return call
    monkeypatch.setattr(execution, "_call", planted)


def test_a_disturbed_round_of_the_faster_mode_does_not_lose_it(cache_home, monkeypatch):
    """XLA takes 0.8 s a call, the graph 1.0 s; a burst of load slows two of XLA's timed calls
    to 5 s (a median of three would read 5 s there and keep the graph for good)."""
    rounds = execution.ROUNDS
    xla = [9.0, 0.8, 5.0, 5.0] + [0.8] * (rounds - 3)
    _planted_timing(monkeypatch, {"graph": [9.0] + [1.0] * rounds, "xla": xla})
    assert execution.choose_jit_compile(tiny_classifier(), SHAPE) is True
    (choice,) = json.loads(cache_home.read_text()).values()
    # Differences of a clock's float readings: exact to a few ulps of the clock's 40 s.
    assert choice["seconds_per_call"] == pytest.approx({"graph": 1.0, "xla": 0.8}, abs=1e-12)


def test_a_choice_a_later_run_finds_much_slower_is_measured_again(cache_home, timed):
    model = tiny_classifier()
    calls = timed(graph=1.0, xla=0.8)
    assert execution.choose_jit_compile(model, SHAPE) is True and len(calls) == 1
    # The later run's XLA calls: as fast as the graph's stored time, then much slower.
    faster_than_the_margin = execution.REMEASURE_FACTOR * 1.0
    assert execution.recheck_choice(model, SHAPE, True, faster_than_the_margin) is False
    assert execution.recheck_choice(model, SHAPE, False, 10.0) is False  # not the mode stored
    assert execution.choose_jit_compile(model, SHAPE) is True and len(calls) == 1
    assert execution.recheck_choice(model, SHAPE, True, 1.01 * faster_than_the_margin) is True
    assert json.loads(cache_home.read_text()) == {}
    timed(graph=1.0, xla=2.0)  # measured again: now the graph
    assert execution.choose_jit_compile(model, SHAPE) is False and len(calls) == 2


def test_predict_rechecks_the_stored_choice(cache_home, monkeypatch):
    """A stored "graph" whose XLA time no real call can reach: after a few full batches the
    runner finds the graph much slower than it, and drops the entry."""
    from keras_vit.runtime.runners import RECHECK_AFTER_BATCHES, KerasRunner

    model = tiny_classifier()
    key = execution._cache_key(model, SHAPE, False)
    execution._store_choice(key, {"mode": "graph", "seconds_per_call": {"graph": 1.0,
                                                                        "xla": 1e-12}})
    runner = KerasRunner(model, SHAPE[0], 10 ** 6, execution="auto", images=1000)
    pixels = np.random.default_rng(0).uniform(0, 255, SHAPE).astype(np.float32)
    for _ in range(RECHECK_AFTER_BATCHES):
        runner._probabilities(pixels)
    assert runner.jit_compile is False and key in json.loads(cache_home.read_text())
    runner._probabilities(pixels)  # the first batch traced: this one completes the recheck
    assert key not in json.loads(cache_home.read_text())


def test_too_little_work_runs_as_a_graph_without_timing(cache_home, timed):
    calls = timed(graph=1.0, xla=0.5)
    assert execution.choose_jit_compile(tiny_classifier(), SHAPE, measure=False) is False
    assert calls == [] and not cache_home.exists()


@pytest.mark.parametrize("contents", ["{not json", "[" * 100_000 + "]" * 100_000, None],
                         ids=["not-json", "100000-deep", "larger-than-its-cap"])
def test_an_unreadable_cache_is_measured_again(cache_home, timed, contents):
    """Being a cache, a file keras_vit cannot read is measured again and rewritten: a broken
    one never stops every later predict or train on the machine."""
    cache_home.parent.mkdir(parents=True)
    if contents is None:
        with open(cache_home, "wb") as f:  # sparse: refused by its size, never read whole
            f.truncate(2 ** 30)
    else:
        cache_home.write_text(contents)
    calls = timed(graph=1.0, xla=0.5)
    assert execution.choose_jit_compile(tiny_classifier(), SHAPE) is True and len(calls) == 1
    assert json.loads(cache_home.read_text())  # replaced by a whole file


def test_with_an_accelerator_auto_leaves_keras_its_own_choice(cache_home, timed, monkeypatch):
    calls = timed(graph=1.0, xla=0.5)
    devices = [tf.config.PhysicalDevice("/physical_device:CPU:0", "CPU"),
               tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda *a: devices)
    assert execution.choose_jit_compile(tiny_classifier(), SHAPE) is None
    assert calls == []


# Timing the training step compiles it under XLA (seconds): slow. The inference timing, the
# same code with training=False, is the default.
@pytest.mark.parametrize("training", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_timing_runs_both_modes_and_they_compute_the_same(training):
    model = tiny_classifier()
    seconds = execution.time_modes(model, SHAPE, training=training, rounds=1)
    assert set(seconds) == {"graph", "xla"}
    assert all(s > 0 and math.isfinite(s) for s in seconds.values())  # no bound on speed
    x = tf.random.uniform(SHAPE, -1, 1, seed=1)
    graph = tf.function(lambda x: model(x, training=False), autograph=False)(x).numpy()
    xla = tf.function(lambda x: model(x, training=False), jit_compile=True,
                      autograph=False)(x).numpy()
    # float32: about 2**-24 relative per rounding, over reductions of at most 256 terms.
    np.testing.assert_allclose(xla, graph, atol=256 * 2.0 ** -24 * np.abs(graph).max() * 8)
    assert not np.array_equal(graph, np.zeros_like(graph))


def test_predict_and_evaluate_run_the_chosen_mode(tmp_path, monkeypatch, cache_home):
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(8):
        Image.fromarray(rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)).save(
            tmp_path / f"{i}.png")
    chosen = []
    choose = execution.choose_jit_compile

    def spy(*args, **kwargs):
        chosen.append(choose(*args, **kwargs))
        return chosen[-1]
    monkeypatch.setattr(execution, "choose_jit_compile", spy)
    model = tiny_classifier()
    results = {mode: np.stack([r.probabilities for r in keras_vit.predict_images(
        model, str(tmp_path), batch_size=4, execution=mode)]) for mode in ("graph", "xla")}
    assert chosen == [False, True]
    np.testing.assert_allclose(results["xla"], results["graph"], atol=1e-5)
    # 8 images, batches of 4: too little work to time, and nothing stored yet: the graph.
    list(keras_vit.predict_images(model, str(tmp_path), batch_size=4, execution="auto"))
    assert chosen[-1] is False and not cache_home.exists()


def test_evaluate_passes_its_mode_on(monkeypatch):
    chosen = []
    monkeypatch.setattr(execution, "choose_jit_compile",
                        lambda model, shape, mode, **kw: chosen.append((shape, mode)) or True)
    model = keras_vit.ViT(VARIANT, image_size=32, classes=10)
    report = keras_vit.evaluate(model, "digits", batch_size=128, execution="xla")
    assert chosen == [((128, 32, 32, 3), "xla")] and report["image_count"] == 360


def test_training_compiles_with_the_chosen_mode(cache_home, timed, tmp_path):
    from keras_vit.data import load_dataset
    from keras_vit.training import run as run_module
    from keras_vit.training.placement import get_placement
    from keras_vit.training.recipes import get_recipe
    from keras_vit.training.settings import Run
    from keras_vit.variants import get_architecture

    calls = timed(graph=1.0, xla=0.5)
    recipe = get_recipe("scratch", batch_size=16, image_size=32, epochs=1)
    run = Run("digits", get_architecture("demo"), None, recipe, "none", "float32",
              str(tmp_path), None, 0, 0)
    model, _ = run_module._compiled_model(run, get_placement("none", run.variant),
                                          load_dataset("digits"))
    assert model.jit_compile is True and calls == [((16, 32, 32, 3), True)]


@pytest.mark.slow
def test_a_digits_run_trains_under_xla(tmp_path):
    """The whole of `train` under XLA (test_training_compiles_with_the_chosen_mode shows the
    mode reaching compile in the default run; this one pays for XLA compiling the step)."""
    report = keras_vit.train("digits", epochs=1, output=str(tmp_path / "run"), execution="xla")
    assert report["jit_compile"] is True
    # No guessed threshold on one epoch's quality (tests/conftest.py, the shared digits run): the
    # accuracy the report states is the one its own confusion matrix holds.
    matrix = np.asarray(report["confusion_matrix"])
    assert matrix.sum() == 360 and report["accuracy"] == pytest.approx(np.trace(matrix) / 360)


@pytest.mark.slow  # test_timing_runs_both_modes_and_they_compute_the_same compiles with XLA by default
def test_export_compiles_the_model_with_xla_only_when_asked(tmp_path, monkeypatch):
    from keras_vit.export import saved_model as export

    model = tiny_classifier()
    pixels = tf.random.uniform((2, 32, 32, 3), 0, 255, seed=2)
    path = keras_vit.export_saved_model(model, str(tmp_path / "xla"), execution="xla")
    signature = tf.saved_model.load(path).signatures["serving_default"]
    np.testing.assert_allclose(signature(images=pixels)["probabilities"].numpy(),
                               tf.nn.softmax(model(pixels / 127.5 - 1)).numpy(), atol=1e-5)
    library = signature.graph.as_graph_def().library.function
    assert sum(f.attr["_XlaMustCompile"].b for f in library if "_XlaMustCompile" in f.attr) == 1
    # Not asked (KERAS_VIT_EXECUTION does not count for an export): a plain graph. The archive
    # is where the choice lands; stop there rather than write a second SavedModel.
    monkeypatch.setenv(execution.ENVIRONMENT_VARIABLE, "xla")
    asked = []

    class Stop(Exception):
        pass

    def archive(*args, jit_compile=False, **kwargs):
        asked.append(jit_compile)
        raise Stop
    monkeypatch.setattr(export, "_archive", archive)
    for mode in (None, "auto", "graph", "xla"):
        with pytest.raises(Stop):
            keras_vit.export_saved_model(model, str(tmp_path / f"stop-{mode}"), execution=mode)
    assert asked == [False, False, False, True]


def test_every_command_that_runs_a_model_takes_the_option(cli):
    for command in ("predict", "evaluate", "train", "export"):
        result = cli([command, "--help"])
        assert "--execution {auto,graph,xla}" in result.stdout, command
    result = cli(["train", "--execution", "jit"])
    assert result.returncode == 2 and "invalid choice: 'jit'" in result.stderr


def test_the_suite_pins_the_mode():
    assert os.environ.get(execution.ENVIRONMENT_VARIABLE) == "graph"
