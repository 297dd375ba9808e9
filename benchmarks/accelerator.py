"""keras_vit on JAX beside timm on one NVIDIA GPU: inference and training throughput per precision.

    python -m benchmarks.accelerator --output DIR          # five ViT-B models, batch 64, then training
    python -m benchmarks.accelerator --tiny --allow-cpu    # width 64, depth 1, batch 2: checks it runs

Runs on the JAX backend and needs no TensorFlow. Per model, timm builds its architecture
with random weights (every parameter drawn), writes the state dict as safetensors, and
keras_vit loads that file through its timm rows, so both compute the same function; their
float32 outputs must agree within the parity tests' bound or the model is recorded as
failing parity and not timed.

Three settings, each for both libraries:

- float32: full float32 products in both (`jax.default_matmul_precision("float32")`;
  torch's `backends.cuda.matmul.allow_tf32` and `backends.cudnn.allow_tf32` off). Neither
  library's default: JAX's lets float32 products use TF32 on Ampere and later GPUs, and
  torch's lets its convolutions (the patch embedding) use TF32.
- tf32: TF32 products allowed in both ("tensorfloat32"; both torch switches on).
- bfloat16: keras_vit's `precision="bfloat16"` (`keras_vit.precision.bfloat16_model`: the
  model under `mixed_bfloat16`, its head float32) and timm under
  `torch.autocast(device, torch.bfloat16)`; TF32 allowed in both, as in the tf32 setting.

keras_vit is timed through `model.predict_on_batch`, the call keras_vit's own predict makes
on JAX (`execution.choose_jit_compile` leaves Keras its choice there: a `jax.jit`-compiled
predict step); timm in `eval()` under `torch.inference_mode()`. Inputs are on the GPU before
timing (no host-to-device copy is timed); both calls end with the logits in host memory
(predict_on_batch returns a NumPy array; timm's call copies its output with `.cpu()`), and
the GPU is synchronised before each timed call. The first call of each is timed apart
(keras_vit: tracing and XLA compilation), a second is an untimed warm-up, then rounds call
each (setting, library) once in turn (keras_vit, timm, keras_vit, timm, ...), so that a
change in clocks or load hits both alike; tables give medians and keras_vit / timm.

Then one training step of ViT-B/16 (`build_training`), timed the same way in the tf32 and
bfloat16 settings. Results are rewritten after each model, so that a run stopped early keeps
what it measured; `--budget-s` starts no model that the time left would not fit.
"""

import argparse
import contextlib
import copy
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
}
SETTINGS = ("float32", "tf32", "bfloat16")
TRAIN_SETTINGS = ("tf32", "bfloat16")  # training in full float32 is no one's choice on a GPU
# The parity tests' bound (tests/checkpoints/test_timm_families.py), relative to the largest
# output: float32 rounding is ~1e-7 relative per operation, a wrong mapping 1e-3 or more.
from benchmarks.families import RELATIVE_TOLERANCE  # noqa: E402

TINY = {"depth": 1, "width": 64, "heads": 2}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.accelerator",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="benchmarks/results",
                        help="folder for accelerator.json and accelerator.md")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated timm names (default: all five: {', '.join(MODELS.values())})")
    parser.add_argument("--batch", type=int, default=None, help="images per call (default 64, tiny 2)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed rounds per model (default 20, tiny 1)")
    parser.add_argument("--image-size", type=int, default=None, help="default 224 (tiny 112)")
    parser.add_argument("--tiny", action="store_true",
                        help="width 64, 2 heads, depth 1, 112 px, batch 2, one round: checks it works")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run without a GPU (for --tiny: the numbers mean nothing)")
    parser.add_argument("--train-model", choices=("vit_base_patch16_224", "none"),
                        default="vit_base_patch16_224",
                        help="also time a training step of this model, after inference "
                             "(default vit_base_patch16_224; none skips it)")
    parser.add_argument("--attention", choices=("auto", "fused", "explicit"), default="auto",
                        help="keras_vit's attention path: auto (keras_vit's own choice: fused "
                             "on GPUs), or forced to keras.ops.dot_product_attention (fused) "
                             "or matmul-softmax-matmul (explicit)")
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
FORCED_ATTENTION = {"auto": None, "fused": True, "explicit": False}
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


def build_pair(architecture, image_size, tiny, folder, images, jax_device, torch_device):
    """{"keras_vit": {setting: call}, "timm": {setting: call}}: forward passes on `images`,
    each returning float32 NumPy outputs."""
    import jax
    import torch

    from keras_vit.precision import bfloat16_model

    ours, theirs = build_models(architecture, image_size, tiny, folder, torch_device)
    ours, ours_bf16 = force_attention(ours, bfloat16_model(ours))
    x_jax = jax.device_put(images, jax_device)
    x_torch = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))).to(torch_device)

    def keras_call(model):
        return lambda: np.asarray(model.predict_on_batch(x_jax), np.float32)

    def timm_call(bfloat16):
        def call():
            with torch.inference_mode(), torch.autocast(torch_device, torch.bfloat16,
                                                        enabled=bfloat16):
                return theirs(x_torch).float().cpu().numpy()
        return call

    return {"keras_vit": {"float32": keras_call(ours), "tf32": keras_call(ours),
                          "bfloat16": keras_call(ours_bf16)},
            "timm": {"float32": timm_call(False), "tf32": timm_call(False),
                     "bfloat16": timm_call(True)}}


def build_training(architecture, image_size, tiny, folder, images, jax_device, torch_device):
    """{"keras_vit": {setting: step}, "timm": {setting: step}}: one SGD step (softmax cross-
    entropy on the logits, learning rate 1e-3) on `images`, each returning the loss. keras_vit:
    `train_on_batch` of the model compiled by Keras (its bfloat16 one under mixed_bfloat16,
    head float32); timm: forward under `torch.autocast` for bfloat16, backward, step."""
    import jax
    import keras
    import torch

    from keras_vit.precision import bfloat16_model

    ours, theirs = build_models(architecture, image_size, tiny, folder, torch_device)
    labels = np.arange(len(images)) % theirs.num_classes
    x_jax, y_jax = jax.device_put(images, jax_device), jax.device_put(labels, jax_device)
    x_torch = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))).to(torch_device)
    y_torch = torch.from_numpy(labels).to(torch_device)

    def keras_step(model):
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return lambda: np.float32(model.train_on_batch(x_jax, y_jax))

    def timm_step(model, bfloat16):
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step():
            with torch.autocast(torch_device, torch.bfloat16, enabled=bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x_torch), y_torch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return np.float32(loss.item())
        return step

    # Each setting trains its own copy from the same weights, so the four first losses compare.
    ours, ours_bf16 = force_attention(ours, bfloat16_model(ours))
    return {"keras_vit": {"tf32": keras_step(ours), "bfloat16": keras_step(ours_bf16)},
            "timm": {"tf32": timm_step(theirs, False),
                     "bfloat16": timm_step(copy.deepcopy(theirs), True)}}


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


def time_rounds(calls, names, batch, repeats, torch_device):
    """{"images_per_s": {setting: {library: summary}}, "ratio": {setting: keras_vit / timm}}
    after an untimed warm-up of each call; each round runs every setting of `names` once,
    keras_vit then timm."""
    from benchmarks.run import summarize

    for library in calls:
        for name in names:
            with setting(name):
                _timed(calls[library][name], torch_device)
    rates = {name: {library: [] for library in calls} for name in names}
    for _ in range(repeats):
        for name in names:
            with setting(name):
                for library in calls:
                    seconds, _ = _timed(calls[library][name], torch_device)
                    rates[name][library].append(batch / seconds)
    # Per round, then the median: both sides of one round saw the same clocks and load.
    return {"images_per_s": {name: {library: summarize(r) for library, r in by_library.items()}
                             for name, by_library in rates.items()},
            "ratio": {name: statistics.median(k / t for k, t in zip(r["keras_vit"], r["timm"]))
                      for name, r in rates.items()}}


def _both(calls, outputs, names):
    """The settings of `names` whose first call ran in every library."""
    return [name for name in names if all(f"{lib} {name}" in outputs for lib in calls)]


def measure_model(calls, batch, repeats, torch_device):
    """First-call seconds, parity, agreements and per-round images/s of every (library,
    setting) of `calls`. A setting that failed in either library is not timed; without both
    float32 outputs there is no parity check and nothing is timed."""
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
    from keras_vit.export_quantized import agreement

    timed = _both(calls, outputs, SETTINGS)
    # Against each library's own full-float32 outputs; nonzero tf32 differences on a GPU
    # also show that the setting reached the library.
    row["agreement_with_float32"] = {
        library: {name: agreement(outputs[f"{library} float32"], outputs[f"{library} {name}"])
                  for name in timed if name != "float32"} for library in calls}
    return {**row, **time_rounds(calls, timed, batch, repeats, torch_device)}


def measure_training(steps, batch, repeats, torch_device):
    """First-step seconds and losses (the same weights and labels: the two first losses
    should agree to the setting's rounding), and per-round images/s of each training step."""
    first, losses, errors = first_calls(steps, torch_device)
    row = {"first_call_seconds": first, "first_loss": {k: float(v) for k, v in losses.items()},
           **({"errors": errors} if errors else {})}
    return {**row, **time_rounds(steps, _both(steps, losses, TRAIN_SETTINGS), batch, repeats,
                                 torch_device)}


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
    image_size = args.image_size or (112 if tiny else 224)
    batch = args.batch or (2 if tiny else 64)
    repeats = args.repeats or (1 if tiny else 20)
    names = args.models.split(",") if args.models else list(MODELS.values())
    title = {a: t for t, a in MODELS.items()}
    unknown = [n for n in names if n not in title]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; choose from {', '.join(MODELS.values())}")
    check_backend()
    jax_device, torch_device = check_devices(args.allow_cpu)
    global attention_setting
    attention_setting = FORCED_ATTENTION[args.attention]

    from keras_vit.layers.transformer import use_fused_attention

    report = {"batch": batch, "image_size": image_size, "repeats": repeats, "tiny": tiny,
              "machine": machine(jax_device, torch_device),
              "settings": {
                  "float32": "jax.default_matmul_precision('float32'); torch allow_tf32 off "
                             "(cuda.matmul and cudnn)",
                  "tf32": "jax.default_matmul_precision('tensorfloat32'); torch allow_tf32 on "
                          "(cuda.matmul and cudnn)",
                  "bfloat16": "keras_vit precision='bfloat16' (mixed_bfloat16, head float32); "
                              "timm torch.autocast bfloat16; TF32 allowed in both"},
              "keras_vit_call": "model.predict_on_batch (jax.jit-compiled predict step), "
                                "inputs on the device, logits returned to the host",
              "timm_call": "eval(), torch.inference_mode(), inputs on the device, "
                           "output .float().cpu()",
              "keras_vit_fused_attention": use_fused_attention(attention_setting),
              "attention": args.attention,
              "parity_bound_relative": RELATIVE_TOLERANCE, "models": {}, "notes": []}
    images = np.random.default_rng(0).uniform(-1, 1, (batch, image_size, image_size, 3)) \
        .astype(np.float32)
    jobs = [("models", name, build_pair, measure_model) for name in names]
    if args.train_model != "none":
        report["training"] = {}
        report["training_step"] = ("SGD, learning rate 1e-3, softmax cross-entropy on the "
                                   "logits; keras_vit train_on_batch (Keras' jax.jit-compiled "
                                   "train step), timm forward, backward, optimizer.step, "
                                   "zero_grad, loss.item()")
        jobs.append(("training", args.train_model, build_training, measure_training))
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
            try:
                calls = build(name, image_size, tiny, folder, images, jax_device, torch_device)
            except Exception as error:  # noqa: BLE001 - recorded; the next model still runs
                row, built = {"error": f"building failed: {one_line(error)}"}, None
            else:
                built = time.perf_counter() - begin
                try:
                    row = measure(calls, batch, repeats, torch_device)
                except Exception as error:  # noqa: BLE001 - e.g. out of memory while timing
                    row = {"error": f"measuring failed: {one_line(error)}"}
                del calls
            _release()
            last = time.perf_counter() - begin
            report[section][name] = {"title": title[name], "build_seconds": built,
                                     "seconds": last, **row}
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
    rates = ", ".join(f"{s} {r['keras_vit']['median']:.0f}/{r['timm']['median']:.0f} "
                      f"({row['ratio'][s]:.2f}x)" for s, r in row["images_per_s"].items())
    parity = f"parity {row['parity_relative_difference']:.1e}; " \
        if "parity_relative_difference" in row else ""
    return (f"{name}: {parity}images/s keras_vit/timm {rates}; {row['seconds']:.0f} s"
            f"{errors}")


def _write(folder, report, final):
    """accelerator.json and .md; after each model too, so that a run stopped early keeps them."""
    from benchmarks.run import write_results

    with contextlib.redirect_stdout(sys.stdout if final else io.StringIO()):
        write_results(folder, "accelerator", report, to_markdown(report))


def _attention_note(report):
    if "keras_vit_fused_attention" not in report:
        return ""
    path = "fused" if report["keras_vit_fused_attention"] else "explicit"
    return f" keras_vit's attention: {report.get('attention', 'auto')} ({path})."


def to_markdown(report):
    m = report["machine"]
    v = m["versions"]
    lines = [f"Device: {m['torch_device']} ({m['device_kind']}); jax {v['jax']}, keras "
             f"{v['keras']}, torch {v['torch']} (CUDA {v['torch_cuda']}), timm {v['timm']}. "
             f"Batch {report['batch']} at {report['image_size']} px, random weights, "
             f"{report['repeats']} interleaved rounds, median images/s (min-max); inputs on the "
             f"device, logits back on the host.{_attention_note(report)}", "",
             "| model | setting | keras_vit images/s | timm images/s | keras_vit / timm "
             "| first call keras_vit / timm (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for row in report["models"].values():
        if "error" in row or "parity_failed" in row:
            lines.append(f"| {row['title']} | {'failed' if 'error' in row else 'parity failed'} "
                         f"| | | | |")
            continue
        for s in row["images_per_s"]:
            cells = []
            for library in ("keras_vit", "timm"):
                r = row["images_per_s"][s][library]
                cells.append(f"{r['median']:.0f} ({r['min']:.0f}-{r['max']:.0f})")
            first = row["first_call_seconds"]
            lines.append(f"| {row['title']} | {s} | {cells[0]} | {cells[1]} | "
                         f"{row['ratio'][s]:.2f}x | {first[f'keras_vit {s}']:.1f} / "
                         f"{first[f'timm {s}']:.1f} |")
    lines += ["", "Agreement with each library's own float32 outputs (top-1 agreement, largest "
              "output difference), and keras_vit against timm in float32 (relative):", "",
              "| model | keras_vit tf32 | keras_vit bfloat16 | timm tf32 | timm bfloat16 "
              "| float32 parity |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in report["models"].values():
        if "error" in row:
            continue
        parity = row["parity_relative_difference"]
        parity = "none" if parity is None else f"{parity:.1e}"
        if "parity_failed" in row:
            lines.append(f"| {row['title']} | | | | | {parity} (failed) |")
            continue
        a = row["agreement_with_float32"]
        cells = [f"{a[lib][s]['top1_agreement']:.3f}, {a[lib][s]['max_logit_difference']:.2g}"
                 if s in a[lib] else "failed"
                 for lib in ("keras_vit", "timm") for s in ("tf32", "bfloat16")]
        lines.append(f"| {row['title']} | {' | '.join(cells)} | {parity} |")
    training = report.get("training", {})
    if training:
        lines += ["", f"Training step ({report['training_step']}), batch {report['batch']}:", "",
                  "| model | setting | keras_vit images/s | timm images/s | keras_vit / timm "
                  "| first step keras_vit / timm (s) | first loss keras_vit / timm |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for row in training.values():
            for s in row.get("images_per_s", {}):
                r, first, loss = row["images_per_s"][s], row["first_call_seconds"], row["first_loss"]
                lines.append(
                    f"| {row['title']} | {s} | {r['keras_vit']['median']:.0f} "
                    f"({r['keras_vit']['min']:.0f}-{r['keras_vit']['max']:.0f}) | "
                    f"{r['timm']['median']:.0f} ({r['timm']['min']:.0f}-{r['timm']['max']:.0f}) | "
                    f"{row['ratio'][s]:.2f}x | {first[f'keras_vit {s}']:.1f} / "
                    f"{first[f'timm {s}']:.1f} | {loss[f'keras_vit {s}']:.4f} / "
                    f"{loss[f'timm {s}']:.4f} |")
    lines += ["", *(f"Setting {k}: {t}." for k, t in report["settings"].items())]
    rows = [*report["models"].values(), *training.values()]
    lines += [f"Failed: {row['title']}: {row['error']}" for row in rows if "error" in row]
    lines += [f"Failed: {row['title']} {key}: {text}" for row in rows
              for key, text in row.get("errors", {}).items()]
    lines += [f"Note: {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
