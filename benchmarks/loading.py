"""Checkpoint loading: time and peak resident memory, each in a fresh process.

`python -m benchmarks.loading MODE VARIANT PATH` measures one load and prints
one JSON line. MODE "keras_vit" builds the model with random weights, then
times `keras_vit.load_weights` of an official-layout `.npz`; MODE "np_load"
times a plain `np.load` of every array of the same file. Peak memory is the
kernel's high-water mark (VmHWM), reset after setup, so it counts only what
the load itself adds above what the process already held (for keras_vit: the
built model, whose own weights are already resident).
"""

import json
import os
import sys
import time

import numpy as np


def official_arrays(variant, image_size=224, classes=1000, seed=0):
    """Random arrays under the official checkpoint's keys and shapes, for a plain ViT.

    The key layout is the test oracle's (tests/oracle.py), spelled there
    independently of keras_vit's own table.
    """
    from tests.oracle import official_vit_arrays

    grid = (image_size // variant.patch_size,) * 2
    return official_vit_arrays(variant, grid, classes=classes, seed=seed)


def write_checkpoint(variant, path, image_size=224):
    """Writes a random official-layout `.npz` (uncompressed, as released); returns its size."""
    np.savez(path, **official_arrays(variant, image_size))
    return os.path.getsize(path)


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets VmHWM to the current RSS
        f.write("5")


def measure(mode, variant_name, path, image_size):
    """One load in this process: `{"seconds", "rss_before", "peak_rss", "extra_rss", ...}`."""
    result = {"mode": mode, "variant": variant_name, "file_bytes": os.path.getsize(path)}
    if mode == "keras_vit":
        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
        import keras_vit

        start = time.perf_counter()
        model = keras_vit.ViT(variant_name, image_size=image_size)
        result["build_seconds"] = time.perf_counter() - start
        result["weights_bytes"] = sum(int(np.prod(v.shape)) * 4 for v in model.weights)
        load = lambda: keras_vit.load_weights(model, path)  # noqa: E731
    elif mode == "np_load":
        def load():
            with np.load(path) as data:
                return {key: data[key] for key in data.files}
    else:
        raise ValueError(f'mode must be "keras_vit" or "np_load", got {mode!r}.')
    result["rss_before"] = _status("VmRSS")
    _reset_peak()
    start = time.perf_counter()
    loaded = load()
    result["seconds"] = time.perf_counter() - start
    result["peak_rss"] = _status("VmHWM")
    result["extra_rss"] = result["peak_rss"] - result["rss_before"]
    del loaded
    return result


if __name__ == "__main__":
    mode, variant_name, path, image_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    print(json.dumps(measure(mode, variant_name, path, image_size)))
