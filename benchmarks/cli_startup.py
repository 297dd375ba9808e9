"""How long `keras-vit --help` takes in a fresh process; prints the median of several runs.

    python -m benchmarks.cli_startup            # 7 runs of this checkout's keras-vit --help

Runs the script pip installs for the `keras-vit` entry point (the same three lines,
written to a temporary folder), with this checkout first on PYTHONPATH, so it
measures this source tree whatever is installed. Also reports whether Keras or
TensorFlow were imported to print the help (they should not be).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What pip writes for `keras-vit = keras_vit.cli:main` (pip's console-script template),
# plus a report, at exit, of the heavy modules the process imported.
LAUNCHER = """import atexit
import sys

atexit.register(lambda: print("heavy modules:", sorted(
    m for m in ("keras", "tensorflow", "jax", "torch") if m in sys.modules), file=sys.stderr))
from keras_vit.cli import main

if __name__ == "__main__":
    sys.exit(main())
"""


def write_launcher(folder):
    """The `keras-vit` script in `folder` (its name is what the package recognises)."""
    path = os.path.join(folder, "keras-vit")
    with open(path, "w") as f:
        f.write(LAUNCHER)
    return path


def run_help(launcher, argv=("--help",), log_level="2"):
    """(seconds, completed process) of one fresh `keras-vit --help` (or `keras-vit argv...`),
    TF_CPP_MIN_LOG_LEVEL set to `log_level`."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": log_level}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, launcher, *argv], env=env, capture_output=True,
                            text=True, timeout=120)
    return time.perf_counter() - start, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        launcher = write_launcher(folder)
        times, last = [], None
        for _ in range(args.runs):
            seconds, last = run_help(launcher)
            if last.returncode != 0:
                sys.exit(f"keras-vit --help failed:\n{last.stderr}")
            times.append(seconds)
    heavy = last.stderr.strip().splitlines()[-1]
    print(f"keras-vit --help: median {statistics.median(times):.3f} s, min {min(times):.3f} s, "
          f"max {max(times):.3f} s over {args.runs} fresh processes; {heavy}")


if __name__ == "__main__":
    main()
