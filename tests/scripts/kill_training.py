"""Run as a script: kill -9 a digits training run at random moments, re-running it each time.

Usage: kill_training.py OUTPUT EPOCHS KILLS SEED. The parent imports TensorFlow
and keras_vit once and runs no TensorFlow op; each attempt is a forked child
that runs `train` (so an attempt costs no TensorFlow start-up) and is killed
with SIGKILL: every other kill while a file is being written (the child holds
each write open 0.3 s, tests/writes.py), the others at a random
moment. After each kill the outputs are checked for torn files; then a last
attempt runs to the end. Prints one JSON line: the kill points, the torn files
seen, the last attempt's exit code.
"""

import json
import multiprocessing
import os
import random
import sys
import time

from keras_vit.training import train
from tests.test_atomic_kills import read_log, torn_files, writes_in_flight
from tests.writes import hold_writes_open


def attempt(output, epochs, hold):
    if hold:
        hold_writes_open(0.3)
    train("digits", model="demo", epochs=epochs, output=output, verbose=0)


def main(output, epochs, kills, seed):
    fork = multiprocessing.get_context("fork")
    rng = random.Random(seed)
    points, torn = [], []
    while len(points) < kills:
        child = fork.Process(target=attempt, args=(output, epochs, True))
        start = time.monotonic()
        child.start()
        point = None
        if len(points) % 2 == 0:  # during a write: at the n-th temporary file seen
            wanted, seen = rng.randint(1, 4), set(writes_in_flight(output))  # not leftovers
            while child.is_alive() and time.monotonic() - start < 300:
                new = set(writes_in_flight(output)) - seen
                seen |= new
                if new and len(seen) >= wanted:
                    time.sleep(rng.uniform(0, 0.2))  # inside the 0.3 s hold
                    point = "writing " + ", ".join(sorted(new))
                    break
                time.sleep(0.02)
        else:  # any moment: loading, restoring, an epoch, a write, evaluation, the report
            delay = rng.uniform(0.5, 10)
            child.join(timeout=delay)
            point = f"{delay:.1f} s after start"
        alive = child.is_alive()
        child.kill()
        child.join()
        if alive and point:
            log = os.path.join(output, "log.csv")
            points.append([point, len(read_log(output)) if os.path.exists(log) else 0])
            torn += [[len(points), name] for name in torn_files(output)]
    last = fork.Process(target=attempt, args=(output, epochs, False))
    last.start()
    last.join(timeout=600)
    print(json.dumps({"points": points, "torn": torn, "last_exit": last.exitcode}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
