"""Runs every benchmark in one process and writes `results.json` and `results.md`.

    python -m benchmarks.run            # ViT-B/16 at 224, batches 8 and 32 (~1 hour on 2 cores)
    python -m benchmarks.run --quick    # a tiny ViT, checks the machinery in a minute

Candidates are timed round-robin (one call of each in turn, `--repeats`
times), so that a change in machine load hits all of them alike; medians and
the min-max spread are reported. Peers that do not import are reported as
unavailable, not skipped silently.
"""

import argparse
import atexit
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import candidates as cands
from benchmarks import flops, loading


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, one repeat: checks it works")
    parser.add_argument("--out", default="benchmarks/results", help="folder for results.json and results.md")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed calls per candidate (default 7, quick 1)")
    parser.add_argument("--batch-sizes", default=None, help="inference batches, e.g. 8,32")
    parser.add_argument("--train-batch-sizes", default=None, help="training batches, e.g. 8,32")
    parser.add_argument("--only", default="keras_vit,keras_hub,timm,onnxruntime,openvino",
                        help="candidates to run (onnxruntime and openvino: inference only, the "
                             "keras_vit model exported by keras_vit.export_onnx/export_openvino)")
    parser.add_argument("--modes", default="graph,xla,auto",
                        help="Keras execution modes: graph, xla, and for keras_vit auto (the mode "
                             "keras_vit.runtime.execution chooses here, timed afresh in this run)")
    parser.add_argument("--bf16", action="store_true",
                        help="also time keras_vit under mixed_bfloat16 and timm under "
                             "torch.autocast(\"cpu\", torch.bfloat16)")
    parser.add_argument("--arch", choices=sorted(cands.ARCHS), default="B/16",
                        help="the ViT timed (default: B/16; --quick: a tiny one)")
    parser.add_argument("--torch-compile", default=None, action=argparse.BooleanOptionalAction,
                        help="also time timm under torch.compile (default: on, off with --quick: "
                             "compiling takes minutes on a CPU)")
    parser.add_argument("--no-loading", action="store_true", help="skip the checkpoint-loading part")
    parser.add_argument("--load-repeats", type=int, default=3, help="fresh processes per loading measurement")
    parser.add_argument("--load-variants", default=None, help="variants for loading, e.g. B/16,L/16")
    return parser.parse_args(argv)


def machine():
    """The facts a reader needs to weigh the numbers."""
    model = platform.processor()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                      if ln.startswith("Model name")), model)
    except OSError:
        pass
    with open("/proc/cpuinfo") as f:
        flags = set(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), []))
    import keras
    import numpy
    import tensorflow as tf
    versions = {"python": platform.python_version(), "tensorflow": tf.__version__,
                "keras": keras.__version__, "numpy": numpy.__version__}
    for name in ("torch", "keras_hub"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    try:
        versions["timm"] = cands.import_timm().__version__
    except (ImportError, RuntimeError):
        versions["timm"] = None
    simd = sorted(flags & {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"})
    # Instruction sets capped by the libraries' own switches (oneDNN, XLA, MKL, ATen): how
    # an AVX2-only CPU's code paths are run on a newer one.
    caps = {name: os.environ[name] for name in ISA_CAPS if os.environ.get(name)}
    return {"cpu": model, "cores": os.cpu_count(), "simd": simd, "isa_caps": caps,
            "load_average_start": os.getloadavg(), "versions": versions}


ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "XLA_FLAGS", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def build_candidates(arch, args, notes):
    import keras

    # On the JAX backend every Keras model runs jax.jit-compiled, one mode.
    modes = ("jax",) if keras.backend.backend() == "jax" else tuple(args.modes.split(","))
    only = set(args.only.split(","))
    builders = []
    if "keras_vit" in only:
        builders.append(("keras_vit", lambda: cands.keras_vit_candidates(arch, modes)))
        if args.bf16:
            builders.append(("keras_vit bf16",
                             lambda: cands.keras_vit_candidates(
                                 arch, [m for m in modes if m != "auto"] or ["graph"],
                                 "mixed_bfloat16")))
    if "keras_hub" in only:
        hub_modes = tuple(m for m in modes if m != "auto") or ("graph",)
        builders.append(("keras_hub", lambda: cands.keras_hub_candidates(arch, hub_modes)))
    if "timm" in only:
        compiled = args.torch_compile if args.torch_compile is not None else not args.quick
        builders.append(("timm", lambda: cands.timm_candidates(arch, compiled, args.bf16)))
    runtimes = [name for name in ("onnxruntime", "openvino") if name in only]
    if runtimes:
        folder = tempfile.mkdtemp(prefix="keras_vit_runtimes_")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # the exported files

        def exported():
            built, isa = cands.runtime_candidates(arch, runtimes, folder)
            notes.extend(isa)
            return built

        builders.append(("onnxruntime/openvino", exported))
    out = []
    for name, build in builders:
        try:
            out += build()
        except (ImportError, RuntimeError) as error:
            notes.append(f"{name} unavailable: {type(error).__name__}: {error}")
    return out


def time_round_robin(candidates, kind, batch, repeats, gemm, notes=None):
    """Times each candidate and the GEMM in turn, `repeats` rounds, after one warm-up call each.

    Returns `{name: {"wall": [images/s], "cpu": [images per CPU-second]}}` and
    the GEMM's `{"wall": [GFLOP/s], "cpu": [GFLOP per CPU-second]}`, one entry
    per round, so that each model's rate can be divided by the peak measured
    under the same load.
    """
    for candidate in list(candidates):
        try:
            getattr(candidate, kind)(batch)  # traces, compiles, allocates
        except RuntimeError as error:  # e.g. torch.compile without a working C++ compiler
            if notes is None:
                raise
            notes.append(f"{candidate.name} unavailable ({kind}, batch {batch}): "
                         f"{type(error).__name__}: {str(error)[:300]}")
            candidates.remove(candidate)  # the caller's list: no row for it from here on
    timings = {c.name: {"wall": [], "cpu": []} for c in candidates}
    peak = {"wall": [], "cpu": []}
    for _ in range(repeats):
        for candidate in candidates:
            wall, cpu = time.perf_counter(), time.process_time()
            getattr(candidate, kind)(batch)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            timings[candidate.name]["wall"].append(batch / wall)
            timings[candidate.name]["cpu"].append(batch / cpu)
        wall_rate, cpu_rate = gemm()
        peak["wall"].append(wall_rate)
        peak["cpu"].append(cpu_rate)
    return timings, peak


def _throughput(timing, round_peak, step_flops):
    """Images/s and, per round, the achieved FLOP/s over the GEMM rate measured right after it."""
    return {"images_per_s": summarize(timing["wall"]), "images_per_cpu_s": summarize(timing["cpu"]),
            "gflop_per_image": step_flops / 1e9,
            "fraction_of_tf_gemm_peak": statistics.median(
                r * step_flops / 1e9 / g for r, g in zip(timing["wall"], round_peak["wall"])),
            "fraction_of_tf_gemm_peak_cpu": statistics.median(
                r * step_flops / 1e9 / g for r, g in zip(timing["cpu"], round_peak["cpu"]))}


def summarize(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def loading_benchmark(variant_names, image_size, repeats, folder):
    """Per variant: medians of `np.load` and keras_vit load time and extra RSS, each in a fresh process."""
    import keras_vit

    results = {}
    for name in variant_names:
        variant = keras_vit.get_variant(name)
        path = os.path.join(folder, f"{variant.name}.npz")
        size = loading.write_checkpoint(variant, path, image_size)
        runs = {"np_load": [], "keras_vit": []}
        for _ in range(repeats):
            for mode in runs:  # interleaved, so that load changes hit both alike
                out = subprocess.run([sys.executable, "-m", "benchmarks.loading", mode, name, path,
                                      str(image_size)], capture_output=True, text=True, check=False,
                                     env={**os.environ, "PYTHONPATH": _pythonpath()})
                if out.returncode:
                    raise RuntimeError(f"loading {name} with {mode} failed:\n{out.stderr[-2000:]}")
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
        os.remove(path)
        np_time = statistics.median(r["seconds"] for r in runs["np_load"])
        kv_time = statistics.median(r["seconds"] for r in runs["keras_vit"])
        kv_extra = statistics.median(r["extra_rss"] for r in runs["keras_vit"])
        results[name] = {
            "file_bytes": size, "weights_bytes": runs["keras_vit"][0]["weights_bytes"],
            "np_load_seconds": summarize([r["seconds"] for r in runs["np_load"]]),
            "np_load_extra_rss": summarize([r["extra_rss"] for r in runs["np_load"]]),
            "keras_vit_seconds": summarize([r["seconds"] for r in runs["keras_vit"]]),
            "keras_vit_extra_rss": summarize([r["extra_rss"] for r in runs["keras_vit"]]),
            "keras_vit_build_seconds": summarize([r["build_seconds"] for r in runs["keras_vit"]]),
            "time_vs_np_load": kv_time / np_time,
            "extra_rss_vs_file": kv_extra / size,
        }
    return results


def _ints(text, default):
    """ "8,32" -> [8, 32]; an empty string (e.g. --train-batch-sizes "") -> []."""
    text = default if text is None else text
    return [int(b) for b in text.split(",") if b.strip()]


def _pythonpath():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)


def main(argv=None):
    args = parse_args(argv)
    quick = args.quick
    arch = cands.TINY if quick else cands.ARCHS[args.arch]
    repeats = args.repeats or (1 if quick else 7)
    batches = _ints(args.batch_sizes, "2" if quick else "8,32")
    train_batches = _ints(args.train_batch_sizes, "2" if quick else "8,32")
    load_variants = (args.load_variants or ("Ti/16" if quick else "B/16,L/16")).split(",")

    import torch
    torch.set_num_threads(os.cpu_count())  # TensorFlow's default pools use every core too

    import keras
    report = {"arch": vars(arch), "quick": quick, "keras_backend": keras.backend.backend(),
              "repeats": repeats, "machine": machine(),
              "threads": {"torch": torch.get_num_threads(), "tensorflow": "default (all cores)"},
              "notes": []}
    forward_flops = flops.vit_forward_flops(arch.width, arch.depth, arch.mlp_dim, arch.patch_size,
                                            arch.image_size, arch.classes)
    report["forward_gflop_per_image"] = forward_flops / 1e9
    gemm_sizes = ((256, 256, 256),) if quick else ((2048, 2048, 2048), (1576, 768, 3072))
    gemm_repeats, gemm_seconds = (1, 0.05) if quick else (5, 0.5)
    report["gemm_gflops"] = {"tensorflow": flops.tf_gemm_peak(gemm_sizes, gemm_repeats, gemm_seconds),
                             "torch": flops.torch_gemm_peak(gemm_sizes, gemm_repeats, gemm_seconds)}
    gemm = flops.tf_gemm_timer(gemm_sizes[-1], gemm_seconds)

    # "auto" chooses afresh, not from an earlier run's stored choice.
    choice_home = tempfile.TemporaryDirectory()
    os.environ["KERAS_HOME"] = choice_home.name
    os.environ.pop("KERAS_VIT_EXECUTION", None)
    candidates = build_candidates(arch, args, report["notes"])
    report["inference"], report["training"] = {}, {}
    # A training step is counted as three forward passes (forward, two backward products).
    for kind, section, sizes, passes in (("infer", "inference", batches, 1),
                                         ("train", "training", train_batches, 3)):
        for batch in sizes:
            timings, round_peak = time_round_robin([c for c in candidates if getattr(c, kind)],
                                                   kind, batch, repeats, gemm, report["notes"])
            report[section][str(batch)] = {
                c.name: _throughput(timings[c.name], round_peak, passes * (c.forward_flops or forward_flops))
                for c in candidates if c.name in timings}
            report[section][str(batch)]["_tf_gemm_each_round"] = {
                k: summarize(v) for k, v in round_peak.items()}
            print(f"{section} batch {batch}: " + ", ".join(
                f"{n} {statistics.median(t['wall']):.2f}" for n, t in timings.items()), flush=True)
    report["execution_choices"] = {
        c.name: {f"{'inference' if kind == 'infer' else 'training'} {batch}": mode
                 for (kind, batch), mode in c.chosen.items()} for c in candidates if c.chosen}
    report["execution_timings"] = _stored_timings(choice_home.name)
    choice_home.cleanup()
    del candidates

    if not args.no_loading:
        with tempfile.TemporaryDirectory() as folder:
            report["loading"] = loading_benchmark(load_variants, arch.image_size if quick else 224,
                                                  1 if quick else args.load_repeats, folder)
    report["machine"]["load_average_end"] = os.getloadavg()
    report["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    write_results(args.out, "results", report, to_markdown(report))
    return report


def write_results(folder, stem, report, markdown):
    """`stem`.json and `stem`.md in `folder`; the Markdown is printed too."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{stem}.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(folder, f"{stem}.md"), "w") as f:
        f.write(markdown)
    print(markdown)


def to_markdown(report):
    """The report as Markdown tables: throughput, ratios against the best peer, loading."""
    m = report["machine"]
    caps = "".join(f", {k}={v}" for k, v in m.get("isa_caps", {}).items())
    lines = [f"Keras backend: {report['keras_backend']}. Machine: {m['cpu']}, {m['cores']} cores "
             f"({', '.join(m['simd'])}{caps}); load average "
             f"{m['load_average_start'][0]:.2f} at start, {m['load_average_end'][0]:.2f} at end. "
             f"{_arch_name(report)}, {report['forward_gflop_per_image']:.1f} GFLOP per image forward "
             "for every token "
             "(the GFLOP column: what each model executes per image and step); "
             f"{report['repeats']} round-robin repeats, median (min-max).", "",
             f"fp32 GEMM peak: TensorFlow {report['gemm_gflops']['tensorflow']['best']:.1f} GFLOP/s, "
             f"torch {report['gemm_gflops']['torch']['best']:.1f} GFLOP/s (best of all runs).", ""]
    titles = (("inference", "Inference"), ("training", "Training (forward, backward, SGD step)"))
    for section, title in titles:
        if not report[section]:
            continue
        lines += [f"### {title}", "", "| batch | model | images/s | images per CPU-s | GFLOP per image | "
                  "of TF GEMM peak (wall) | of TF GEMM peak (CPU) |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for batch, rows in report[section].items():
            for name, r in _model_rows(rows):
                s = r["images_per_s"]
                lines.append(f"| {batch} | {name} | {s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f}) | "
                             f"{r['images_per_cpu_s']['median']:.2f} | {r['gflop_per_image']:.1f} | "
                             f"{100 * r['fraction_of_tf_gemm_peak']:.0f}% | "
                             f"{100 * r['fraction_of_tf_gemm_peak_cpu']:.0f}% |")
            g = rows["_tf_gemm_each_round"]
            lines.append(f"| {batch} | TF fp32 GEMM, same rounds | {g['wall']['median']:.1f} GFLOP/s | "
                         f"{g['cpu']['median']:.1f} GFLOP per CPU-s | | | |")
        lines += ["", *_ratio_lines(report[section]), *_precision_lines(report[section]),
                  *_auto_lines(report[section], section, report.get("execution_choices", {}),
                               report.get("execution_timings", {})), ""]
    if "loading" in report:
        lines += ["### Checkpoint loading (fresh process each, from the page cache)", "",
                  "| variant | file | np.load | keras_vit load_weights | time ratio | np.load extra RSS | "
                  "keras_vit extra RSS | extra RSS / file |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, r in report["loading"].items():
            mb = 1 / 2**20
            lines.append(f"| {name} | {r['file_bytes'] * mb:.0f} MiB | "
                         f"{r['np_load_seconds']['median']:.2f} s | "
                         f"{r['keras_vit_seconds']['median']:.2f} s | {r['time_vs_np_load']:.2f}x | "
                         f"{r['np_load_extra_rss']['median'] * mb:.0f} MiB | "
                         f"{r['keras_vit_extra_rss']['median'] * mb:.0f} MiB | "
                         f"{r['extra_rss_vs_file']:.2f}x |")
        lines.append("")
    lines += [f"Note: {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def _stored_timings(home):
    """The seconds per call keras_vit.runtime.execution measured for each choice in this run."""
    try:
        with open(os.path.join(home, "keras_vit", "execution.json")) as f:
            return {key.rsplit(" | ", 1)[-1]: value for key, value in json.load(f).items()}
    except OSError:
        return {}


def _model_rows(rows):
    return [(name, r) for name, r in rows.items() if not name.startswith("_")]


def _arch_name(report):
    a = report["arch"]
    return f"ViT width {a['width']} depth {a['depth']} patch {a['patch_size']} at {a['image_size']} px"


def _auto_lines(section, title, choices, timings):
    """keras_vit in the mode it chose itself against each peer's best mode, per batch."""
    lines = []
    for batch, rows in section.items():
        auto = next((name for name in rows if name.startswith("keras_vit (auto")), None)
        if auto is None:
            continue
        best = _best_fp32_rates(rows)
        best.pop("keras_vit", None)
        mode = choices.get(auto, {}).get(f"{title} {batch}", "?")
        seconds = next((t["seconds_per_call"] for key, t in timings.items()
                        if key.startswith(f"{batch}x") and key.endswith(
                            "training" if title == "training" else "inference")), None)
        timed = (f" (timed graph {seconds['graph']:.3f} s, xla {seconds['xla']:.3f} s per call)"
                 if seconds else "")
        ours = rows[auto]["images_per_s"]["median"]
        lines.append(f"Batch {batch}: keras_vit (auto: chose {mode}{timed}) / best mode of "
                     + ", ".join(f"{family} = {ours / value:.2f}x" for family, value in best.items())
                     + ".")
    return lines


def _best_fp32_rates(rows):
    """{model family: the median images/s of its fastest fp32 mode} of one batch's rows."""
    best = {}
    for name, r in _model_rows(rows):
        family = name.split(" (")[0]
        if "bfloat16" not in name:
            best[family] = max(best.get(family, 0), r["images_per_s"]["median"])
    return best


def _best_rates(rows, bfloat16):
    """{model family: the median images/s of its fastest mode} at float32 or at bfloat16
    (keras_vit's mixed_bfloat16, timm's autocast)."""
    best = {}
    for name, r in _model_rows(rows):
        if ("bfloat16" in name) == bfloat16:
            family = name.split(" (")[0]
            best[family] = max(best.get(family, 0), r["images_per_s"]["median"])
    return best


def _precision_lines(section):
    """Per batch: each family's bfloat16 over its float32 (best modes), and keras_vit against
    each peer at bfloat16; from the same interleaved rounds."""
    lines = []
    for batch, rows in section.items():
        float32, bfloat16 = _best_rates(rows, False), _best_rates(rows, True)
        if not bfloat16:
            continue
        speedups = ", ".join(f"{family} {bfloat16[family] / float32[family]:.2f}x"
                             for family in bfloat16 if family in float32)
        ours = bfloat16.get("keras_vit")
        peers = ", ".join(f"{family} = {ours / value:.2f}x" for family, value in bfloat16.items()
                          if family != "keras_vit") if ours else ""
        lines.append(f"Batch {batch}: bfloat16 / float32 (each's best mode): {speedups}."
                     + (f" At bfloat16, keras_vit / {peers}." if peers else ""))
    return lines


def _ratio_lines(section):
    """keras_vit's best mode against each peer's best mode, per batch."""
    lines = []
    for batch, rows in section.items():
        best = _best_fp32_rates(rows)
        ours = best.pop("keras_vit", None)
        if ours and best:
            lines.append(f"Batch {batch}: keras_vit (best fp32 mode) / " + ", ".join(
                f"{family} = {ours / value:.2f}x" for family, value in best.items()) + ".")
    return lines


if __name__ == "__main__":
    main()
