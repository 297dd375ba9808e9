"""Sizes that cannot fit: refused before anything is allocated, naming the argument at fault.

`check_fits(variant, image_size, classes, batch_size)` compares a lower bound of
the memory a forward pass needs with this machine's physical memory. The bound
counts only what must exist at once: the float32 parameters that grow with the
arguments (position embedding, head, blocks) and, per image of a batch, its
input, one layer's tokens and one layer's attention maps (at 2 bytes a number,
mixed precision's). A size over it cannot run here whatever else happens, and
would otherwise end in an allocator's traceback or the kernel's OOM killer.
Sizes under it may still not fit (the optimizer's state, a GPU's smaller memory):
the command line turns the out-of-memory error they raise into one line instead
(keras_vit/cli/common.py).

`ViT` and `BiT` call it first thing (with a batch of one), so a library call is refused
as early as the command; the command and `train` call it again with their batch size.

`peak_memory()` is what a run's report.json records of the memory it took: the process's
peak resident set (Linux's VmHWM, else `resource`'s ru_maxrss), which counts TensorFlow's
own allocations (tracemalloc sees Python's only). `reset_peak_resident()` starts that peak
again from the present resident set, so a process running several runs (a benchmark) can
measure each.
"""

import math
import os
import sys

from keras_vit.errors import SizeError

__all__ = ["check_fits", "physical_memory", "peak_memory", "peak_resident_bytes", "resident_bytes",
           "reset_peak_resident"]


def physical_memory():
    """Bytes of RAM on this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX
        return None


def _status_bytes(field):
    """A `kB` field of Linux's /proc/self/status ("VmHWM", "VmRSS") in bytes; None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def resident_bytes():
    """This process's resident set now (None where the OS does not say)."""
    return _status_bytes("VmRSS")


def peak_resident_bytes():
    """This process's peak resident set in bytes: VmHWM on Linux (which `reset_peak_resident`
    restarts), else ru_maxrss (kilobytes on Linux, bytes on macOS); None where neither exists."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def peak_memory():
    """report.json's record: {"bytes": the peak resident set, "measure": how it was read}."""
    measure = "VmHWM" if _status_bytes("VmHWM") is not None else "ru_maxrss"
    return {"bytes": peak_resident_bytes(), "measure": f"peak resident set of the process ({measure})"}


def reset_peak_resident():
    """Restarts the peak resident set from the present one (Linux >= 4.0, writing 5 to
    /proc/self/clear_refs); True when it did, False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _gigabytes(count):
    return f"{count / 2**30:,.1f} GiB"


def check_fits(variant, image_size=None, classes=None, batch_size=1, memory=None):
    """Raises `SizeError` when `image_size`, `classes` or `batch_size` cannot fit in `memory`
    bytes (default: this machine's RAM); None arguments are the defaults, which fit."""
    memory = memory or physical_memory()
    if memory is None:
        return
    pair = (224, 224) if image_size is None else (
        (image_size, image_size) if isinstance(image_size, int) else tuple(image_size))
    if not hasattr(variant, "token_grid"):  # a BiT ResNet: no tokens
        return _check_resnet_fits(variant, pair, classes, batch_size, memory)
    rows, columns = variant.token_grid(pair)
    tokens = rows * columns + 1
    width = variant.width
    blocks = variant.depth * (4 * width * width + 2 * width * variant.mlp_dim)
    # The patch embedding's kernel, and a hybrid's ResNet trunk: a config may make either large.
    channels = variant.trunk_channels if variant.is_hybrid else 3
    blocks += variant.patch_size ** 2 * channels * width
    if variant.is_hybrid:
        blocks += _resnet_weights(variant.resnet_stages, variant.resnet_width)
    position = 4 * tokens * width
    head = 4 * width * (classes or 0)
    example = 4 * 3 * math.prod(pair) + 2 * tokens * width + 2 * variant.heads * tokens * tokens
    have = f"this machine has {_gigabytes(memory)}"
    if head > memory:
        raise SizeError(f"classes {classes} cannot fit: the head alone needs "
                        f"{_gigabytes(head)}, {have}.", parameter="classes")
    if 4 * blocks > memory:  # the architecture itself (one a config describes), at any size
        raise SizeError(f"{variant.name} cannot fit: its weights alone need "
                        f"{_gigabytes(4 * blocks)}, {have}.", parameter="variant")
    if position + example + 4 * blocks > memory:
        raise SizeError(f"image_size {image_size} cannot fit: one image needs at "
                        f"least {_gigabytes(position + example)}, {have}.", parameter="image_size")
    needed = position + head + 4 * blocks + example * (batch_size or 1)
    if needed > memory:
        raise SizeError(f"batch_size {batch_size} cannot fit: a batch needs at "
                        f"least {_gigabytes(needed)}, {have}.", parameter="batch_size")


def _resnet_weights(stages, width):
    """A BiT's (or a hybrid's trunk's) convolution weights (GroupNorm's few aside): its
    bottleneck units' 1x1, 3x3 and 1x1 kernels, each stage's projection, the 7x7 root."""
    root = 64 * width
    count, channels = 7 * 7 * 3 * root, root
    for stage, units in enumerate(stages):
        features = root * 2 ** stage
        count += channels * 4 * features  # the projection of the stage's first unit
        for _ in range(units):
            count += channels * features + 9 * features * features + features * 4 * features
            channels = 4 * features
    return count


def _check_resnet_fits(variant, pair, classes, batch_size, memory):
    have = f"this machine has {_gigabytes(memory)}"
    head = 4 * variant.channels * (classes or 0)
    weights = 4 * _resnet_weights(variant.units, variant.width)
    # Per image: its input, and the root convolution's output (the largest map), at 2 bytes.
    example = 4 * 3 * math.prod(pair) + 2 * 64 * variant.width * math.prod(-(-s // 2) for s in pair)
    if head > memory:
        raise SizeError(f"classes {classes} cannot fit: the head alone needs "
                        f"{_gigabytes(head)}, {have}.", parameter="classes")
    if weights + example > memory:
        raise SizeError(f"image_size {pair[0]}x{pair[1]} cannot fit: one image needs "
                        f"at least {_gigabytes(weights + example)}, {have}.", parameter="image_size")
    needed = weights + head + example * (batch_size or 1)
    if needed > memory:
        raise SizeError(f"batch_size {batch_size} cannot fit: a batch needs at "
                        f"least {_gigabytes(needed)}, {have}.", parameter="batch_size")
