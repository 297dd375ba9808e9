"""keras_vit's real-workload paths as the work grows: time and peak memory, with plots.

    python -m benchmarks.scale                       # 1k, 10k, 100k JPEGs; B/16 and L/16 grid
    python -m benchmarks.scale --sizes 1000,10000 --keep-images /data/scale-images
    python -m benchmarks.scale --quick               # 30 and 120 small images, a tiny ViT

A. Data paths, per folder size (JPEGs made here: sides uniform in 224-800 px,
smooth noise for a photo's file size, 5 class sub-folders; the largest set is
written once, in parallel, and the smaller ones are hard links to its first
files): the folder scan (`keras_vit.data.load_image_folder`), `keras-vit predict
FOLDER --model M --output preds.csv` with a small .keras model (the data path,
not the model's cost), and one full pass of the training pipeline
(`make_pipeline(training=True)`, 224 px, batch 32).

B. The model: `predict_on_batch` images/s (the call `predict_images` makes)
against batch size and image size, for ViT-B/16 and ViT-L/16 with random
weights: one warm-up call, then calls until at least 3 and 10 s (at most
`--max-call-seconds` of calls, then at least 2).

Each measurement runs in a fresh process, so that its peak resident memory
(VmHWM of /proc/self/status: ru_maxrss folds in the parent's) is its own;
--quick runs them in this process, resetting the peak before each. Writes
scale.json, scale.md and PNG plots to --out.
"""

import argparse
import csv
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

__all__ = ["main", "write_photos", "measure"]

SIDES = (224, 800)
CLASSES = 5
PROBE = dict(width=64, depth=2, mlp_dim=128, heads=2, patch_size=32)  # predict's model: 49 tokens
QUICK_PROBE = dict(width=16, depth=1, mlp_dim=32, heads=2, patch_size=16)


# --- the images -------------------------------------------------------------------------------

def _photo_path(root, index):
    return os.path.join(root, f"class{index % CLASSES}", f"{index:06d}.jpg")


def _write_photos(args):
    """Writes the JPEGs `start`..`stop`; each image's size and pixels come from (seed, index)."""
    root, start, stop, sides, seed = args
    from PIL import Image

    written = 0
    for index in range(start, stop):
        rng = np.random.default_rng([seed, index])
        height, width = rng.integers(sides[0], sides[1] + 1, size=2)
        small = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
        # Blocks of 8 x 8 (benchmarks.pipeline.write_folder's smooth noise): a photo's file size.
        pixels = small.repeat(8, axis=0).repeat(8, axis=1)[:height, :width]
        path = _photo_path(root, index)
        Image.fromarray(pixels).save(path, quality=90)
        written += os.path.getsize(path)
    return written


def write_photos(root, count, sides=SIDES, seed=0, workers=None):
    """`count` JPEGs under root/class<k>/, written by `workers` processes; returns their bytes."""
    for k in range(CLASSES):
        os.makedirs(os.path.join(root, f"class{k}"), exist_ok=True)
    workers = workers or os.cpu_count()
    step = 500
    jobs = [(root, start, min(start + step, count), sides, seed) for start in range(0, count, step)]
    if count < 2000 or workers == 1:
        return sum(map(_write_photos, jobs))
    import concurrent.futures
    import multiprocessing

    # spawn: the workers need NumPy and Pillow only, never a copy of a TensorFlow runtime.
    with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return sum(pool.map(_write_photos, jobs))


def link_subset(source, target, count):
    """root/class<k>/ holding hard links to the first `count` of `source`'s photos."""
    for k in range(CLASSES):
        os.makedirs(os.path.join(target, f"class{k}"), exist_ok=True)
    size = 0
    for index in range(count):
        path = _photo_path(target, index)
        if not os.path.exists(path):
            os.link(_photo_path(source, index), path)
        size += os.path.getsize(path)
    return size


# --- one measurement (in a fresh process, or this one with the peak reset) ------------------

def _peak_rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(spec):
    """Runs the measurement `spec` describes in this process; returns its numbers."""
    import keras  # noqa: F401  imported before the clock starts: every path needs them
    import tensorflow  # noqa: F401

    from keras_vit.cli.main import main as cli
    from keras_vit.data import load_image_folder, make_pipeline

    kind = spec["kind"]
    start = time.perf_counter()
    if kind == "scan":
        splits = load_image_folder(spec["folder"])
        result = {"images": splits.num_train + splits.num_test, "skipped": len(splits.skipped_files)}
    elif kind == "predict":
        status = cli(["predict", spec["folder"], "--model", spec["model"], "--output", spec["csv"]])
        result = {"seconds": time.perf_counter() - start, "peak_rss_mb": _peak_rss_mb()}
        with open(spec["csv"], newline="") as f:  # streamed: the command's peak is read above
            rows = csv.reader(f)
            header = next(rows)
            error = header.index("error")
            counts = [0, 0]
            for row in rows:
                counts[0] += 1
                counts[1] += bool(row[error])
        result.update(exit_status=status, csv_rows=counts[0], csv_error_rows=counts[1],
                      csv_header=header)
    elif kind == "pipeline":
        splits = load_image_folder(spec["folder"])
        scanned, start = time.perf_counter() - start, time.perf_counter()  # the pass alone
        batches = make_pipeline(splits.train, spec["image_size"], spec["batch_size"], training=True,
                                repeat=False, seed=0)
        images = 0
        first = None
        for images_batch, _ in batches:
            images += int(images_batch.shape[0])
            if first is None:
                first = time.perf_counter() - start
        seconds = time.perf_counter() - start
        result = {"seconds": seconds, "images": images, "images_per_s": images / seconds,
                  "first_batch_seconds": first, "scan_seconds": scanned,
                  "training_split": splits.num_train}
    elif kind == "model":
        result = _model(spec)
    else:
        raise KeyError(kind)
    result.setdefault("seconds", time.perf_counter() - start)
    result.setdefault("peak_rss_mb", _peak_rss_mb())
    return result


def _model(spec):
    import keras_vit
    from keras_vit.normalization import model_input

    variant = _variant(spec["variant"])
    build = time.perf_counter()
    model = keras_vit.ViT(variant, image_size=spec["image_size"], classes=spec["classes"])
    build = time.perf_counter() - build
    batch, size = spec["batch_size"], spec["image_size"]
    pixels = np.random.default_rng(0).uniform(0, 255, (batch, size, size, 3)).astype("float32")
    x = model_input(model)(pixels)
    warm = time.perf_counter()
    model.predict_on_batch(x)  # traces and compiles the predict function
    warm = time.perf_counter() - warm
    calls = []
    while True:
        call = time.perf_counter()
        model.predict_on_batch(x)
        calls.append(time.perf_counter() - call)
        total = sum(calls)
        if len(calls) >= 3 and total >= spec["min_seconds"]:
            break
        if len(calls) >= 2 and total + calls[-1] > spec["max_seconds"]:
            break  # a third call would pass the time allowed: two are kept, and said so
    return {"build_seconds": build, "warmup_seconds": warm, "call_seconds": calls,
            "calls": len(calls), "images_per_s": batch * len(calls) / sum(calls),
            "jit_compile": getattr(model, "jit_compile", None)}


def _variant(name):
    import keras_vit

    if isinstance(name, dict):
        return keras_vit.Variant(name["name"], **{k: v for k, v in name.items() if k != "name"})
    return keras_vit.get_variant(name)


def _child_env():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    # The graph, not "auto": timing graph against XLA (keras_vit.runtime.execution) on a machine's
    # first predict would land in the data path's numbers, which are about the data.
    return {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2",
            "KERAS_VIT_EXECUTION": "graph"}


def run_measurement(spec, fresh):
    """`measure(spec)` in a fresh Python process (`fresh`) or here after resetting the peak."""
    wall = time.perf_counter()
    if fresh:
        out = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--child", json.dumps(spec)],
                             capture_output=True, text=True, env=_child_env(), check=False)
        if out.returncode:
            raise SystemExit(f"{spec['kind']} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
    else:
        _reset_peak()
        result = measure(spec)
    result["process_seconds"] = time.perf_counter() - wall
    return result


# --- the two parts ----------------------------------------------------------------------------

def data_part(folders, model_path, image_size, batch_size, scratch, fresh, log):
    results = {}
    for count, folder in folders.items():
        row = {}
        for kind in ("scan", "predict", "pipeline"):
            spec = {"kind": kind, "folder": folder, "image_size": image_size,
                    "batch_size": batch_size}
            if kind == "predict":
                spec.update(model=model_path, csv=os.path.join(scratch, f"preds-{count}.csv"))
            row[kind] = run_measurement(spec, fresh)
            log(f"{count} images, {kind}: {row[kind]['seconds']:.2f} s, "
                f"peak {row[kind]['peak_rss_mb']:.0f} MB")
        scanned, predicted = row["scan"]["images"], row["predict"]["csv_rows"]
        # The pipeline passes the training split (80%: load_image_folder holds 20% out), whole
        # batches only: at most batch - 1 of its images are left over.
        passed, split = row["pipeline"]["images"], row["pipeline"]["training_split"]
        if scanned != count or predicted != count or row["predict"]["csv_error_rows"] \
                or row["predict"]["exit_status"] not in (0, None) \
                or not split - batch_size < passed <= split:
            raise SystemExit(f"{count} images: the scan found {scanned}, predict wrote {predicted} "
                             f"rows ({row['predict']['csv_error_rows']} of them errors, exit "
                             f"{row['predict']['exit_status']}), the pipeline passed "
                             f"{passed}")
        os.remove(os.path.join(scratch, f"preds-{count}.csv"))
        results[str(count)] = row
    return results


def parameter_count(variant, image_size, classes):
    """The kernels' and position embeddings' sizes (biases and norms, under 1%, left out)."""
    tokens = (image_size // variant.patch_size) ** 2 + 1
    d, m = variant.width, variant.mlp_dim
    return (variant.depth * (4 * d * d + 2 * d * m) + 3 * variant.patch_size ** 2 * d
            + tokens * d + classes * d)


def estimated_memory_bytes(variant, image_size, batch, classes=1000):
    """A generous estimate of a forward pass's peak: the runtime, the weights twice (the
    variables and the traced function's view), and per image a block's live activations
    (tokens x MLP width three times, the attention matrices of every head twice)."""
    tokens = (image_size // variant.patch_size) ** 2 + 1
    d, m = variant.width, variant.mlp_dim
    params = parameter_count(variant, image_size, classes)
    per_image = tokens * m * 3 + variant.heads * tokens * tokens * 2 + tokens * d * 6
    return int(1.0e9 + 4 * (2 * params + batch * per_image))


def _ram_bytes():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemTotal:")) * 1024


def model_part(variants, image_sizes, batches, fresh, memory_fraction, min_seconds, max_seconds,
               classes, log):
    ram = _ram_bytes()
    grid = []
    for name in variants:
        variant = _variant(name)
        label = name["name"] if isinstance(name, dict) else name
        for size in image_sizes:
            for batch in batches:
                entry = {"variant": label, "image_size": size, "batch_size": batch,
                         "estimated_memory_mb": estimated_memory_bytes(variant, size, batch,
                                                                       classes) / 2**20}
                if entry["estimated_memory_mb"] * 2**20 > memory_fraction * ram:
                    entry["skipped"] = (f"estimated {entry['estimated_memory_mb']:.0f} MB is over "
                                        f"{memory_fraction:.0%} of this machine's "
                                        f"{ram / 2**20:.0f} MB")
                    log(f"{label} {size} px batch {batch}: skipped, {entry['skipped']}")
                else:
                    entry.update(run_measurement(
                        {"kind": "model", "variant": name, "image_size": size, "batch_size": batch,
                         "classes": classes, "min_seconds": min_seconds,
                         "max_seconds": max_seconds}, fresh))
                    log(f"{label} {size} px batch {batch}: {entry['images_per_s']:.2f} images/s "
                        f"({entry['calls']} calls), peak {entry['peak_rss_mb']:.0f} MB")
                grid.append(entry)
    return grid


# --- the report -------------------------------------------------------------------------------

def _figure(path, title, xlabel, ylabel, lines, log_x=True, log_y=True):
    """One PNG, drawn on a Figure of its own (no pyplot state). `lines`: {label: (xs, ys)}."""
    from matplotlib import ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, (xs, ys) in lines.items():
        axes.plot(xs, ys, marker="o", label=label)
    for log, set_scale, axis in ((log_x, axes.set_xscale, axes.xaxis),
                                 (log_y, axes.set_yscale, axes.yaxis)):
        if log:  # ticks at 1, 2, 5 times powers of ten, written as plain numbers
            set_scale("log")
            axis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
            axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            axis.set_minor_formatter(ticker.NullFormatter())
    if not log_y:
        axes.set_ylim(bottom=0)  # memory from zero: growth drawn to scale
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # off the lines
    figure.savefig(path, dpi=100)
    return os.path.basename(path)


def plots(report, out):
    data = report["data"]
    counts = [int(c) for c in data]
    kinds = {"scan": "folder scan", "predict": "keras-vit predict", "pipeline": "training pipeline pass"}
    names = [
        _figure(os.path.join(out, "scale_data_time.png"), "Time against folder size",
                "images", "seconds", {label: (counts, [data[str(c)][k]["seconds"] for c in counts])
                                       for k, label in kinds.items()}),
        _figure(os.path.join(out, "scale_data_memory.png"), "Peak resident memory against folder size",
                "images", "peak RSS (MB)", {label: (counts, [data[str(c)][k]["peak_rss_mb"]
                                                             for c in counts])
                                            for k, label in kinds.items()}, log_y=False),
    ]
    measured = [e for e in report["model"]["grid"] if "skipped" not in e]
    if not measured:
        return names
    curves = {}
    for e in measured:
        curves.setdefault(f"{e['variant']} {e['image_size']} px", []).append(e)
    for key, ylabel, log_y, file in (("images_per_s", "images/s", True, "scale_model_rate.png"),
                                     ("peak_rss_mb", "peak RSS (MB)", False, "scale_model_memory.png")):
        names.append(_figure(os.path.join(out, file), f"Model {ylabel} against batch size",
                             "batch size", ylabel,
                             {label: ([e["batch_size"] for e in es], [e[key] for e in es])
                              for label, es in curves.items()}, log_y=log_y))
    return names


def to_markdown(report):
    m = report["machine"]
    lines = [f"Measured {report['date']} with `{report['command']}`.", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_mb']:.0f} MB RAM; load average "
             f"{m['load_average_start'][0]:.2f} at start, {m['load_average_end'][0]:.2f} at end. "
             f"Each measurement {report['processes']}.", "",
             f"Images: JPEG, sides uniform in {report['images']['sides'][0]}-"
             f"{report['images']['sides'][1]} px, {report['images']['bytes_per_image']:.0f} bytes "
             f"each on average, written in {report['images']['write_seconds']:.0f} s "
             f"({report['images']['count']} files, {report['images']['workers']} processes).", "",
             "### Data paths", "",
             "| images | scan s | scan peak MB | predict s | predict images/s | predict peak MB | "
             "predict process s | pipeline s | pipeline images/s | pipeline peak MB |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for count, row in report["data"].items():
        s, p, t = row["scan"], row["predict"], row["pipeline"]
        lines.append(f"| {int(count):,} | {s['seconds']:.2f} | {s['peak_rss_mb']:.0f} | "
                     f"{p['seconds']:.1f} | {int(count) / p['seconds']:.1f} | {p['peak_rss_mb']:.0f} | "
                     f"{p['process_seconds']:.1f} | {t['seconds']:.1f} | {t['images_per_s']:.1f} | "
                     f"{t['peak_rss_mb']:.0f} |")
    lines += ["", f"predict: `keras-vit predict FOLDER --model M --output preds.csv`, M a "
                  f"{report['predict_model']} ({report['image_size']} px); its CSV had one row per "
                  "image (checked). pipeline: `load_image_folder` + `make_pipeline(training=True, "
                  f"repeat=False)`, {report['image_size']} px, batch {report['pipeline_batch_size']}, "
                  "one full pass of the training split (80%: the scan holds 20% out; whole "
                  "batches), timed from make_pipeline (after its own scan) to the last batch. "
                  "Times start after TensorFlow and Keras are imported; predict process s is "
                  "the whole process (Python, imports, the command, the row check), as a user "
                  "running the command waits for it.", "",
              "### Model: `predict_on_batch`, random weights", "",
              "| variant | image px | batch | images/s | s per call | calls timed | peak MB | "
              "estimated MB | jit_compile |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for e in report["model"]["grid"]:
        if "skipped" in e:
            lines.append(f"| {e['variant']} | {e['image_size']} | {e['batch_size']} | skipped: "
                         f"{e['skipped']} | | | | {e['estimated_memory_mb']:.0f} | |")
            continue
        lines.append(f"| {e['variant']} | {e['image_size']} | {e['batch_size']} | "
                     f"{e['images_per_s']:.2f} | {np.median(e['call_seconds']):.2f} | {e['calls']} | "
                     f"{e['peak_rss_mb']:.0f} | {e['estimated_memory_mb']:.0f} | {e['jit_compile']} |")
    lines += ["", *[f"Note: {n}" for n in report["notes"]]]
    return "\n".join(lines) + "\n"


def _ints(text):
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="30 and 120 images of 32-80 px, a tiny ViT, in this process")
    parser.add_argument("--sizes", help="folder sizes (default 1000,10000,100000)")
    parser.add_argument("--out", default="benchmarks/results/scale",
                        help="folder for scale.json, scale.md and the plots")
    parser.add_argument("--keep-images", metavar="DIR",
                        help="write the images here and keep them (reused if complete)")
    parser.add_argument("--variants", help="model variants (default B/16,L/16)")
    parser.add_argument("--image-sizes", help="model image sizes (default 224,384)")
    parser.add_argument("--batch-sizes", help="model batch sizes (default 1,8,32)")
    parser.add_argument("--max-call-seconds", type=float, default=150,
                        help="timed calls after a warm-up stop once a third would pass this "
                             "(default 150)")
    parser.add_argument("--memory-fraction", type=float, default=0.8,
                        help="skip a model configuration estimated above this share of RAM")
    parser.add_argument("--no-model", action="store_true", help="the data paths only (part A)")
    parser.add_argument("--fresh-processes", action=argparse.BooleanOptionalAction, default=None,
                        help="each measurement in a fresh process (default: yes, no with --quick)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return None
    quick = args.quick
    sizes = _ints(args.sizes or ("30,120" if quick else "1000,10000,100000"))
    sides = (32, 80) if quick else SIDES
    image_size = 32 if quick else 224
    tiny = {"name": "tiny", **QUICK_PROBE}
    variants = (args.variants.split(",") if args.variants else [tiny] if quick else ["B/16", "L/16"])
    model_sizes = _ints(args.image_sizes or ("32,64" if quick else "224,384"))
    batches = _ints(args.batch_sizes or ("1,4" if quick else "1,8,32"))
    fresh = (not quick) if args.fresh_processes is None else args.fresh_processes
    start = time.perf_counter()
    log = lambda text: print(f"[{time.perf_counter() - start:7.1f} s] {text}", flush=True)  # noqa: E731

    from benchmarks.run import machine, write_results

    report = {"command": "python -m benchmarks.scale " + shlex.join(
                  sys.argv[1:] if argv is None else argv),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {**machine(), "ram_mb": _ram_bytes() / 2**20}, "quick": quick,
              "processes": "in a fresh Python process" if fresh else
                           "in the benchmark's own process, its peak reset before",
              "image_size": image_size, "pipeline_batch_size": 8 if quick else 32, "notes": []}
    with tempfile.TemporaryDirectory() as scratch:
        images = args.keep_images or os.path.join(scratch, "images")
        full = os.path.join(images, f"all-{max(sizes)}")
        marker = os.path.join(full, ".complete")
        workers = os.cpu_count()
        write = time.perf_counter()
        if not os.path.exists(marker):
            total = write_photos(full, max(sizes), sides, workers=workers)
            with open(marker, "w") as f:
                f.write(str(total))
        with open(marker) as f:
            total = int(f.read())
        report["images"] = {"count": max(sizes), "sides": list(sides), "workers": workers,
                            "write_seconds": time.perf_counter() - write,
                            "bytes_per_image": total / max(sizes), "bytes": total}
        log(f"{max(sizes)} images, {total / 2**30:.2f} GiB, in {report['images']['write_seconds']:.0f} s")
        folders = {}
        for count in sorted(sizes):
            folders[count] = full if count == max(sizes) else os.path.join(images, f"first-{count}")
            if count != max(sizes):
                link_subset(full, folders[count], count)

        import keras_vit

        probe = keras_vit.Variant("probe", **(QUICK_PROBE if quick else PROBE))
        model_path = os.path.join(scratch, "probe.keras")
        keras_vit.ViT(probe, image_size=image_size, classes=CLASSES).save(model_path)
        report["predict_model"] = (f"ViT of width {probe.width}, depth {probe.depth}, patch "
                                   f"{probe.patch_size}, {CLASSES} classes")
        report["data"] = data_part(folders, model_path, image_size, report["pipeline_batch_size"],
                                   scratch, fresh, log)
        if not args.keep_images:
            shutil.rmtree(images)

    grid = [] if args.no_model else model_part(
        variants, model_sizes, batches, fresh, args.memory_fraction, 0 if quick else 10,
        args.max_call_seconds, 10 if quick else 1000, log)
    report["model"] = {"grid": grid, "min_seconds": 0 if quick else 10,
                       "max_call_seconds": args.max_call_seconds}
    for e in grid:
        if "skipped" in e:
            report["notes"].append(f"{e['variant']} {e['image_size']} px batch {e['batch_size']} "
                                   f"not measured: {e['skipped']}")
        elif e["calls"] < 3:
            report["notes"].append(f"{e['variant']} {e['image_size']} px batch {e['batch_size']}: "
                                   f"{e['calls']} calls timed, a third would pass "
                                   f"{args.max_call_seconds:.0f} s")
    report["machine"]["load_average_end"] = os.getloadavg()
    report["wall_seconds"] = time.perf_counter() - start
    os.makedirs(args.out, exist_ok=True)
    report["plots"] = plots(report, args.out)
    write_results(args.out, "scale", report, to_markdown(report))
    return report


if __name__ == "__main__":
    main()
