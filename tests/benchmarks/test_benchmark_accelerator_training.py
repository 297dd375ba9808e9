"""benchmarks/accelerator_training.py: each training row's batch, --remat reaching every
block, the largest-batch search and its table, on the CPU without building the real models
(the whole --tiny run: test_benchmark_accelerator.py, slow)."""

import pytest

from benchmarks import accelerator, accelerator_training
from tests.benchmarks.test_benchmark_accelerator import _report


def test_each_training_row_runs_at_its_batch():
    assert accelerator_training.training_batch("vit_base_patch16_224", tiny=False) == 64
    assert accelerator_training.training_batch("vit_large_patch16_384", tiny=False) == 16
    assert accelerator_training.training_batch("vit_large_patch16_384", tiny=True) == 2
    assert accelerator_training.training_batch("vit_large_patch16_384", tiny=False, batch=8) == 8
    assert accelerator.parse_args([]).train_models.split(",") == list(
        accelerator_training.TRAINING_BATCHES)
    assert accelerator.TRAIN_SETTINGS == ("float32", "tf32", "bfloat16")


def test_remat_reaches_every_block():
    import keras_vit
    from keras_vit.layers import TransformerBlock

    variant = keras_vit.Variant("ViT-tiny_8", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)
    model = keras_vit.ViT(variant, image_size=16, classes=3)
    blocks = [layer for layer in model._flatten_layers() if isinstance(layer, TransformerBlock)]
    accelerator_training.set_remat(model, True)
    assert [b.remat for b in blocks] == [True] * 2
    accelerator_training.set_remat(model, False)
    assert [b.remat for b in blocks] == [False] * 2


@pytest.mark.parametrize("fits_up_to, expected", [
    (1000, {"largest": 256, "failed_at": None}),  # every doubling ran: 16 * 2^4
    (100, {"largest": 64, "failed_at": 128}),
    (8, {"largest": None, "failed_at": 16}),  # not even the row's batch
])
def test_largest_batch_doubles_until_a_step_fails(fits_up_to, expected):
    tried = []

    def runs_at(batch):
        tried.append(batch)
        if batch > fits_up_to:
            raise MemoryError(f"RESOURCE_EXHAUSTED: batch {batch}")

    found = accelerator_training.largest_batch(runs_at, 16)
    assert {key: found[key] for key in expected} == expected
    last = expected["failed_at"] or expected["largest"]
    assert tried == [b for b in (16, 32, 64, 128, 256) if b <= last]
    if expected["failed_at"]:
        assert found["error"] == f"MemoryError: RESOURCE_EXHAUSTED: batch {expected['failed_at']}"


def test_the_training_table_gives_each_rows_batch_and_largest_batch():
    row = {"title": "ViT-L/16 384", "batch": 16, "first_call_seconds": {}, "first_loss": {},
           "images_per_s": {}, "ratio": {}, "ratio_to": {},
           "largest_batch": {"keras_vit": {"largest": 64, "failed_at": 128, "error": "x"},
                             "timm": {"largest": 256, "failed_at": None, "error": None}}}
    report = {**_report({}), "training": {"vit_large_patch16_384": row},
              "training_step": "SGD"}
    markdown = accelerator.to_markdown(report)
    assert "Training step (SGD), batch: ViT-L/16 384 16:" in markdown
    assert ("ViT-L/16 384 keras_vit 64 (failed at 128), timm 256 (every batch tried ran)"
            in markdown)
