"""keras_vit.memory's measures of a process's memory: the peak resident set a run's
report.json records, and the reset a benchmark uses to measure each of several runs."""

import json
import os
import sys

import pytest

from keras_vit.memory import peak_memory
from tests.bare_packages import FRAMEWORKS, PRELUDE

LINUX = sys.platform.startswith("linux") and os.path.exists("/proc/self/clear_refs")
BLOCK = 256 * 2**20  # bytes touched: far above the noise of the interpreter's own allocations


# In a process of its own, single-threaded and small: in a test worker, other threads
# (TensorFlow's pools, a tf.data iterator an earlier test left prefetching) allocate while
# this runs, and once (under a burnt core, 2-GiB worker) the peak read after the reset was
# the one before it. Only keras_vit.memory is imported (tests/bare_packages.py: the package's
# __init__ would start TensorFlow and its threads).
PEAK_AND_RESET = PRELUDE + f"""
import json
import numpy as np
from keras_vit.memory import peak_resident_bytes, reset_peak_resident, resident_bytes

before = resident_bytes()
# The anonymous part of it: the libraries' file-backed pages counted in `before` may be dropped
# under memory pressure before the peak is read (seen while another run held most of the
# machine's memory); pages the process wrote leave only to swap.
with open("/proc/self/status") as status:
    before_anonymous = next(int(line.split()[1]) * 1024 for line in status
                            if line.startswith("RssAnon:"))
block = np.ones({BLOCK}, np.uint8)  # written, so resident (calloc'd pages would not be)
high = peak_resident_bytes()
del block  # a large array is its own mapping, returned to the OS when freed
reset = reset_peak_resident()
print(json.dumps({{"before": before, "before_anonymous": before_anonymous, "high": high,
                  "reset": reset,
                  "after_reset": peak_resident_bytes(), "resident": resident_bytes()}}))
""" + FRAMEWORKS


@pytest.mark.skipif(not LINUX, reason="VmHWM and its reset are Linux's")
def test_the_peak_counts_memory_touched_and_restarts_after_a_reset(python):
    run = python(["-c", PEAK_AND_RESET], timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[-1] == "FRAMEWORKS []", run.stdout  # alone, without TensorFlow's threads
    m = json.loads(lines[-2])
    assert m["high"] >= m["before_anonymous"] + BLOCK
    assert m["reset"] is True
    assert m["after_reset"] <= m["high"] - BLOCK // 2
    assert m["after_reset"] >= m["resident"] - BLOCK // 2  # the peak is today's again


def test_peak_memory_says_what_it_measured():
    record = peak_memory()
    assert record["bytes"] >= BLOCK // 256  # an interpreter with NumPy holds more than 1 MiB
    assert ("VmHWM" if LINUX else "ru_maxrss") in record["measure"]
