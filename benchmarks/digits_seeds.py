"""The digits main job over several seeds: the held-out accuracy range and the time the docs state.

    python -m benchmarks.digits_seeds                 # seeds 0 1 2, one fresh process each
    python -m benchmarks.digits_seeds --seeds 0 1 2 3 4
    python -m benchmarks.digits_seeds --epochs 2 --seeds $(seq 0 19)   # the tests' shared run

Runs `keras-vit train --dataset digits --seed S` (the command the README gives, its defaults
otherwise) one seed after another, each in a fresh process in a temporary folder, and prints
one line per seed (accuracy, wall-clock and CPU seconds) and the range, as the README and
docs/fine-tuning.md quote it. The seed changes the initial weights, the shuffling and the
augmentation; the held-out split is fixed (keras_vit.data.SPLIT_SEED). `--epochs 2` is the
shared run the tests read (tests/conftest.py, DIGITS_RUN): the accuracies it prints bound what
a test may assert about that run (TensorFlow's CPU threads make runs of one seed differ too).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_seed(seed, folder, epochs=None):
    """(accuracy, wall seconds, CPU seconds) of one digits run with `seed` (and `epochs`, or the
    command's default)."""
    output = os.path.join(folder, f"seed-{seed}")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "keras_vit.cli", "train", "--dataset", "digits",
                    "--seed", str(seed), "--output", output,
                    *(["--epochs", str(epochs)] if epochs else [])], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(output, "report.json")) as f:
        return json.load(f)["accuracy"], wall, cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, help="epochs (default: the command's)")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            accuracy, wall, cpu = run_seed(seed, folder, args.epochs)
            results.append(accuracy)
            print(f"seed {seed}: accuracy {accuracy:.4f}, {wall:.0f} s wall-clock, "
                  f"{cpu:.0f} s CPU ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})",
                  flush=True)
    print(f"held-out accuracy {min(results):.4f} to {max(results):.4f} over seeds "
          f"{', '.join(map(str, args.seeds))}"
          f"{f' ({args.epochs} epochs)' if args.epochs else ''}")
    return results


if __name__ == "__main__":
    main()
