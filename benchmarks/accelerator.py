"""keras_vit on JAX beside timm on one NVIDIA GPU: inference and training throughput per precision.

    python -m benchmarks.accelerator --output DIR          # five ViT-B models, batch 64, then training
    python -m benchmarks.accelerator --models vit_base_patch16_224,vit_large_patch16_384 \
        --libraries keras_vit,keras_vit-jit,timm,timm-compiled --memory   # the GPU targets
    python -m benchmarks.accelerator --tiny --allow-cpu    # width 64, depth 1, batch 2: checks it runs

Runs on the JAX backend and needs no TensorFlow. Per model, timm builds its architecture
with random weights (every parameter drawn), writes the state dict as safetensors, and
keras_vit loads that file through its timm rows, so both compute the same function; their
float32 outputs must agree within the parity tests' bound or the model is recorded as
failing parity and not timed. Each model runs at its own resolution (224 px; 384 for
`vit_large_patch16_384`) unless --image-size says otherwise.

Three settings, each for both libraries:

- float32: full float32 products in both (`jax.default_matmul_precision("float32")`;
  torch's `backends.cuda.matmul.allow_tf32` and `backends.cudnn.allow_tf32` off). Neither
  library's default: JAX's lets float32 products use TF32 on Ampere and later GPUs, and
  torch's lets its convolutions (the patch embedding) use TF32.
- tf32: TF32 products allowed in both ("tensorfloat32"; both torch switches on).
- bfloat16: keras_vit's `precision="bfloat16"` (`keras_vit.runtime.precision.bfloat16_model`: the
  model under `mixed_bfloat16`, its head float32) and timm under
  `torch.autocast(device, torch.bfloat16)`; TF32 allowed in both, as in the tf32 setting.

keras_vit is timed through the call keras_vit's own predict and evaluate loops make
(`keras_vit.runtime.execution.compiled_forward`: on JAX a bare `jax.jit` of
`model.stateless_call`, without Keras' predict step around it; runs before 2026-11-30 timed
`model.predict_on_batch`); timm in `eval()` under `torch.inference_mode()`. Inputs are on the
GPU before timing (no host-to-device copy is timed); both calls end with the logits in host
memory (keras_vit's copied with `np.asarray`; timm's call copies its output with `.cpu()`), and
the GPU is synchronised before each timed call. The first call of each is timed apart
(keras_vit: tracing and XLA compilation), a second is an untimed warm-up, then rounds call
each (setting, library) once in turn (keras_vit, timm, keras_vit, timm, ...), so that a
change in clocks or load hits both alike; tables give medians and keras_vit / timm.

--libraries adds two more columns to the same rounds: `keras_vit-jit`, the same model as a
bare `jax.jit` of `model.stateless_call` written out here (keras_vit's own call now: the
column checks that, and compares with the runs that timed Keras' predict step), and
`timm-compiled`, timm's model under `torch.compile` (`--compile-backend`,
inductor by default) in the tf32 and bfloat16 settings, where GPUs run. --memory records
each call's peak device memory (benchmarks/device_memory.py: torch's allocator peak; for
keras_vit the XLA program's buffer assignment, read from keras_vit-jit's program and
Keras' train step).

Then one training step per --train-models (`build_training`), timed the same way in the tf32
and bfloat16 settings. Results are rewritten after each model, so that a run stopped early
keeps what it measured; `--budget-s` starts no model that the time left would not fit.
"""

import argparse
import contextlib
import gc
import io
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as the benchmark; importing it (its tests) changes nothing
    os.environ.setdefault("KERAS_BACKEND", "jax")
    # JAX takes 75% of the GPU's memory at start by default; torch shares this process.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np

# title in the tables: timm's architecture name, which keras_vit also accepts.
MODELS = {
    "ViT-B/16": "vit_base_patch16_224",
    "DINOv2-B/14": "vit_base_patch14_dinov2",
    "SigLIP-B/16": "vit_base_patch16_siglip_224",
    # OpenAI's CLIP uses QuickGELU: timm's vit_base_patch16_clip_224 is the GELU model of
    # other CLIP releases, which keras_vit's CLIP-B/16 row does not build.
    "CLIP-B/16": "vit_base_patch16_clip_quickgelu_224",
    "DeiT-B/16 distilled": "deit_base_distilled_patch16_224",
    "ViT-L/16 384": "vit_large_patch16_384",
}
DEFAULT_MODELS = tuple(MODELS.values())[:5]  # the ViT-B models; L/16 at 384 on request
IMAGE_SIZES = {"vit_large_patch16_384": 384}  # each model's own resolution; 224 otherwise
SETTINGS = ("float32", "tf32", "bfloat16")
# keras_vit and timm are always run (the ratio is theirs); --libraries adds the others.
LIBRARIES = ("keras_vit", "keras_vit-jit", "timm", "timm-compiled")
# Whose float32 outputs a library's agreement is measured against (its own where it has them).
FLOAT32_OF = {"keras_vit-jit": "keras_vit", "timm-compiled": "timm"}
# torch.compile compiles anew per precision (its guards include allow_tf32 and autocast):
# it runs where GPUs are used, not in full float32.
COMPILED_SETTINGS = ("tf32", "bfloat16")
# The parity tests' bound (tests/checkpoints/formats/test_timm_families.py), relative to the largest
# output: float32 rounding is ~1e-7 relative per operation, a wrong mapping 1e-3 or more.
from benchmarks.accelerator_tables import to_markdown  # noqa: E402
from benchmarks.accelerator_training import (  # noqa: E402
    DOUBLINGS,
    LARGEST_BATCH_SETTING,
    TRAIN_SETTINGS,
    largest_batch,
    training_batch,
    training_steps,
)
from benchmarks.families import RELATIVE_TOLERANCE  # noqa: E402

TINY = {"depth": 1, "width": 64, "heads": 2}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.accelerator",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="benchmarks/results",
                        help="folder for accelerator.json and accelerator.md")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated timm names, of {', '.join(MODELS.values())} "
                             f"(default: the five ViT-B models)")
    parser.add_argument("--batch", type=int, default=None, help="images per call (default 64, tiny 2)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed rounds per model (default 20, tiny 1)")
    parser.add_argument("--image-size", type=int, default=None,
                        help="default: each model's own (224; 384 for vit_large_patch16_384); "
                             "tiny 112")
    parser.add_argument("--tiny", action="store_true",
                        help="width 64, 2 heads, depth 1, 112 px, batch 2, one round: checks it works")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run without a GPU (for --tiny: the numbers mean nothing)")
    parser.add_argument("--train-models", default="vit_base_patch16_224,vit_large_patch16_384",
                        help="comma-separated timm names whose training step is timed after "
                             "inference, each at its row's batch (B/16 64, L/16 384 16; --batch "
                             "overrides) (default both; none skips training)")
    parser.add_argument("--remat", action="store_true",
                        help="keras_vit's training with every encoder block rematerialised "
                             "(train's --remat)")
    parser.add_argument("--largest-batch", action="store_true",
                        help="after each training row, the largest batch (doubling from the "
                             "row's, 4 times at most) each library's bfloat16 step runs at")
    parser.add_argument("--libraries", default="keras_vit,timm",
                        help=f"comma-separated, of {', '.join(LIBRARIES)} (default keras_vit,"
                             f"timm; both are always run)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile's backend for timm-compiled (default inductor)")
    parser.add_argument("--memory", action="store_true",
                        help="record each call's peak device memory (benchmarks/device_memory.py)")
    parser.add_argument("--attention", choices=tuple(FORCED_ATTENTION), default="auto",
                        help="keras_vit's attention path: auto (keras_vit's own choice, "
                             "keras_vit/layers/attention_kernels.py: on JAX GPUs, cuDNN's fused "
                             "kernel, in training on tokens padded to a multiple of 64, and "
                             "float32 training in query blocks), or forced: fused (keras.ops."
                             "dot_product_attention), explicit (matmul-softmax-matmul), padded "
                             "or chunked")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="start no further model once this many seconds have passed, or when "
                             "the last model's time would overrun them (default 420)")
    return parser.parse_args(argv)


def check_backend():
    """Raises SystemExit with one line unless Keras runs on JAX."""
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit(f"benchmarks.accelerator runs on the JAX backend; KERAS_BACKEND is "
                         f"{keras.backend.backend()!r} (set KERAS_BACKEND=jax).")


def check_devices(allow_cpu):
    """(JAX's device, torch's device name) to run on: the first GPU both see; the CPU only
    with `allow_cpu`. Raises SystemExit with one line when there is none."""
    import jax
    import torch

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if gpus and torch.cuda.is_available():
        return gpus[0], "cuda"
    if allow_cpu:
        return jax.devices("cpu")[0], "cpu"
    seen = f"JAX sees {', '.join(sorted({d.platform for d in jax.devices()}))}, torch " \
           f"{'sees' if torch.cuda.is_available() else 'does not see'} CUDA"
    raise SystemExit(f"benchmarks.accelerator needs a GPU visible to JAX and torch ({seen}); "
                     f"--allow-cpu runs it anyway (for --tiny).")


@contextlib.contextmanager
def setting(name):
    """Both libraries' matrix-product precision for `name` (float32: full; else TF32 allowed)."""
    import jax
    import torch

    tf32 = name != "float32"
    previous = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        with jax.default_matmul_precision("tensorfloat32" if tf32 else "float32"):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def build_models(architecture, image_size, tiny, folder, torch_device):
    """(keras_vit model, timm model on `torch_device`) computing the same function
    (benchmarks/families.py `random_timm_pair`)."""
    from benchmarks.families import random_timm_pair

    timm_kwargs = {"depth": TINY["depth"], "embed_dim": TINY["width"], "num_heads": TINY["heads"]} \
        if tiny else {}
    changes = {"depth": TINY["depth"], "width": TINY["width"], "heads": TINY["heads"],
               "mlp_dim": 4 * TINY["width"]} if tiny else {}
    ours, theirs = random_timm_pair(architecture, image_size, folder, timm_kwargs, changes)
    return ours, theirs.to(torch_device)


# --attention: None leaves each attention layer keras_vit's choice (`use_fused_attention`).
FORCED_ATTENTION = {"auto": None, "fused": True, "explicit": False, "padded": "padded",
                    "chunked": "chunked"}
attention_setting = None


def force_attention(*models):
    """Sets every attention layer of `models` to the --attention path (before the first call
    compiles it); "auto" changes nothing."""
    from keras_vit.layers import MultiHeadSelfAttention

    for model in models:
        for layer in model._flatten_layers():
            if isinstance(layer, MultiHeadSelfAttention):
                layer.fused_attention = attention_setting
    return models


def build_pair(architecture, image_size, tiny, folder, images, jax_device, torch_device,
               options):
    """(calls, memory): calls is {library: {setting: call}}, forward passes on `images` each
    returning float32 NumPy outputs, for keras_vit, timm and the `options["libraries"]`;
    memory is {library: {setting: reading}}, each returning a benchmarks.device_memory
    record (empty unless `options["memory"]`)."""
    import jax
    import torch

    from benchmarks.device_memory import torch_peak, xla_peak
    from keras_vit.runtime.execution import compiled_forward
    from keras_vit.runtime.precision import bfloat16_model

    ours, theirs = build_models(architecture, image_size, tiny, folder, torch_device)
    ours, ours_bf16 = force_attention(ours, bfloat16_model(ours))
    x_jax = jax.device_put(images, jax_device)
    x_torch = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))).to(torch_device)
    keras_models = {"float32": ours, "tf32": ours, "bfloat16": ours_bf16}

    def keras_call(model):
        forward = compiled_forward(model, None)
        return lambda: np.asarray(forward(x_jax), np.float32)

    def jit_forward(model):
        """The model as a bare jax.jit of its stateless call, and a function giving its
        arguments: the variables' arrays read at each call, as Keras' predict_on_batch reads
        them (Keras may replace them between calls)."""
        forward = jax.jit(lambda t, n, x: model.stateless_call(t, n, x, training=False)[0])
        return forward, lambda: ([v.value for v in model.trainable_variables],
                                 [v.value for v in model.non_trainable_variables], x_jax)

    def jit_call(model):
        forward, arguments = jit_forward(model)
        return lambda: np.asarray(forward(*arguments()), np.float32)

    def jit_memory(model):
        forward, arguments = jit_forward(model)
        return lambda: xla_peak(forward.lower(*arguments()).compile())

    def timm_call(module, bfloat16):
        def call():
            with torch.inference_mode(), torch.autocast(torch_device, torch.bfloat16,
                                                        enabled=bfloat16):
                return module(x_torch).float().cpu().numpy()
        return call

    compiled = torch.compile(theirs, backend=options["compile_backend"]) \
        if "timm-compiled" in options["libraries"] else None
    makers = {
        "keras_vit": lambda s: keras_call(keras_models[s]),
        "keras_vit-jit": lambda s: jit_call(keras_models[s]),
        "timm": lambda s: timm_call(theirs, s == "bfloat16"),
        "timm-compiled": lambda s: timm_call(compiled, s == "bfloat16"),
    }
    calls = {library: {s: makers[library](s) for s in _settings_of(library, SETTINGS)}
             for library in _libraries(options)}
    memory = {}
    if options["memory"]:
        # keras_vit's is the program Keras' predict step jits: the model's stateless call.
        memory = {library: {s: (jit_memory(keras_models[s]) if library == "keras_vit"
                                else (lambda c=calls[library][s]: torch_peak(c, torch_device)))
                            for s in by_setting}
                  for library, by_setting in calls.items() if library != "keras_vit-jit"}
    return calls, memory


def _libraries(options):
    """keras_vit and timm, then the others asked for, in LIBRARIES' order (the rounds' order)."""
    return [lib for lib in LIBRARIES if lib in ("keras_vit", "timm") or lib in options["libraries"]]


def _settings_of(library, settings):
    return [s for s in settings if library != "timm-compiled" or s in COMPILED_SETTINGS]


def build_training(architecture, image_size, tiny, folder, images, jax_device, torch_device,
                   options):
    """(steps, memory) as build_pair's, of one training step on `images` in every setting
    (benchmarks/accelerator_training.py `training_steps`)."""
    ours, theirs = build_models(architecture, image_size, tiny, folder, torch_device)
    labels = np.arange(len(images)) % theirs.num_classes
    return training_steps(ours, theirs, images, labels, jax_device, torch_device,
                          {**options, "prepare": force_attention})


def search_largest_batch(architecture, image_size, tiny, folder, batch, jax_device,
                         torch_device, options):
    """{library: accelerator_training.largest_batch's answer} of each training library's
    LARGEST_BATCH_SETTING step, each batch tried on a fresh build."""
    def runs_at(library):
        def run(b):
            images = np.random.default_rng(0).uniform(-1, 1, (b, image_size, image_size, 3))
            steps, _ = build_training(architecture, image_size, tiny, folder,
                                      images.astype(np.float32), jax_device, torch_device,
                                      {**options, "memory": False})
            try:
                with setting(LARGEST_BATCH_SETTING):
                    steps[library][LARGEST_BATCH_SETTING]()
            finally:
                del steps
                _release()
        return run

    libraries = [lib for lib in _libraries(options) if lib != "keras_vit-jit"]
    doublings = 1 if tiny else DOUBLINGS  # --tiny: that the search runs, not how far
    return {library: largest_batch(runs_at(library), batch, doublings) for library in libraries}


def _synchronize(torch_device):
    import torch

    if torch_device == "cuda":
        torch.cuda.synchronize()


def _timed(call, torch_device):
    """(seconds, outputs) of one call, the GPU idle before and after it."""
    _synchronize(torch_device)
    start = time.perf_counter()
    out = call()  # NumPy on the host: both libraries have finished with the GPU
    _synchronize(torch_device)
    return time.perf_counter() - start, out


def relative_difference(a, b):
    """max |a - b| over max |b|: the parity tests' measure."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def first_calls(calls, torch_device):
    """({key: seconds}, {key: outputs}, {key: error}) of each call's first run, keyed
    "library setting". A call that raises is recorded, not fatal: one run on a lent machine
    must not lose every number to one failing kernel."""
    first, outputs, errors = {}, {}, {}
    for library, by_setting in calls.items():
        for name, call in by_setting.items():
            key = f"{library} {name}"
            try:
                with setting(name):
                    first[key], outputs[key] = _timed(call, torch_device)
            except Exception as error:  # noqa: BLE001 - recorded, and the run goes on
                errors[key] = one_line(error)
    return first, outputs, errors


def time_rounds(calls, names, batch, repeats, torch_device, outputs):
    """{"images_per_s": {setting: {library: summary}}, "ratio": {setting: keras_vit / timm},
    "ratio_to": {setting: {library: keras_vit / library}}} after an untimed warm-up of each
    call; each round runs every setting of `names` once, and in it every library whose first
    call of that setting gave `outputs`, in `calls`' order (keras_vit first)."""
    from benchmarks.run import summarize

    ran = {name: [lib for lib in calls if f"{lib} {name}" in outputs] for name in names}
    for library in calls:
        for name in names:
            if library in ran[name]:
                with setting(name):
                    _timed(calls[library][name], torch_device)
    rates = {name: {library: [] for library in ran[name]} for name in names}
    for _ in range(repeats):
        for name in names:
            with setting(name):
                for library in ran[name]:
                    seconds, _ = _timed(calls[library][name], torch_device)
                    rates[name][library].append(batch / seconds)

    def ratio(name, other):  # per round, then the median: one round saw one clock and load
        return statistics.median(k / o for k, o in zip(rates[name]["keras_vit"],
                                                       rates[name][other]))

    return {"images_per_s": {name: {library: summarize(r) for library, r in by_library.items()}
                             for name, by_library in rates.items()},
            "ratio": {name: ratio(name, "timm") for name in names},
            "ratio_to": {name: {lib: ratio(name, lib) for lib in ran[name] if lib != "keras_vit"}
                         for name in names}}


def _both(calls, outputs, names):
    """The settings of `names` whose first call ran in keras_vit and in timm."""
    return [name for name in names if all(f"{lib} {name}" in outputs
                                          for lib in ("keras_vit", "timm"))]


def read_memory(memory):
    """{"library setting": record or {"error": ...}} of each reading in `memory`, in its setting."""
    peaks = {}
    for library, by_setting in memory.items():
        for name, read in by_setting.items():
            try:
                with setting(name):
                    peaks[f"{library} {name}"] = read()
            except Exception as error:  # noqa: BLE001 - recorded, as a failing call is
                peaks[f"{library} {name}"] = {"error": one_line(error)}
    return peaks


def measure_model(calls, batch, repeats, torch_device, memory=None):
    """First-call seconds, parity, agreements, peak memory (when `memory` has readings) and
    per-round images/s of every (library, setting) of `calls`. A setting that failed in
    keras_vit or timm is not timed; without both float32 outputs there is no parity check and
    nothing is timed."""
    first, outputs, errors = first_calls(calls, torch_device)
    row = {"first_call_seconds": first, **({"errors": errors} if errors else {})}
    a, b = outputs.get("keras_vit float32"), outputs.get("timm float32")
    if a is None or b is None:
        row["parity_relative_difference"] = None
        row["parity_failed"] = "a float32 call failed (see errors); not timed"
        return row
    row["outputs_per_image"] = int(np.prod(b.shape[1:]))
    row["parity_relative_difference"] = relative_difference(a, b) if a.shape == b.shape else None
    if a.shape != b.shape or not row["parity_relative_difference"] <= RELATIVE_TOLERANCE:
        row["parity_failed"] = (f"keras_vit {a.shape} and timm {b.shape} float32 outputs differ "
                                f"by {row['parity_relative_difference']} of the largest, over "
                                f"the bound {RELATIVE_TOLERANCE}; not timed")
        return row
    from keras_vit.runtime.agreement import agreement

    timed = _both(calls, outputs, SETTINGS)
    # Against the library's own full-float32 outputs (keras_vit-jit's and timm-compiled's:
    # keras_vit's and timm's); nonzero tf32 differences on a GPU also show that the setting
    # reached the library.
    row["agreement_with_float32"] = {
        library: {name: agreement(outputs[f"{FLOAT32_OF.get(library, library)} float32"],
                                  outputs[f"{library} {name}"])
                  for name in timed if name != "float32" and f"{library} {name}" in outputs}
        for library in calls}
    if memory:
        row["peak_memory"] = read_memory(memory)
    return {**row, **time_rounds(calls, timed, batch, repeats, torch_device, outputs)}


def measure_training(steps, batch, repeats, torch_device, memory=None):
    """First-step seconds and losses (the same weights and labels: the first losses should
    agree to the setting's rounding), peak memory, and per-round images/s of each step."""
    first, losses, errors = first_calls(steps, torch_device)
    row = {"first_call_seconds": first, "first_loss": {k: float(v) for k, v in losses.items()},
           **({"errors": errors} if errors else {})}
    if memory:
        row["peak_memory"] = read_memory(memory)
    return {**row, **time_rounds(steps, _both(steps, losses, TRAIN_SETTINGS), batch, repeats,
                                 torch_device, losses)}


def one_line(error):
    """`error` as one line of at most 300 characters, its type first."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}"


def machine(jax_device, torch_device):
    import jax
    import keras
    import torch

    from tests.oracle import import_timm

    versions = {"python": platform.python_version(), "jax": jax.__version__,
                "jaxlib": __import__("jaxlib").__version__, "keras": keras.__version__,
                "keras_from": os.path.dirname(keras.__file__),
                "torch": torch.__version__, "timm": import_timm().__version__,
                "numpy": np.__version__, "torch_cuda": torch.version.cuda,
                "torch_cudnn": torch.backends.cudnn.version() if torch_device == "cuda" else None}
    info = {"jax_device": str(jax_device), "device_kind": jax_device.device_kind,
            "torch_device": torch.cuda.get_device_name() if torch_device == "cuda" else "cpu",
            "cpu_cores": os.cpu_count(), "versions": versions,
            "defaults": {"jax_default_matmul_precision": getattr(
                jax.config, "jax_default_matmul_precision", "unknown"),
                         "torch_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                         "torch_cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}}
    if torch_device == "cuda":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    return info


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    tiny = args.tiny
    batch = args.batch or (2 if tiny else 64)
    repeats = args.repeats or (1 if tiny else 20)
    names = args.models.split(",") if args.models else list(DEFAULT_MODELS)
    train_names = [] if args.train_models == "none" else args.train_models.split(",")
    libraries = args.libraries.split(",")
    title = {a: t for t, a in MODELS.items()}
    unknown = [n for n in names + train_names if n not in title]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; choose from {', '.join(MODELS.values())}")
    if set(libraries) - set(LIBRARIES):
        raise SystemExit(f"unknown libraries {sorted(set(libraries) - set(LIBRARIES))}; choose "
                         f"from {', '.join(LIBRARIES)}")
    check_backend()
    jax_device, torch_device = check_devices(args.allow_cpu)
    global attention_setting
    attention_setting = FORCED_ATTENTION[args.attention]
    options = {"libraries": libraries, "compile_backend": args.compile_backend,
               "memory": args.memory, "remat": args.remat}

    from benchmarks.device_memory import jax_allocator
    from keras_vit.layers.transformer import use_fused_attention

    def image_size(name):
        return args.image_size or (112 if tiny else IMAGE_SIZES.get(name, 224))

    report = {"batch": batch, "image_size": args.image_size or (112 if tiny else "each model's"),
              "repeats": repeats, "tiny": tiny,
              "machine": machine(jax_device, torch_device),
              "settings": {
                  "float32": "jax.default_matmul_precision('float32'); torch allow_tf32 off "
                             "(cuda.matmul and cudnn)",
                  "tf32": "jax.default_matmul_precision('tensorfloat32'); torch allow_tf32 on "
                          "(cuda.matmul and cudnn)",
                  "bfloat16": "keras_vit precision='bfloat16' (mixed_bfloat16, head float32); "
                              "timm torch.autocast bfloat16; TF32 allowed in both"},
              "keras_vit_call": "keras_vit.runtime.execution.compiled_forward (jax.jit of "
                                "model.stateless_call), inputs on the device, logits returned "
                                "to the host",
              "timm_call": "eval(), torch.inference_mode(), inputs on the device, "
                           "output .float().cpu()",
              "libraries": _libraries(options),
              "library_calls": {
                  "keras_vit-jit": "jax.jit of model.stateless_call(training=False), the same "
                                   "model's variables, logits returned to the host",
                  "timm-compiled": f"torch.compile(backend={args.compile_backend!r}) of timm's "
                                   f"model, in {' and '.join(COMPILED_SETTINGS)}"},
              "keras_vit_fused_attention": use_fused_attention(attention_setting),
              "attention": args.attention,
              "parity_bound_relative": RELATIVE_TOLERANCE, "models": {}, "notes": []}
    jobs = [("models", name, build_pair, measure_model) for name in names]
    if train_names:
        report["training"] = {}
        report["training_step"] = ("SGD, learning rate 1e-3, softmax cross-entropy on the "
                                   "logits; keras_vit train_on_batch (Keras' jax.jit-compiled "
                                   "train step" + (", every block rematerialised" if args.remat
                                                   else "") + "), timm forward, backward, "
                                   "optimizer.step, zero_grad, loss.item()")
        report["remat"] = args.remat
        jobs += [("training", name, build_training, measure_training) for name in train_names]
    last = 0.0
    with tempfile.TemporaryDirectory() as folder:
        for section, name, build, measure in jobs:
            elapsed = time.perf_counter() - started
            if elapsed + last > args.budget_s:
                report["notes"].append(f"{section} of {name} not run: {elapsed:.0f} s had passed "
                                       f"and the last model took {last:.0f} s (--budget-s "
                                       f"{args.budget_s:.0f})")
                continue
            begin = time.perf_counter()
            size = image_size(name)
            rows = training_batch(name, tiny, args.batch) if section == "training" else batch
            images = np.random.default_rng(0).uniform(-1, 1, (rows, size, size, 3)) \
                .astype(np.float32)
            try:
                calls, memory = build(name, size, tiny, folder, images, jax_device,
                                      torch_device, options)
            except Exception as error:  # noqa: BLE001 - recorded; the next model still runs
                row, built = {"error": f"building failed: {one_line(error)}"}, None
            else:
                built = time.perf_counter() - begin
                try:
                    row = measure(calls, rows, repeats, torch_device, memory)
                except Exception as error:  # noqa: BLE001 - e.g. out of memory while timing
                    row = {"error": f"measuring failed: {one_line(error)}"}
                del calls, memory
                if section == "training" and args.largest_batch:
                    _release()
                    row["largest_batch"] = search_largest_batch(
                        name, size, tiny, folder, rows, jax_device, torch_device, options)
            allocator = jax_allocator(jax_device)  # before the release: this model's high water
            _release()
            last = time.perf_counter() - begin
            report[section][name] = {"title": title[name], "image_size": size, "batch": rows,
                                     "build_seconds": built, "seconds": last,
                                     **({"jax_allocator": allocator} if allocator else {}), **row}
            print(f"{section}: " + _progress(name, report[section][name]), flush=True)
            _write(args.output, report, final=False)
    report["seconds"] = time.perf_counter() - started
    _write(args.output, report, final=True)
    return report


def _release():
    """Frees the last model's memory on both sides before the next is built."""
    import keras
    import torch

    keras.backend.clear_session()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _progress(name, row):
    errors = "".join(f"; {key} FAILED: {text}" for key, text in row.get("errors", {}).items())
    if "error" in row:
        return f"{name}: {row['error']}"
    if "parity_failed" in row:
        return f"{name}: PARITY FAILED: {row['parity_failed']}{errors}"
    rates = ", ".join(f"{s} " + "/".join(f"{r[lib]['median']:.0f}" for lib in r)
                      + f" ({row['ratio'][s]:.2f}x)" for s, r in row["images_per_s"].items())
    parity = f"parity {row['parity_relative_difference']:.1e}; " \
        if "parity_relative_difference" in row else ""
    peaks = "; peak GiB " + ", ".join(f"{k} {v['peak_bytes'] / 2**30:.2f}" for k, v in
                                      row.get("peak_memory", {}).items() if v and "peak_bytes" in v) \
        if row.get("peak_memory") else ""
    return f"{name}: {parity}images/s {rates}{peaks}; {row['seconds']:.0f} s{errors}"


def _write(folder, report, final):
    """accelerator.json and .md; after each model too, so that a run stopped early keeps them."""
    from benchmarks.run import write_results

    with contextlib.redirect_stdout(sys.stdout if final else io.StringIO()):
        write_results(folder, "accelerator", report, to_markdown(report))


if __name__ == "__main__":
    main()
