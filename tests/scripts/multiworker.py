"""Run as a script: one worker of a MultiWorkerMirroredStrategy digits run.

Usage: multiworker.py INDEX PORT0 PORT1 OUTPUT. Worker 0 writes OUTPUT, worker 1
OUTPUT/worker-1.
"""

import json
import os
import sys

index, ports, output = int(sys.argv[1]), sys.argv[2:4], sys.argv[4]
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
    "task": {"type": "worker", "index": index},
})

from keras_vit.training import train  # noqa: E402

report = train("digits", epochs=1, strategy="auto", output=output, verbose=0)
print("RESULT " + json.dumps({"strategy": report["strategy"], "replicas": report["replicas"],
                              "accuracy": report["accuracy"]}))
