"""benchmarks.transfer in a tiny mode: the files and table it writes, and the held-out split
every transfer run is scored on. No accuracy or time is asserted: a 2-step run's are noise."""

import argparse
import json
import os

import numpy as np
import pytest

from benchmarks import transfer
from keras_vit.data import load_digits

ARGS = argparse.Namespace(seeds=[0, 1], steps=None, epochs=32, min_steps=50)


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
             else 0.01, **({} if method == "probe" else {"updates": 50})}
            for method, seed, accuracy in (("lora1", 0, 0.2), ("lora1", 1, 0.2),
                                           ("probe", 0, 0.5), ("probe", 1, 0.7))]
    result = transfer.write_outputs(ARGS, rows, [], 0.0, str(tmp_path), ["--seeds", "0", "1"])
    assert sorted(os.listdir(tmp_path)) == ["transfer.json", "transfer.md", "transfer.png"]
    probe = next(s for s in result["summary"] if s["method"] == "probe")
    # By hand: mean 0.6, sample sd sqrt(((0.1)^2 * 2) / 1); peaks 0 and 1 MiB above start.
    assert probe["accuracy"] == pytest.approx(0.6) and probe["accuracy_sd"] == pytest.approx(
        0.1 * 2 ** 0.5) and probe["peak_above_start_mib"] == pytest.approx(0.5)
    assert probe["step_ms"] is None and probe["seeds"] == 2
    with open(tmp_path / "transfer.md") as f:
        table = f.read().splitlines()
    # In METHODS' order, whatever the rows' order.
    assert table[2] == "| probe | – | 1 | – | – | 60.0 ± 14.1 | 325 | 0 | – | 1 |"
    assert table[3] == "| lora1 | none | 1 | 50 | – | 20.0 ± 0.0 | 325 | 0 | 10.0 | 1 |"
    assert table[5] == ("Run 1: `python -m benchmarks.transfer --seeds 0 1`; length: 32 epochs, "
                        "at least 50 updates.")


def test_every_label_count_trains_32_passes_over_its_images_and_at_least_50_updates():
    # 1 and 5 labels per class: 5 and 25 images, one batch, 32 passes of one update: the floor.
    assert transfer.transfer_steps(5, 5) == transfer.transfer_steps(25, 25) == 50
    # 10 labels per class: 50 images in batches of 32, 32 passes = 1,600 images = 50 batches,
    # the 50 updates of the fixed rule that ran before.
    assert transfer.transfer_steps(50, 32) == 50
    # All labels: 716 images of 5-9 in batches of 32, 32 passes = 716 batches.
    assert len(transfer.target_labels()) == 716 and transfer.transfer_steps(716, 32) == 716
    assert transfer.transfer_steps(716, 32, epochs=1, min_steps=1) == 23  # ceil(716 / 32)


def test_update_keeps_the_earlier_rows_it_does_not_repeat_marked_with_their_run(tmp_path):
    def row(method, shots, accuracy, **extra):
        return {"method": method, "shots": shots, "augment": "none", "seed": 0,
                "accuracy": accuracy, "trainable": 1, "peak_bytes": None,
                "peak_above_start_bytes": None, "step_seconds": 0.01, **extra}

    # A file as written before invocations were recorded: its rows trained 50 updates each.
    earlier = {"command": "python -m benchmarks.transfer",
               "arguments": {"seeds": [0], "shots": ["10", "all"], "steps": 50,
                             "no_augment": True},
               "machine": {}, "seconds": 1.0, "pretrained": [],
               "runs": [row("full", "10", 0.7), row("full", "all", 0.6), row("head", "all", 0.5)]}
    with open(tmp_path / "transfer.json", "w") as f:
        json.dump(earlier, f)
    kept = transfer.earlier_runs(str(tmp_path / "transfer.json"))
    result = transfer.write_outputs(ARGS, [row("full", "all", 0.9, updates=716,
                                               learning_rate=0.1)], [], 0.0,
                                    str(tmp_path), ["--shots", "all", "--update"], kept)
    table = {(s["method"], s["shots"]): s for s in result["summary"]}
    assert sorted(table) == [("full", "10"), ("full", "all"), ("head", "all")]
    assert table["full", "all"]["accuracy"] == 0.9 and table["full", "all"]["updates"] == 716
    assert table["full", "all"]["invocation"] == 1 and table["head", "all"]["invocation"] == 0
    assert table["full", "10"]["updates"] == 50
    # Rows written before rows recorded their rate trained at the fixed one (scratch: none).
    assert table["full", "10"]["learning_rate"] == transfer.TRANSFER_LR
    assert table["full", "all"]["learning_rate"] == 0.1
    rules = [i["length_rule"] for i in result["invocations"]]
    assert rules == ["fixed 50 updates", "32 epochs, at least 50 updates"]
    assert result["invocations"][0]["command"] == (
        "python -m benchmarks.transfer --seeds 0 --shots 10 all --steps 50 --no-augment")
    lines = result["markdown"].splitlines()
    assert lines[-2].startswith("Run 1: `python -m benchmarks.transfer --seeds 0") \
        and lines[-1].startswith("Run 2: `python -m benchmarks.transfer --shots all --update`")
    # The file written is read back as it was written, for a third run to update.
    assert transfer.earlier_runs(str(tmp_path / "transfer.json")) == (result["invocations"],
                                                                     result["runs"])


def test_the_rate_with_the_best_validation_accuracy_is_chosen_and_a_tie_goes_to_the_smaller():
    assert transfer.choose_rate({0.03: 0.91, 0.1: 0.95, 0.3: 0.93}) == 0.1
    assert transfer.choose_rate({0.3: 0.95, 0.03: 0.90, 0.1: 0.95}) == 0.1
    assert transfer.choose_rate({0.3: 0.5}) == 0.3


def test_the_selection_scores_images_held_back_from_the_labelled_ones_never_the_test_split():
    labels = transfer.target_labels()
    chosen = np.arange(len(labels))
    train, held_back = transfer.selection_split(labels, chosen, seed=0)
    assert np.intersect1d(train, held_back).size == 0
    np.testing.assert_array_equal(np.union1d(train, held_back), chosen)
    # Stratified: each class's share of the held-back images is its share of all (to one image).
    share = np.bincount(labels[held_back], minlength=5) / len(held_back)
    np.testing.assert_allclose(share, np.bincount(labels) / len(labels), atol=1 / len(held_back))
    assert len(held_back) == int(np.ceil(transfer.SELECTION_FRACTION * len(chosen)))
    splits = transfer.digits_splits(transfer.TARGET_DIGITS, train, validation_indices=held_back)
    every = transfer.digits_splits(transfer.TARGET_DIGITS)
    # The run's "test" (what its report scores) is the held-back images, not the held-out ones.
    assert splits.split["fingerprints"]["test"] != every.split["fingerprints"]["test"]
    assert splits.num_validation == len(held_back) and splits.num_train == len(train)
    # What it scores is the held-back training images, in order, with their labels.
    scored = list(splits.test.as_numpy_iterator())
    expected = list(transfer.digits_splits(transfer.TARGET_DIGITS, held_back).train
                    .as_numpy_iterator())
    np.testing.assert_array_equal(np.stack([x for x, _ in scored]),
                                  np.stack([x for x, _ in expected]))
    np.testing.assert_array_equal([y for _, y in scored], labels[held_back])
    validated = list(splits.validation.as_numpy_iterator())
    np.testing.assert_array_equal(np.stack([x for x, _ in validated]),
                                  np.stack([x for x, _ in scored]))


def test_lr_grid_chooses_on_the_first_seed_and_every_seed_trains_at_the_choice(tmp_path,
                                                                               monkeypatch):
    # No training: each run's accuracy is planted. Validation scores favour 0.1 for lora4 and
    # 0.03 for full; the test accuracies (which must not decide) favour 0.3 and 0.01.
    validation = {("lora4", 0.03): 0.90, ("lora4", 0.1): 0.95, ("lora4", 0.3): 0.92,
                  ("full", 0.01): 0.93, ("full", 0.03): 0.96, ("full", 0.1): 0.94}
    test = {("lora4", 0.3): 0.99, ("full", 0.01): 0.99}
    calls = []

    def run_method(method, shots, augment, seed, source, folder, steps=None, epochs=32,
                   min_steps=50, learning_rate=None, validate=False):
        calls.append((method, seed, learning_rate, validate))
        accuracy = validation[method, learning_rate] if validate \
            else test.get((method, learning_rate), 0.5)
        return {"method": method, "shots": shots, "augment": augment, "seed": seed,
                "train_images": 572 if validate else 716, "updates": 2, "accuracy": accuracy,
                "learning_rate": learning_rate, "trainable": 1, "peak_bytes": None,
                "peak_above_start_bytes": None, "step_seconds": 0.01, "seconds": 0.0,
                **({"validation_images": 144} if validate else {})}

    monkeypatch.setattr(transfer, "pretrain", lambda seed, folder, steps: (folder, 0.99))
    monkeypatch.setattr(transfer, "run_method", run_method)
    result = transfer.main(["--seeds", "3", "4", "--shots", "all", "--methods", "full", "lora4",
                            "--no-augment", "--lr-grid", "lora4", "0.3", "0.03", "0.1",
                            "--lr-grid", "full", "0.01", "0.03", "0.1",
                            "--output-dir", str(tmp_path)])
    # The candidates train on the first seed only, with the validation split; then every seed
    # trains at the chosen rate and is scored on the test split.
    assert [c for c in calls if c[3]] == [("full", 3, r, True) for r in (0.01, 0.03, 0.1)] + [
        ("lora4", 3, r, True) for r in (0.03, 0.1, 0.3)]
    assert [c for c in calls if not c[3]] == [("full", 3, 0.03, False), ("lora4", 3, 0.1, False),
                                              ("full", 4, 0.03, False), ("lora4", 4, 0.1, False)]
    with open(tmp_path / "transfer.json") as f:
        saved = json.load(f)
    selections = {s["method"]: s for s in saved["invocations"][-1]["lr_selection"]}
    assert selections["lora4"]["chosen"] == 0.1 and selections["full"]["chosen"] == 0.03
    assert [(c["learning_rate"], c["validation_accuracy"])
            for c in selections["lora4"]["candidates"]] == [(0.03, 0.9), (0.1, 0.95), (0.3, 0.92)]
    assert {s["method"]: s["learning_rate"] for s in saved["summary"]} == {"full": 0.03,
                                                                          "lora4": 0.1}
    assert result["markdown"].splitlines()[-1] == (
        "Run 1, lora4 (none, all labels/class): learning rate 0.1, the best validation accuracy "
        "of seed 3's runs on 572 images scored on 144 held back from them (0.03: 90.0%, "
        "0.1: 95.0%, 0.3: 92.0%).")


@pytest.mark.parametrize("flags, message", [
    (["probe", "0.1"], "'probe' is not a trained method"),
    (["lora4", "fast"], "the rates must be numbers"),
    (["lora4", "0.1", "-1"], "give one or more positive learning rates"),
    (["lora4"], "give one or more positive learning rates"),
    (["lora4", "0.1", "--shots", "1"], "needs at least 5 labels per class")])
def test_a_bad_lr_grid_is_refused_with_one_line_naming_it(flags, message, capsys):
    with pytest.raises(SystemExit):
        transfer.main(["--lr-grid", *flags])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error and "error: --lr-grid" in error


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
    assert len(table) == 2 + 2 + 2  # header, rule, one line per method, a blank, the legend


def test_lora_methods_name_their_rank_and_lora4_all_adapts_every_projection_keras_vit_offers():
    from keras_vit.lora import LORA_TARGETS

    assert transfer.lora_arguments("lora4") == {"lora_rank": 4}  # train's default: query, value
    assert transfer.lora_arguments("lora16") == {"lora_rank": 16}
    everything = transfer.lora_arguments("lora4-all")
    assert everything["lora_rank"] == 4 and sorted(everything["lora_targets"]) == sorted(LORA_TARGETS)
    assert transfer.lora_arguments("full") == {}
