"""Graph or XLA: how TensorFlow runs a model on a CPU, chosen by timing both on this machine.

On TensorFlow a Keras model runs as a graph (`tf.function`) or compiled by XLA
(`jit_compile=True`), and on a CPU-only machine Keras always picks the graph. Neither is
faster everywhere: ViT-B/16 at batch 8 ran 1.2x faster under XLA on an AMD EPYC with
AVX2 only, and 1-5% slower under XLA on one with AVX-512 (docs/performance.md). So for
`execution="auto"` keras_vit times both on the model and batch shape at hand (a warm-up
and seven interleaved calls each, the fastest of each kept: load only ever slows a call)
and remembers the answer for this machine, these library versions and this shape in
`$KERAS_HOME/keras_vit/execution.json`. A later run whose calls in the mode chosen are much
slower than the other mode's stored time drops the entry, so the run after it measures
again (`recheck_choice`): one disturbed timing does not fix the slower mode for good.

`execution` is "auto" (the default), "graph" or "xla"; the environment variable
`KERAS_VIT_EXECUTION` changes the default. It decides only on TensorFlow with no
accelerator: with a GPU or TPU, or under a `tf.distribute` strategy, "auto" leaves Keras'
own choice (XLA on accelerators, the graph under a strategy), and on JAX (always
`jax.jit`) and torch it has no effect.
"""

import json
import math
import os
import time

from keras_vit._support.files import read_text
from keras_vit._support.json_files import read_json
from keras_vit.errors import ArgumentError, PathError

__all__ = ["EXECUTION_MODES", "check_execution", "choose_jit_compile", "compiled_forward",
           "time_modes", "fastest_calls", "recheck_choice"]

EXECUTION_MODES = ("auto", "graph", "xla")
ENVIRONMENT_VARIABLE = "KERAS_VIT_EXECUTION"
# XLA is chosen only when it beats the graph by this much: a smaller lead is inside the
# noise of a few calls, and XLA compiles again for every new batch shape (the last, shorter
# batch of a run).
XLA_MARGIN = 0.03
# Timed calls per mode, interleaved, after one warm-up call each; the fastest of each is kept.
# Load (another process, a burst of I/O) only adds time, so the minimum of several rounds is
# what the machine can do, where a median of three was moved by one disturbance lasting two.
ROUNDS = 7
# A later run's calls in the chosen mode this many times slower than the other mode's stored
# time mean the stored choice was measured under load (the Performance page saw 0.73x against
# 1.10x): the entry is dropped and measured again. Wide, so that a run under load itself
# costs at most one more measurement.
REMEASURE_FACTOR = 1.5
_clock = time.perf_counter  # what the timings read (a test plants its own)
_MEASURED = {}  # this process's choices, for when the cache file cannot be written


def check_execution(execution=None):
    """`execution`, or the environment's default (else "auto"), checked."""
    if execution is None:
        execution = os.environ.get(ENVIRONMENT_VARIABLE) or "auto"
        origin = f"{ENVIRONMENT_VARIABLE}={execution!r}"
    else:
        origin = f"execution={execution!r}"
    if execution not in EXECUTION_MODES:
        raise ArgumentError(f"{origin} is not one of {', '.join(EXECUTION_MODES)}.")
    return execution


def choose_jit_compile(model, batch_shape, execution=None, training=False, measure=True):
    """`jit_compile` for running `model` on `batch_shape` inputs: True (XLA), False (graph),
    or None (leave Keras' own choice: not TensorFlow on a CPU alone, or a strategy).

    For "auto", a choice already measured for this machine, versions and shape is reused;
    otherwise, with `measure`, both modes are timed now (a few of the model's calls each)
    and the answer is stored; without `measure` (too little work to pay for the timing),
    the graph, Keras' CPU default.
    """
    execution = check_execution(execution)
    import keras

    if keras.backend.backend() != "tensorflow":
        return None
    if execution != "auto":
        return execution == "xla"
    import tensorflow as tf

    if any(d.device_type != "CPU" for d in tf.config.list_physical_devices()) \
            or tf.distribute.has_strategy():
        return None
    key = _cache_key(model, batch_shape, training)
    known = _read_choices().get(key) or _MEASURED.get(key)
    if isinstance(known, dict) and known.get("mode") in ("graph", "xla"):
        return known["mode"] == "xla"
    if not measure:
        return False
    seconds = time_modes(model, batch_shape, training)
    mode = "xla" if seconds["xla"] < (1 - XLA_MARGIN) * seconds["graph"] else "graph"
    _store_choice(key, {"mode": mode, "seconds_per_call": seconds})
    return mode == "xla"


def compiled_forward(model, jit_compile):
    """`model`'s inference call, images (an array, or a NaFlex model's dict) to outputs, as
    keras_vit's own loops run it: on TensorFlow a `tf.function`, as a graph
    (`jit_compile=False`) or under XLA (True), or Keras' `predict_on_batch` (None, Keras'
    choice); on JAX a bare `jax.jit` of `model.stateless_call`. Keras' predict step around
    the same XLA program cost 5-8% of a ViT-B/16 call on an H200 (docs/performance.md), and
    where keras_vit owns the loop nothing of it is needed. The variables are read at each
    call, as `predict_on_batch` reads them: a later `set_weights` is seen, not a stale copy."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        forward = jax.jit(lambda trainable, fixed, images:
                          model.stateless_call(trainable, fixed, images, training=False)[0])
        return lambda images: forward([v.value for v in model.trainable_variables],
                                      [v.value for v in model.non_trainable_variables], images)
    if jit_compile is None:
        return model.predict_on_batch
    import tensorflow as tf

    forward = tf.function(lambda images: model(images, training=False),
                          jit_compile=jit_compile, reduce_retracing=True, autograph=False)
    return lambda images: forward(tf.nest.map_structure(tf.convert_to_tensor, images))


def time_modes(model, batch_shape, training=False, rounds=ROUNDS):
    """The fastest seconds per call of `model` on random `batch_shape` inputs, as a graph and
    under XLA: the forward pass, or for `training` the forward and backward passes (no
    weight changes). `batch_shape` is a shape, or a NaFlex model's {"patches": shape,
    "grid": shape}, whose grid is then the whole budget's (rows x cols filling it)."""
    calls = {mode: _call(model, training, jit_compile=mode == "xla") for mode in ("graph", "xla")}
    return fastest_calls(calls, _random_inputs(batch_shape), rounds)


def _random_inputs(batch_shape):
    import tensorflow as tf

    if not isinstance(batch_shape, dict):
        return tf.random.uniform(batch_shape, -1.0, 1.0, seed=0)
    from keras_vit.layer_names import GRID, PATCHES

    batch, tokens = batch_shape[PATCHES][:2]
    rows = math.isqrt(tokens)
    return {PATCHES: tf.random.uniform(batch_shape[PATCHES], -1.0, 1.0, seed=0),
            GRID: tf.constant([[rows, tokens // rows]] * batch, tf.int32)}


def fastest_calls(calls, inputs, rounds=ROUNDS):
    """{name: the fastest seconds of `rounds` calls} of `calls` ({name: function of `inputs`}),
    each called once first (traces, compiles, allocates), then in turn, round after round,
    so that a change of load hits every one alike."""
    for call in calls.values():
        call(inputs)
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = _clock()
            call(inputs)
            times[name].append(_clock() - start)
    return {name: min(seconds) for name, seconds in times.items()}


def stored_timings(seconds):
    """An execution.json entry's {name: seconds per call}, or None unless every timing is a
    finite positive number (the file is the user's: an edited or torn entry is measured again,
    never read)."""
    if not isinstance(seconds, dict) or not seconds:
        return None
    for name, value in seconds.items():
        if not isinstance(name, str) or isinstance(value, bool) \
                or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            return None
    return seconds


def recheck_choice(model, batch_shape, jit_compile, seconds, training=False):
    """A later run's fastest `seconds` per call of `model` on `batch_shape` in the mode it ran
    (`jit_compile`): when the stored choice is that mode and `seconds` exceed
    REMEASURE_FACTOR times the other mode's stored time, the entry is dropped, and the next
    "auto" measures again. Returns whether it was dropped."""
    key = _cache_key(model, batch_shape, training)
    choice = _read_choices().get(key) or _MEASURED.get(key)
    mode = "xla" if jit_compile else "graph"
    if not isinstance(choice, dict) or choice.get("mode") != mode:
        return False
    other = (stored_timings(choice.get("seconds_per_call")) or {}).get(
        "graph" if jit_compile else "xla")
    if other is None or not seconds > REMEASURE_FACTOR * other:
        return False
    _store_choice(key, None)
    return True


def _call(model, training, jit_compile):
    import tensorflow as tf

    if not training:
        forward = tf.function(lambda x: model(x, training=False), jit_compile=jit_compile,
                              autograph=False)
        return lambda x: forward(x).numpy()

    @tf.function(jit_compile=jit_compile, autograph=False)
    def gradients(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.cast(model(x, training=True), tf.float32) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    return lambda x: [g.numpy() for g in gradients(x) if g is not None]


def _cache_key(model, batch_shape, training):
    """What the faster mode depends on: the CPU and its instruction sets, the cores this
    process may use, the TensorFlow and Keras releases, and the computation's shape."""
    import keras
    import tensorflow as tf

    cpu, flags = "unknown CPU", []
    try:
        info = read_text("/proc/cpuinfo", "the processor's description", PathError)
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                    if ln.startswith("model name")), cpu)
        flags = sorted(set(next((ln.split(":", 1)[1].split() for ln in info.splitlines()
                                 if ln.startswith("flags")), []))
                       & {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    except OSError:  # not Linux: the processor name alone
        import platform
        cpu = platform.processor() or cpu
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # The layers' policies, not the global one: a float32 model and its mixed_bfloat16 copy
    # (keras_vit.runtime.precision) are two computations.
    policy = "+".join(sorted({layer.dtype_policy.name for layer in getattr(model, "layers", ())
                              if hasattr(layer, "dtype_policy")})) \
        or keras.mixed_precision.dtype_policy().name
    layers = len(getattr(model, "layers", ()))
    shapes = batch_shape if isinstance(batch_shape, dict) else {"": batch_shape}
    shape = " ".join(f"{name} {'x'.join(str(int(d)) for d in dims)}".strip()
                     for name, dims in sorted(shapes.items()))
    return (f"{cpu} [{' '.join(flags)}] {cores} cores | tensorflow {tf.__version__} "
            f"keras {keras.__version__} | {type(model).__name__} {model.count_params()} "
            f"parameters {layers} layers {policy} | {shape} {'training' if training else 'inference'}")


def _cache_path():
    from keras_vit._support.paths import cache_dir

    return os.path.join(cache_dir(), "execution.json")


def _read_choices():
    try:
        choices = read_json(_cache_path(), "a cache of execution choices", PathError)
    except (OSError, PathError):  # none yet, or unreadable (too large, too deep): measure again
        return {}
    return choices if isinstance(choices, dict) else {}


def _store_choice(key, choice):
    """Adds one measured choice (None: drops it). Two processes measuring at once may each keep only their
    own entry; the lost one is measured again next time, never read torn (atomic write)."""
    from keras_vit.atomic import atomic_open

    choices = _read_choices()
    if choice is None:  # dropped: measured again next time
        _MEASURED.pop(key, None)
        choices.pop(key, None)
    else:
        _MEASURED[key] = choice
        choices[key] = choice
    try:
        os.makedirs(os.path.dirname(_cache_path()), exist_ok=True)
        with atomic_open(_cache_path(), "w", encoding="utf-8") as f:
            json.dump(choices, f, indent=1, sort_keys=True)
    except OSError:  # a read-only home: the choice holds for this process only
        pass
