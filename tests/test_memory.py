"""keras_vit.memory's measures of a process's memory: the peak resident set a run's
report.json records, and the reset a benchmark uses to measure each of several runs."""

import os
import sys

import numpy as np
import pytest

from keras_vit.memory import peak_memory, peak_resident_bytes, reset_peak_resident, resident_bytes

LINUX = sys.platform.startswith("linux") and os.path.exists("/proc/self/clear_refs")
BLOCK = 256 * 2**20  # bytes touched: far above the noise of the interpreter's own allocations


@pytest.mark.skipif(not LINUX, reason="VmHWM and its reset are Linux's")
def test_the_peak_counts_memory_touched_and_restarts_after_a_reset():
    before = resident_bytes()
    block = np.ones(BLOCK, np.uint8)  # written, so resident (calloc'd pages would not be)
    assert peak_resident_bytes() >= before + BLOCK
    high = peak_resident_bytes()
    del block  # a large array is its own mapping, returned to the OS when freed
    assert reset_peak_resident()
    assert peak_resident_bytes() <= high - BLOCK // 2
    assert peak_resident_bytes() >= resident_bytes() - BLOCK // 2  # the peak is today's again


def test_peak_memory_says_what_it_measured():
    record = peak_memory()
    assert record["bytes"] >= BLOCK // 256  # an interpreter with NumPy holds more than 1 MiB
    assert ("VmHWM" if LINUX else "ru_maxrss") in record["measure"]
