"""float32 or bfloat16 inference: the precision a model computes in, chosen where the hardware has it.

`precision="bfloat16"` runs a copy of the model under Keras' `mixed_bfloat16` policy: the
same float32 weights, matrix products in bfloat16, the head (and a softmax after it) in
float32 as training under that policy builds it; outputs are float32. It is about 1.6x
faster where the processor multiplies bfloat16 natively (a ViT-B/16 graph on a 2-core
AVX512-BF16 EPYC, docs/performance.md) and slower where it emulates it.

`precision="auto"` (TensorFlow only) chooses bfloat16 only when all of these hold:

- the hardware runs it natively: a CPU with AVX512_BF16 or AMX-BF16, or GPUs of compute
  capability 8.0 or above (`bfloat16_native`);
- it is the fastest: float32 and bfloat16 are timed in each execution mode (graph and XLA,
  as `keras_vit.runtime.execution` times them; on an accelerator, Keras' own choice), and bfloat16
  in its faster mode must beat float32 in its chosen mode by `execution.XLA_MARGIN`;
  the timings are stored with the execution choices (`execution.json`);
- its top-1 class agrees with float32's on at least `MIN_AGREEMENT` of the calibration
  images (the first batch of the images being run), measured on every run.

Otherwise float32, in the mode `keras_vit.runtime.execution` chooses, which is never slower than
float32 as a graph; so is bfloat16 when it is chosen. The choice and what it rested on are
the record (`PrecisionChoice.record`) that predict, evaluate and export write.
"""

import dataclasses

from keras_vit.errors import ArgumentError, PathError
from keras_vit.layer_names import FLOAT32_LAYERS
from keras_vit.runtime.agreement import agreement

__all__ = ["Precision", "PRECISION_TABLE", "PRECISIONS", "TRAINING_PRECISIONS", "POLICY_NAMES",
           "MIN_AGREEMENT", "check_precision", "training_policy", "bfloat16_native",
           "bfloat16_model", "choose_precision", "PrecisionChoice"]


@dataclasses.dataclass(frozen=True)
class Precision:
    """One precision name: the Keras dtype policy it computes under, and where it applies."""

    name: str
    policy: str | None  # None: chosen per model and machine
    inference: bool  # predict, evaluate, export
    training: bool  # train


# The one vocabulary of precisions, for inference and training alike.
PRECISION_TABLE = {p.name: p for p in (
    Precision("float32", "float32", inference=True, training=True),
    Precision("bfloat16", "mixed_bfloat16", inference=True, training=True),
    # float16 needs loss scaling (Keras' LossScaleOptimizer under mixed_float16): training only.
    Precision("float16", "mixed_float16", inference=False, training=True),
    Precision("auto", None, inference=True, training=False),
)}
PRECISIONS = tuple(name for name, p in PRECISION_TABLE.items() if p.inference)
TRAINING_PRECISIONS = tuple(name for name, p in PRECISION_TABLE.items() if p.training)
# Keras' policy names, which train() took before this vocabulary, still taken there; a run
# records its policy (run.json, report.json), so both spellings are the same run.
POLICY_NAMES = {PRECISION_TABLE[name].policy: name for name in ("bfloat16", "float16")}
MIN_AGREEMENT = 0.995  # top-1 agreement with float32 below which auto keeps float32
_KEY_PREFIX = "precision | "  # its entries in execution.json, beside the execution choices


def check_precision(precision):
    """`precision` ("float32" when None), checked."""
    precision = "float32" if precision is None else precision
    if precision not in PRECISIONS:
        raise ArgumentError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}.")
    return precision


def training_policy(precision):
    """The Keras dtype policy train() runs `precision` under: a name of TRAINING_PRECISIONS,
    or the policy's own name (POLICY_NAMES)."""
    name = POLICY_NAMES.get(precision, precision) if isinstance(precision, str) else None
    if name not in TRAINING_PRECISIONS:
        spellings = (*TRAINING_PRECISIONS, *POLICY_NAMES)
        raise ArgumentError(f"precision must be one of {spellings}, got {precision!r}.")
    return PRECISION_TABLE[name].policy


def bfloat16_native():
    """Whether this machine multiplies bfloat16 in hardware: every GPU of compute capability
    8.0 or above (Ampere on) when there are GPUs; else the CPU's AVX512_BF16 or AMX-BF16."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [tf.config.experimental.get_device_details(gpu).get("compute_capability")
                        for gpu in gpus]
        return all(c is not None and tuple(c) >= (8, 0) for c in capabilities)
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16"})


def _cpu_flags():
    from keras_vit._support.files import read_text

    try:
        info = read_text("/proc/cpuinfo", "the processor's description", PathError)
    except (OSError, PathError):  # not Linux: no flags known, so no native bfloat16
        return set()
    return set(next((ln.split(":", 1)[1].split() for ln in info.splitlines()
                     if ln.startswith("flags")), []))


def bfloat16_model(model):
    """A copy of the functional Keras `model` under `mixed_bfloat16` (FLOAT32_LAYERS kept
    float32), holding the same weights; its outputs are cast to float32 by whoever runs it."""
    import keras

    from keras_vit.models.factory import quantized_layers

    if quantized_layers(model):
        raise ArgumentError(f"{getattr(model, 'name', 'this model')} is quantised (int8); "
                            "bfloat16 applies to a float model: give the float32 model it was "
                            "quantised from.")

    def under_bfloat16(layer):
        config = layer.get_config()
        config["dtype"] = "float32" if layer.name in FLOAT32_LAYERS else "mixed_bfloat16"
        return layer.__class__.from_config(config)

    try:
        copy = keras.models.clone_model(model, clone_function=under_bfloat16)
    except (ValueError, TypeError, NotImplementedError) as error:
        raise ArgumentError(f"precision='bfloat16' rebuilds the model under mixed_bfloat16, "
                            f"which {getattr(model, 'name', 'this model')} does not allow "
                            f"({type(error).__name__}: {str(error)[:200]}).") from error
    copy.set_weights(model.get_weights())
    return copy


@dataclasses.dataclass
class PrecisionChoice:
    """What to run: `precision`, its `model` (the bfloat16 copy or the model itself), its
    `jit_compile` (as `execution.choose_jit_compile` returns it), and the `record`."""

    precision: str
    model: object
    jit_compile: object
    record: dict


def choose_precision(model, batch_shape, precision=None, execution=None, calibration=None,
                     measure=True, reference=None):
    """The `PrecisionChoice` for running `model` on `batch_shape` inputs.

    "float32" and "bfloat16" are used as asked, each in the mode `keras_vit.runtime.execution`
    chooses for it. "auto" as the module says: `calibration`, model inputs (the first batch),
    measures the agreement; without `measure` (too little work to pay for the timing) and no
    stored timing, float32. `reference(model, jit_compile, x)`: how the caller runs a model
    (default: a compiled call), for the agreement.
    """
    import keras

    from keras_vit.runtime import execution as executions

    precision = check_precision(precision)
    if precision == "float32" or (precision == "auto" and keras.backend.backend() != "tensorflow"):
        return _float32(model, batch_shape, precision, execution, measure,
                        "asked" if precision == "float32" else "not TensorFlow")
    if precision == "bfloat16":
        copy = bfloat16_model(model)
        return PrecisionChoice("bfloat16", copy, executions.choose_jit_compile(
            copy, batch_shape, execution, measure=measure),
            {"precision": "bfloat16", "asked": "bfloat16", "reason": "asked"})
    if not bfloat16_native():
        return _float32(model, batch_shape, "auto", execution, measure,
                        "bfloat16 is not native on this machine")
    from keras_vit.models.factory import quantized_layers

    if quantized_layers(model):
        return _float32(model, batch_shape, "auto", execution, measure,
                        "the model is quantised (int8)")
    key = _KEY_PREFIX + executions._cache_key(model, batch_shape, False)
    seconds = (executions._read_choices().get(key) or executions._MEASURED.get(key) or {})
    seconds = seconds.get("seconds_per_call") if isinstance(seconds, dict) else None
    copy = bfloat16_model(model)
    if not _complete(seconds):
        if not measure:
            return _float32(model, batch_shape, "auto", execution, measure,
                            "too few images to time bfloat16 against float32")
        seconds = time_precisions({"float32": model, "bfloat16": copy}, batch_shape,
                                  _modes(execution))
        executions._store_choice(key, {"seconds_per_call": seconds})
    float32_mode = _faster_mode(seconds, "float32")
    bfloat16_mode = _faster_mode(seconds, "bfloat16")
    record = {"asked": "auto", "native": True, "seconds_per_call": seconds}
    faster = seconds[f"bfloat16 {bfloat16_mode}"] < \
        (1 - executions.XLA_MARGIN) * seconds[f"float32 {float32_mode}"]
    if not faster:
        return _timed(model, float32_mode, "float32", record, "bfloat16 is not faster here")
    if calibration is None:
        return _timed(model, float32_mode, "float32", record,
                      "no calibration images to measure the agreement on")
    run = reference or _compiled_outputs
    from keras_vit.models.vit import has_softmax_head

    measured = agreement(run(model, _jit(float32_mode), calibration),
                         run(copy, _jit(bfloat16_mode), calibration), has_softmax_head(model))
    record["calibration_agreement"] = measured
    if measured["top1_agreement"] < MIN_AGREEMENT:
        return _timed(model, float32_mode, "float32", record,
                      f"top-1 agreement with float32 below {MIN_AGREEMENT}")
    return _timed(copy, bfloat16_mode, "bfloat16", record, "native, faster and in agreement")


def _float32(model, batch_shape, asked, execution, measure, reason):
    from keras_vit.runtime.execution import choose_jit_compile

    return PrecisionChoice("float32", model,
                           choose_jit_compile(model, batch_shape, execution, measure=measure),
                           {"precision": "float32", "asked": asked, "reason": reason})


def _timed(model, mode, precision, record, reason):
    return PrecisionChoice(precision, model, _jit(mode),
                           {"precision": precision, **record, "mode": mode, "reason": reason})


def _modes(execution):
    """The execution modes to time: graph and XLA on a CPU alone; the one asked for; or on
    an accelerator or under a strategy, Keras' own choice ("keras")."""
    import tensorflow as tf

    from keras_vit.runtime.execution import check_execution

    execution = check_execution(execution)
    if any(d.device_type != "CPU" for d in tf.config.list_physical_devices()) \
            or tf.distribute.has_strategy():
        return ("keras",)
    return ("graph", "xla") if execution == "auto" else (execution,)


def _complete(seconds):
    """Whether a stored entry times both precisions, every timing a finite positive number
    (else both are measured again)."""
    from keras_vit.runtime.execution import stored_timings

    if stored_timings(seconds) is None:
        return False
    names = [key.split(" ") for key in seconds]
    return all(len(name) == 2 and name[0] in ("float32", "bfloat16")
               and name[1] in ("graph", "xla", "keras") for name in names) \
        and {name[0] for name in names} == {"float32", "bfloat16"}


def _faster_mode(seconds, precision):
    """The mode `keras_vit.runtime.execution` would choose from these timings: XLA only when it beats
    the graph by its margin."""
    from keras_vit.runtime.execution import XLA_MARGIN

    modes = {key.split(" ", 1)[1]: value for key, value in seconds.items()
             if key.startswith(precision + " ")}
    if "graph" in modes and "xla" in modes:
        return "xla" if modes["xla"] < (1 - XLA_MARGIN) * modes["graph"] else "graph"
    return min(modes, key=modes.get)


def _jit(mode):
    return {"graph": False, "xla": True}.get(mode)  # "keras": None, Keras' own choice


def _compiled_outputs(model, jit_compile, x):
    import keras
    import numpy as np

    from keras_vit.runtime.execution import compiled_forward

    return np.asarray(keras.ops.convert_to_numpy(compiled_forward(model, jit_compile)(x)),
                      np.float32)


def time_precisions(models, batch_shape, modes, rounds=None):
    """The fastest seconds per forward call of each of `models` ({precision: model}) in each
    of `modes`, keyed "<precision> <mode>", on random `batch_shape` inputs, timed as
    `keras_vit.runtime.execution.fastest_calls` times (interleaved rounds)."""
    import tensorflow as tf

    from keras_vit.runtime.execution import ROUNDS, fastest_calls

    images = tf.random.uniform(batch_shape, -1.0, 1.0, seed=0)
    calls = {f"{precision} {mode}": _call(model, mode)
             for precision, model in models.items() for mode in modes}
    return fastest_calls(calls, images, rounds or ROUNDS)


def _call(model, mode):
    import keras

    from keras_vit.runtime.execution import compiled_forward

    forward = compiled_forward(model, _jit(mode))
    return lambda x: keras.ops.convert_to_numpy(forward(x))
