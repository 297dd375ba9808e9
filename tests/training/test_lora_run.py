"""`train(lora_rank=...)`: the run trains LoRA factors and the head, records what trained, and
saves merged models that load without LoRA."""

import dataclasses
import json
import os

import keras
import numpy as np

from keras_vit import data
from keras_vit.memory import physical_memory
from keras_vit.training import train
from keras_vit.variants import DEMO_VARIANT
from tests.models.test_lora import _vit_parameters

# The demo ViT with one block instead of four: what the run records and saves holds at any
# depth, and the run traces its training, validation and prediction, and each file's load,
# at a cost that grows with the blocks.
ONE_BLOCK = dataclasses.replace(DEMO_VARIANT, depth=1)


def test_a_lora_run_records_its_parameters_and_saves_merged_models(tmp_path):
    output = str(tmp_path / "run")
    report = train("digits", model=ONE_BLOCK, steps=2, batch_size=16, output=output, verbose=0,
                   execution="graph", lora_rank=2, lora_targets=("query", "value"))
    with open(os.path.join(output, "report.json")) as f:
        saved = json.load(f)
    with open(os.path.join(output, "run.json")) as f:
        assert json.load(f)["config"]["lora"] == {"rank": 2, "targets": ["query", "value"]}
    counts = saved["parameter_counts"]
    assert saved["lora"] == {"rank": 2, "targets": ["query", "value"]}
    # counted from its shapes by hand, 10 classes, 16 px
    expected = _vit_parameters(ONE_BLOCK, 2, ("query", "value"), 10,
                               (16 // ONE_BLOCK.patch_size) ** 2 + 1)
    assert (counts["trainable"], counts["total"]) == expected
    assert counts["total"] == saved["parameters"]
    # The run's cost: its 2 training batches, the first (tracing) aside, and the peak resident
    # memory, which holds at least the model's float32 weights and at most the machine.
    assert saved["step_seconds"]["batches_timed"] == 1
    assert saved["step_seconds"]["median"] > 0  # measured (no bound on how long: any machine)
    assert 4 * counts["total"] < saved["peak_memory"]["bytes"] <= physical_memory()
    for name in ("model.keras", "best.keras"):
        model = keras.saving.load_model(os.path.join(output, name))
        assert not [v.path for v in model.weights if "lora" in v.path], name
    # The report's accuracy (the unmerged model's predictions) is the merged file's.
    model = keras.saving.load_model(os.path.join(output, "model.keras"))
    splits = data.load_digits()
    predictions = np.argmax(model.predict(data.make_pipeline(splits.test, 16, 128, False),
                                          verbose=0), axis=-1)
    labels = np.array([y for _, y in splits.test.as_numpy_iterator()])
    assert np.mean(predictions == labels) == report["accuracy"]
