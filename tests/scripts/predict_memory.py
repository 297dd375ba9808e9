"""Peak memory of `keras-vit predict FOLDER --model M --output FILE` in a fresh process.

    python tests/scripts/predict_memory.py WARM_FOLDER FOLDER MODEL OUTPUT

The same command first runs on WARM_FOLDER (a few images), so TensorFlow's and the
model's one-time allocations are made; the peak (VmHWM, tests/memory.py) is then
reset, and what is printed is the peak of the run on FOLDER alone, in MB, as JSON.
"""

import json
import sys

from keras_vit.cli.main import main
from tests.memory import peak_rss_mb, reset_peak, status_mb

warm, folder, model, output = sys.argv[1:5]
assert main(["predict", warm, "--model", model, "--output", output]) == 0
reset_peak()
before = status_mb("VmRSS")
code = main(["predict", folder, "--model", model, "--output", output])
print(json.dumps({"code": code, "peak_mb": peak_rss_mb(), "before_mb": before}))
