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
# On every projection: the attention's four, and the MLP's two (width x rank, rank x MLP and
# MLP x rank, rank x width).
ALL_FACTORS = DEPTH * (4 * (WIDTH * RANK + RANK * WIDTH) + 2 * (WIDTH * RANK + RANK * MLP))


@pytest.fixture(scope="module")
def rows():
    # Both arms in this process (main runs each in a fresh one, which the slow test checks).
    return [lora_memory.measure(arm, lora_memory.TINY, steps=2) for arm in lora_memory.ARMS]


def test_each_arm_trains_its_parameters_for_the_steps_asked(rows):
    full, lora, lora_all = rows
    assert (full["trainable"], full["total"]) == (TOTAL, TOTAL)
    assert (lora["trainable"], lora["total"]) == (FACTORS + HEAD, TOTAL + FACTORS)
    assert (lora_all["trainable"], lora_all["total"]) == (ALL_FACTORS + HEAD, TOTAL + ALL_FACTORS)
    assert [row["optimizer_iterations"] for row in rows] == [2, 2, 2]
    # Both readings exist; their sizes are not compared (the module's docstring): once, in a
    # worker shared with other tests, a tiny arm's peak (VmHWM) read below the resident set
    # (VmRSS) read before its fit. The kernel keeps both from per-CPU counters that it reads
    # approximately, and a tiny arm adds little above its build; which of the two happened
    # there was not established.
    for row in rows:
        assert row["peak_bytes"] > 0 and row["after_build_bytes"] > 0


@pytest.mark.parametrize("arm, factors", [("lora4", FACTORS), ("lora4-all", ALL_FACTORS)])
def test_the_expected_saving_is_8_bytes_a_frozen_weight_less_12_a_factor(rows, arm, factors):
    comparison = lora_memory.compare(rows, arm)
    frozen = TOTAL - HEAD  # every weight but the head's: a gradient and a momentum slot each
    # Between updates only the slot is held; a factor holds its value and its slot.
    assert comparison["expected_state_bytes"] == 4 * frozen - 8 * factors
    # While training each frozen weight's gradient is saved too, and each factor has one.
    assert comparison["expected_saving_bytes"] == 8 * frozen - 12 * factors
    table = lora_memory.markdown(rows, {arm: comparison}).splitlines()
    row = table[2 + lora_memory.ARMS.index(arm)]
    assert table[2].startswith(f"| full | {TOTAL:,} | {TOTAL:,} |")
    assert row.startswith(f"| {arm} | {factors + HEAD:,} | {TOTAL + factors:,} |")
    assert table[-1].startswith(f"{arm}'s saving after the build")


# ~20 CPU-seconds (two fresh processes each importing TensorFlow): slow. The default tests
# above run the same measure() in this process; this one checks main's fresh processes and files.
@pytest.mark.slow
def test_main_runs_each_arm_in_a_fresh_process_and_writes_its_files(tmp_path, monkeypatch):
    import json
    import os
    import pathlib

    # The fresh processes import benchmarks from this checkout, wherever pytest runs from.
    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).resolve().parents[2]))
    result = lora_memory.main(["--tiny", "--steps", "2", "--output-dir", str(tmp_path)])
    assert sorted(os.listdir(tmp_path)) == ["lora_memory.json", "lora_memory.md"]
    with open(tmp_path / "lora_memory.json") as f:
        saved = json.load(f)
    assert [row["arm"] for row in saved["arms"]] == ["full", "lora4", "lora4-all"]
    assert saved["savings"] == result["savings"] and sorted(saved["savings"]) == ["lora4", "lora4-all"]
    # Fresh processes: each arm's resident set after imports is its own process's.
    assert all(row["peak_above_imports_bytes"] is not None for row in saved["arms"])
