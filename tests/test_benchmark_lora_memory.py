"""benchmarks.lora_memory in its tiny mode, in this process: both arms train what `train`
trains, LoRA's parameters are the ones counted by hand, and the expected saving is the
arithmetic of those counts. No memory or time is asserted: a 24,000-parameter model's saving
(under 0.1 MiB) is below what the allocator moves a resident set by."""

import pytest

from benchmarks import lora_memory

# The tiny ViT: 2 blocks of width 32, patch 8 on 32 px (16 patches and a class token), MLP 64.
WIDTH, DEPTH, MLP, TOKENS, PATCH, CLASSES, RANK = 32, 2, 64, 17, 8, 10, 4
BLOCK = 4 * (WIDTH * WIDTH + WIDTH) + (WIDTH * MLP + MLP) + (MLP * WIDTH + WIDTH) + 4 * WIDTH
HEAD = (WIDTH + 1) * CLASSES
TOTAL = (PATCH * PATCH * 3 * WIDTH + WIDTH) + WIDTH + TOKENS * WIDTH + DEPTH * BLOCK \
    + 2 * WIDTH + HEAD  # patch embedding, class token, positions, blocks, final norm, head
# LoRA on query and value: an a (width x rank) and a b (rank x width) for each, in each block.
FACTORS = DEPTH * 2 * (WIDTH * RANK + RANK * WIDTH)


@pytest.fixture(scope="module")
def rows():
    # Both arms in this process (main runs each in a fresh one, which the slow test checks).
    return [lora_memory.measure(arm, lora_memory.TINY, steps=2) for arm in lora_memory.ARMS]


def test_each_arm_trains_its_parameters_for_the_steps_asked(rows):
    full, lora = rows
    assert (full["trainable"], full["total"]) == (TOTAL, TOTAL)
    assert (lora["trainable"], lora["total"]) == (FACTORS + HEAD, TOTAL + FACTORS)
    assert full["optimizer_iterations"] == lora["optimizer_iterations"] == 2
    for row in rows:  # Linux: each arm's peak is at least its resident set after the build
        assert row["peak_bytes"] >= row["after_build_bytes"] > 0


def test_the_expected_saving_is_8_bytes_a_frozen_weight_less_12_a_factor(rows):
    comparison = lora_memory.compare(rows)
    frozen = TOTAL - HEAD  # every weight but the head's: a gradient and a momentum slot each
    # Between updates only the slot is held; a factor holds its value and its slot.
    assert comparison["expected_state_bytes"] == 4 * frozen - 8 * FACTORS
    # While training each frozen weight's gradient is saved too, and each factor has one.
    assert comparison["expected_saving_bytes"] == 8 * frozen - 12 * FACTORS
    table = lora_memory.markdown(rows, comparison)
    assert table.splitlines()[2].startswith(f"| full | {TOTAL:,} | {TOTAL:,} |")
    assert table.splitlines()[3].startswith(f"| lora4 | {FACTORS + HEAD:,} | {TOTAL + FACTORS:,} |")


# ~20 CPU-seconds (two fresh processes each importing TensorFlow): slow. The default tests
# above run the same measure() in this process; this one checks main's fresh processes and files.
@pytest.mark.slow
def test_main_runs_each_arm_in_a_fresh_process_and_writes_its_files(tmp_path, monkeypatch):
    import json
    import os
    import pathlib

    # The fresh processes import benchmarks from this checkout, wherever pytest runs from.
    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).resolve().parents[1]))
    result = lora_memory.main(["--tiny", "--steps", "2", "--output-dir", str(tmp_path)])
    assert sorted(os.listdir(tmp_path)) == ["lora_memory.json", "lora_memory.md"]
    with open(tmp_path / "lora_memory.json") as f:
        saved = json.load(f)
    assert [row["arm"] for row in saved["arms"]] == ["full", "lora4"]
    assert saved["expected_saving_bytes"] == result["expected_saving_bytes"]
    # Fresh processes: each arm's resident set after imports is its own process's.
    assert all(row["peak_above_imports_bytes"] is not None for row in saved["arms"])
