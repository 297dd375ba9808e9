"""Peak memory of loading a large timm file: DINOv2-g/14 (1.1B parameters, SwiGLU).

    python -m benchmarks.load_memory              # vit_giant_patch14_dinov2: a 4.5 GB file
    python -m benchmarks.load_memory --tiny       # the same machinery on a 1-block DINOv2-S

The file is timm's full-size key layout with random values: the shapes come from timm's
model built on torch's `meta` device (no memory), and each tensor is drawn with NumPy and
written straight to the file, so the writer never holds more than one tensor. The load
then runs in a fresh process: `keras_vit.ViT(architecture)` builds the model, and
`keras_vit.load_weights` reads the file into it. Memory is the kernel's resident-set
high-water mark (VmHWM), reset before the build and again before the load:

- "peak": the highest RSS during build and load, above the process before the build
  (imports done); the model's own weights are part of it. The target: below 1.5x the
  weights' size.
- "load extra": the high-water mark during the load above the RSS when the load began
  (the built model).
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load_memory",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a 1-block DINOv2-S/14 at 56 px")
    parser.add_argument("--architecture", default=None,
                        help="timm's architecture (default vit_giant_patch14_dinov2)")
    parser.add_argument("--folder", default=None, help="where the file is written (default: a "
                                                       "temporary folder, deleted after)")
    parser.add_argument("--out", default="benchmarks/results", help="folder for load_memory.json/.md")
    return parser.parse_args(argv)


def timm_shapes(architecture, **kwargs):
    """{key: shape} of timm's state dict, from the model built on the meta device."""
    import torch

    from tests.oracle import import_timm

    with torch.device("meta"):
        model = import_timm().create_model(architecture, pretrained=False, **kwargs)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def write_random_safetensors(shapes, path, seed=0):
    """Writes float32 random tensors of `shapes` to a .safetensors file one at a time;
    returns the file's size. LayerNorm scales near 1, the rest near 0, as a trained file."""
    names = sorted(shapes)
    header, offset = {}, 0
    for name in names:
        size = int(np.prod(shapes[name])) * 4
        header[name] = {"dtype": "F32", "shape": list(shapes[name]),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            values = rng.standard_normal(shapes[name], dtype=np.float32)
            values *= 0.02
            if "norm" in name and name.endswith("weight"):
                values += 1
            f.write(values.tobytes())
            del values
    return os.path.getsize(path)


def _memory():
    """(VmRSS, VmHWM) in bytes from one read of /proc/self/status: within one read the kernel
    reports the high-water mark as at least the current RSS; across reads RSS may fall (another
    thread frees memory), so each phase compares figures of its own read."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) * 1024
    if len(fields) != 2:
        raise RuntimeError("VmRSS or VmHWM not in /proc/self/status")
    return fields["VmRSS"], fields["VmHWM"]


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets VmHWM to the current RSS
        f.write("5")


def measure(architecture, path, image_size, include_top, depth=None):
    """In this process: build, then load; bytes and seconds of each."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import dataclasses

    import keras_vit

    variant = keras_vit.get_variant(architecture)
    if depth:
        variant = dataclasses.replace(variant, depth=depth)
    _reset_peak()
    baseline, _ = _memory()
    start = time.perf_counter()
    model = keras_vit.ViT(variant, image_size=image_size, include_top=include_top)
    build_seconds = time.perf_counter() - start
    built, build_peak = _memory()
    _reset_peak()
    load_start, _ = _memory()
    start = time.perf_counter()
    keras_vit.load_weights(model, path)
    load_seconds = time.perf_counter() - start
    load_end, load_peak = _memory()
    weights = sum(int(np.prod(v.shape)) * 4 for v in model.weights)
    return {"baseline_rss": baseline, "built_rss": built, "build_peak_rss": build_peak,
            "load_start_rss": load_start, "load_end_rss": load_end, "load_peak_rss": load_peak,
            "weights_bytes": weights, "peak": max(build_peak, load_peak) - baseline,
            "load_extra": load_peak - load_start,
            "build_seconds": build_seconds, "load_seconds": load_seconds}


def main(argv=None):
    args = parse_args(argv)
    architecture = args.architecture or ("vit_small_patch14_dinov2" if args.tiny
                                         else "vit_giant_patch14_dinov2")
    timm_args = {"depth": 1, "img_size": 56} if args.tiny else {}
    shapes = timm_shapes(architecture, **timm_args)
    image_size = 56 if args.tiny else None
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        path = os.path.join(folder, f"{architecture}.safetensors")
        start = time.perf_counter()
        file_bytes = write_random_safetensors(shapes, path)
        write_seconds = time.perf_counter() - start
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        command = [sys.executable, "-m", "benchmarks.load_memory", "--measure", architecture, path,
                   str(image_size or 0), str(int("head.weight" in shapes)),
                   str(timm_args.get("depth", 0))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        out = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        if out.returncode:
            raise RuntimeError(f"the load failed:\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
    from benchmarks.run import machine, write_results

    report = {"architecture": architecture, "file_bytes": file_bytes, "tensors": len(shapes),
              "parameters": sum(int(np.prod(s)) for s in shapes.values()),
              "write_seconds": write_seconds, "machine": machine(), **result,
              "peak_vs_weights": result["peak"] / result["weights_bytes"],
              "load_extra_vs_weights": result["load_extra"] / result["weights_bytes"]}
    report["machine"]["load_average_end"] = os.getloadavg()
    write_results(args.out, "load_memory", report, to_markdown(report))
    return report


def to_markdown(report):
    mib = 2 ** 20
    m = report["machine"]
    return "\n".join([
        f"Machine: {m['cpu']}, {m['cores']} cores. `{report['architecture']}`: "
        f"{report['parameters'] / 1e6:,.1f}M parameters in {report['tensors']} tensors, a "
        f"{report['file_bytes'] / mib:,.0f} MiB float32 safetensors file.", "",
        "| weights | build peak | load peak | peak (build and load) | peak / weights "
        "| load extra (above the built model) | load extra / weights | build | load |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {report['weights_bytes'] / mib:,.0f} MiB "
        f"| {(report['build_peak_rss'] - report['baseline_rss']) / mib:,.0f} MiB "
        f"| {(report['load_peak_rss'] - report['baseline_rss']) / mib:,.0f} MiB "
        f"| {report['peak'] / mib:,.0f} MiB | {report['peak_vs_weights']:.2f}x "
        f"| {report['load_extra'] / mib:,.0f} MiB | {report['load_extra_vs_weights']:.2f}x "
        f"| {report['build_seconds']:.1f} s | {report['load_seconds']:.1f} s |", ""])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        architecture, path, size, top, depth = sys.argv[2:7]
        print(json.dumps(measure(architecture, path, int(size) or None, top == "1",
                                 int(depth) or None)))
    else:
        main()
