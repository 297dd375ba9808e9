"""benchmarks.transfer in a tiny mode: the files and table it writes, and the held-out split
every transfer run is scored on. No accuracy or time is asserted: a 2-step run's are noise."""

import argparse
import json
import os

import numpy as np
import pytest

from benchmarks import transfer
from keras_vit.data import load_digits


def test_every_label_count_is_scored_on_the_same_held_out_images_of_digits_5_to_9():
    every = transfer.digits_splits(transfer.TARGET_DIGITS)
    few = transfer.digits_splits(transfer.TARGET_DIGITS, [0, 1, 2], examples=10)
    assert few.split["fingerprints"]["test"] == every.split["fingerprints"]["test"]
    assert every.num_test == 180 and few.num_train == 12  # 3 images repeated 4 times
    # The same images as keras_vit.load_digits' held-out split holds of the digits 5-9.
    images, labels = zip(*every.test.as_numpy_iterator())
    reference = [(x, y) for x, y in load_digits().test.as_numpy_iterator() if y >= 5]
    np.testing.assert_array_equal(np.stack(images), np.stack([x for x, _ in reference]))
    np.testing.assert_array_equal(np.array(labels) + 5, [y for _, y in reference])
    assert every.class_names == ["5", "6", "7", "8", "9"]


def test_the_outputs_hold_each_method_once_with_the_mean_and_sd_of_its_seeds(tmp_path):
    rows = [{"method": method, "shots": "1", "augment": "none", "seed": seed,
             "accuracy": accuracy, "trainable": 325, "peak_bytes": 2**30,
             "peak_above_start_bytes": 2**20 * seed, "step_seconds": None if method == "probe"
             else 0.01} for method, seed, accuracy in (("probe", 0, 0.5), ("probe", 1, 0.7),
                                                        ("lora1", 0, 0.2), ("lora1", 1, 0.2))]
    result = transfer.write_outputs(argparse.Namespace(seeds=[0, 1]), rows, [], 0.0,
                                    str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["transfer.json", "transfer.md", "transfer.png"]
    probe = next(s for s in result["summary"] if s["method"] == "probe")
    # By hand: mean 0.6, sample sd sqrt(((0.1)^2 * 2) / 1); peaks 0 and 1 MiB above start.
    assert probe["accuracy"] == pytest.approx(0.6) and probe["accuracy_sd"] == pytest.approx(
        0.1 * 2 ** 0.5) and probe["peak_above_start_mib"] == pytest.approx(0.5)
    assert probe["step_ms"] is None and probe["seeds"] == 2
    with open(tmp_path / "transfer.md") as f:
        table = f.read().splitlines()
    assert table[2] == "| probe | – | 1 | 60.0 ± 14.1 | 325 | 0 | – |"
    assert table[3] == "| lora1 | none | 1 | 20.0 ± 0.0 | 325 | 0 | 10.0 |"


# ~30 CPU-seconds (a pre-training and a LoRA run, each compiled): slow. The default test
# above checks the same outputs from planted rows, and tests/training/test_lora_run.py the
# report fields a run gives them.
@pytest.mark.slow
def test_a_tiny_run_writes_its_table_json_and_plot(tmp_path):
    out = str(tmp_path / "out")
    result = transfer.main(["--seeds", "0", "--shots", "1", "--methods", "probe", "lora1",
                            "--no-augment", "--pretrain-steps", "2", "--steps", "2",
                            "--output-dir", out])
    assert sorted(os.listdir(out)) == ["transfer.json", "transfer.md", "transfer.png"]
    with open(os.path.join(out, "transfer.json")) as f:
        saved = json.load(f)
    assert saved["summary"] == result["summary"]
    runs = {row["method"]: row for row in saved["runs"]}
    assert sorted(runs) == ["lora1", "probe"]
    for row in runs.values():
        assert row["train_images"] == 5 and 0 <= row["accuracy"] <= 1
    assert runs["lora1"]["trainable"] < runs["lora1"]["total"]
    assert runs["lora1"]["step_seconds"] > 0
    with open(os.path.join(out, "transfer.md")) as f:
        table = f.read().splitlines()
    assert len(table) == 2 + 2  # header, rule, one line per method
