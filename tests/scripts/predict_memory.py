"""Peak memory of `keras-vit predict FOLDER --model M --output FILE` in a fresh process.

    python tests/scripts/predict_memory.py WARM_FOLDER MODEL OUTPUT FOLDER [FOLDER ...]

The command first runs on WARM_FOLDER (a few images), so TensorFlow's and the
model's one-time allocations are made. Then, for each FOLDER in turn, the peak
(VmHWM, tests/memory.py) is reset to the current RSS and the command runs; what
is printed, as JSON, is each run's peak in MB. A later run starts from whatever
the earlier ones left resident, so growth with the number of images shows.
"""

import json
import sys

from keras_vit.cli.main import main
from tests.memory import peak_rss_mb, reset_peak

warm, model, output, *folders = sys.argv[1:]
assert main(["predict", warm, "--model", model, "--output", output]) == 0
peaks = []
for folder in folders:
    reset_peak()
    assert main(["predict", folder, "--model", model, "--output", output]) == 0
    peaks.append(peak_rss_mb())
print(json.dumps({"peak_mb": peaks}))
