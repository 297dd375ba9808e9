"""Every entry of every variant table through the one model-level harness
(tests/model_checks.py): forward shape, `.keras` round trip, `save_npz` -> strict reload,
parameter count against the table's number.

ViT variants (plain, gap, hybrid) run as one-block copies at a small rectangular size: the
same width, patch, pooling and ResNet trunk, so the same layers and the same file layout;
their counts are the table's (`EXPECTED_PARAMS`, at full depth, 224 px, 1000 classes)
carried to the copy's depth, grid and head (`vit_params`). The default suite runs one
variant per way of putting a ViT together (`DEFAULT_HARNESS`) and BiT-R50x1; the rest are
`slow`. `test_no_table_entry_is_left_out` keeps every entry in the harness.
"""

import dataclasses

import pytest

import keras_vit
from keras_vit.variants import BIT_VARIANTS, DEMO_VARIANT, VARIANTS
from tests.conftest import BIG_MEMORY_BYTES
from tests.model_checks import bit_params, check_model, vit_params
from tests.models.test_bit import TIMM_PARAMS
from tests.models.test_variants import DEFAULT_HARNESS, EXPECTED_PARAMS

# ViT-demo_4 has no official count: counted by hand at 224 px and 1000 classes (patch
# embedding 3,136, class token 64, position embedding 3,137 x 64, four blocks of 33,472,
# the final LayerNorm 128, the head 65,000).
DEMO_PARAMS = 402_984
DEFAULT_BIT = {"BiT-R50x1"}
CLASSES = 7


def _small_size(variant):
    """Rectangular, the smallest multiple of the stride >= 32 px and two tokens across; one
    more token across the columns."""
    stride = variant.total_stride
    rows = stride * max(2, -(-32 // stride))
    return rows, rows + stride


VIT_CASES = [pytest.param(name, id=name, marks=() if name in DEFAULT_HARNESS else pytest.mark.slow)
             for name in VARIANTS]
# BiT's full-width sizes of over a gigabyte of weights (R101x3, R152x4) built, saved and
# reloaded: one at a time across the workers (tests/conftest.py, big_memory).
BIT_CASES = [pytest.param(name, id=name, marks=() if name in DEFAULT_BIT else (
                 pytest.mark.slow,
                 *([pytest.mark.big_memory] if TIMM_PARAMS[name][1] * 4 > BIG_MEMORY_BYTES else [])))
             for name in BIT_VARIANTS]


def test_no_table_entry_is_left_out():
    """Each table's entries are the harness's cases, and each has its count: a variant added
    to a table fails here until it is checked."""
    assert [p.values[0] for p in VIT_CASES] == list(VARIANTS)
    assert [p.values[0] for p in BIT_CASES] == list(BIT_VARIANTS)
    assert set(EXPECTED_PARAMS) == set(VARIANTS)
    assert set(TIMM_PARAMS) == set(BIT_VARIANTS)
    assert DEMO_VARIANT.name not in VARIANTS  # the demo is checked on its own, below


@pytest.mark.parametrize("name", VIT_CASES)
def test_every_vit_variant(name, tmp_path):
    variant = dataclasses.replace(VARIANTS[name], depth=1)
    size = _small_size(variant)
    check_model(lambda **kw: keras_vit.ViT(variant, **kw), size, CLASSES,
                vit_params(VARIANTS[name], EXPECTED_PARAMS[name], size, CLASSES, depth=1), tmp_path)


def test_the_demo_variant(tmp_path):
    size = _small_size(DEMO_VARIANT)
    check_model(lambda **kw: keras_vit.ViT("demo", **kw), size, CLASSES,
                vit_params(DEMO_VARIANT, DEMO_PARAMS, size, CLASSES), tmp_path)


@pytest.mark.parametrize("name", BIT_CASES)
def test_every_bit_variant(name, tmp_path):
    variant = BIT_VARIANTS[name]
    check_model(lambda **kw: keras_vit.BiT(name, **kw), (32, 48), CLASSES,
                bit_params(variant, TIMM_PARAMS[name][1], CLASSES), tmp_path)


def test_the_harness_fails_on_a_wrong_count(tmp_path):
    """check_model can fail: a count one off is refused before anything is saved."""
    with pytest.raises(AssertionError, match="the table says"):
        check_model(lambda **kw: keras_vit.ViT("demo", **kw), (8, 8), CLASSES,
                    vit_params(DEMO_VARIANT, DEMO_PARAMS, (8, 8), CLASSES) + 1, tmp_path)
    assert not list(tmp_path.iterdir())
