"""Config values bounded before anything is built: each field a format reads is checked for
type and range (a bool is not a count; 1e400, Infinity and NaN are refused; counts are within
caps that every released model is far inside), and the architecture a config describes is
checked against memory, each in one line naming the file and the field, with no layer built.

The ViTHybrid folder is transformers' own (tests/fixtures/vit_hybrid_tiny), one value edited;
the plain transformers and keras-hub cases are in test_config_files.py."""

import json

import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats import inspect_checkpoint
from keras_vit.checkpoints.formats.config_values import (
    MAX_LAYERS,
    check_fields,
    count,
    counts,
    epsilon,
    flag,
    number,
    optional,
    strings,
)
from keras_vit.errors import SizeError
from keras_vit.memory import check_fits
from keras_vit.models import vit as vit_module
from keras_vit.variants import Variant
from tests.checkpoints.formats.test_transformers_hybrid import FOLDER, TINY, _edited_copy


@pytest.fixture
def nothing_built(monkeypatch):
    """Fails a test whose model would be built: the refusal must come first."""
    monkeypatch.setattr(vit_module, "_build", lambda *a, **k: pytest.fail("a model was built"))


def _set(field, value, backbone=False):
    def edit(config):
        (config["backbone_config"] if backbone else config)[field] = value
    return edit


# The issue's cases (each hung, failed inside TensorFlow or gave a traceback), then the rest of
# the class: every kind of value a number field can be given wrongly.
HYBRID_CASES = [
    (_set("num_hidden_layers", 10 ** 6), "num_hidden_layers is 1000000; a positive integer up to 256"),
    (_set("num_hidden_layers", 1e6), "num_hidden_layers is 1000000.0"),
    (_set("depths", [10 ** 6, 1], backbone=True), "backbone_config.depths is [1000000, 1]"),
    (_set("hidden_size", 10 ** 9), "hidden_size is 1000000000"),
    (_set("patch_size", 10 ** 9), "patch_size is 1000000000"),
    (_set("out_features", 5, backbone=True), "backbone_config.out_features is 5"),
    (("width_factor", "1e400"), "backbone_config.width_factor is inf"),
    (_set("num_hidden_layers", True), "num_hidden_layers is True"),
    (("hidden_size", "NaN"), "hidden_size is nan"),
    (("intermediate_size", "Infinity"), "intermediate_size is inf"),
    (_set("image_size", "56"), "image_size is '56'"),
    (_set("num_attention_heads", 0), "num_attention_heads is 0"),
    (_set("num_attention_heads", 3), "hidden_size 32 is not a multiple of num_attention_heads 3"),
    (_set("hidden_size", None), "hidden_size is None"),
    (_set("depths", [], backbone=True), "backbone_config.depths is []"),
    (_set("depths", [1] * 9, backbone=True), "backbone_config.depths is [1, 1, 1, 1, 1, 1, 1, 1, 1]"),
    (_set("hidden_sizes", [256.5, 512], backbone=True), "backbone_config.hidden_sizes is [256.5, 512]"),
    (_set("width_factor", -1, backbone=True), "backbone_config.width_factor is -1"),
    (_set("out_indices", ["2"], backbone=True), "backbone_config.out_indices is ['2']"),
    (_set("embedding_dynamic_padding", 1, backbone=True), "embedding_dynamic_padding is 1"),
    (_set("embedding_size", 2 ** 40, backbone=True), "backbone_config.embedding_size is 1099511627776"),
]


def _hybrid_folder(tmp_path, edit):
    if isinstance(edit, tuple):  # raw JSON text: a value json.dumps does not write
        field, value = edit
        folder = _edited_copy(tmp_path)
        lines = (folder / "config.json").read_text().splitlines()
        edited = [f'"{field}": {value}' + ("," if line.endswith(",") else "")
                  if line.strip().startswith(f'"{field}":') else line for line in lines]
        assert edited != lines
        (folder / "config.json").write_text("\n".join(edited))
        return folder
    return _edited_copy(tmp_path, config=edit)


@pytest.mark.parametrize("edit, words", HYBRID_CASES, ids=[w[:40] for _, w in HYBRID_CASES])
def test_a_hybrid_config_value_out_of_type_or_range_is_one_line_and_nothing_is_built(
        tmp_path, nothing_built, edit, words):
    folder = _hybrid_folder(tmp_path, edit)
    for call in (lambda: inspect_checkpoint(str(folder)),
                 lambda: keras_vit.ViT(TINY, weights=str(folder))):
        with pytest.raises(CheckpointError) as error:
            call()
        message = str(error.value)
        assert "\n" not in message and message.startswith(f"{folder / 'config.json'}: ")
        assert words in message and len(message) < 300


def test_a_hybrid_config_within_the_caps_is_checked_against_memory_before_building(
        tmp_path, nothing_built):
    """256 blocks of width 262,144: 4.6e14 bytes of weights, more than any machine holds."""
    def huge(config):
        config.update(hidden_size=2 ** 18, intermediate_size=2 ** 18, num_hidden_layers=MAX_LAYERS)

    folder = _edited_copy(tmp_path, config=huge)
    with pytest.raises(CheckpointError) as error:
        keras_vit.ViT(TINY, weights=str(folder))
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{folder / 'config.json'} describes a "
                                                      "model this machine cannot hold")
    assert "R1-1+ViT-262144x256 cannot fit: its weights alone need" in message


def test_the_unedited_hybrid_folder_passes_the_checks():
    """The control: the same checks pass transformers' own folder."""
    assert inspect_checkpoint(str(FOLDER)).variant == TINY


# --- the memory check counts a hybrid's trunk and every patch embedding ---------------------

MEMORY = 2 ** 36  # 64 GiB, given: the outcome does not depend on this machine


def test_the_memory_check_counts_a_hybrids_resnet_trunk():
    """Four stages of 256 units at width 8: 9.7e10 trunk weights (362 GiB), and a small
    transformer that fits alone."""
    small = Variant("small", width=32, depth=2, mlp_dim=64, heads=2, patch_size=1)
    check_fits(small, 224, memory=MEMORY)
    with pytest.raises(SizeError, match="deep-trunk cannot fit: its weights alone need"):
        check_fits(Variant("deep-trunk", width=32, depth=2, mlp_dim=64, heads=2, patch_size=1,
                           resnet_stages=(256,) * 4, resnet_width=8), 224, memory=MEMORY)


def test_the_memory_check_counts_the_patch_embedding():
    """A 16,384-pixel patch: 16384^2 x 3 x 32 = 2.6e10 weights, 103 GB; 16 pixels fit."""
    check_fits(Variant("p16", width=32, depth=2, mlp_dim=64, heads=2, patch_size=16),
               memory=MEMORY)
    with pytest.raises(SizeError, match="big-patch cannot fit: its weights alone need"):
        check_fits(Variant("big-patch", width=32, depth=2, mlp_dim=64, heads=2,
                           patch_size=2 ** 14), memory=MEMORY)


# --- the checks themselves, as a new format would use them --------------------------------

CHECKS = [  # (check, accepted values, refused values)
    (count(10), [1, 10], [0, 11, True, 1.0, "1", None, float("inf")]),
    (count(10, low=0), [0, 10], [-1, 11, False]),
    (counts(10, 2), [[1], [1, 10]], [[], [1, 2, 3], [0], [True], 5, "12", [1.5]]),
    (counts(10, 2, least=2, low=-1), [[-1, 0], [10, 10]], [[1], [-2, 1]]),
    (number(0, 64), [1, 0.5, 64], [0, -1, 65, float("nan"), float("inf"), True, "1"]),
    (number(0, 1, low_open=False), [0, 1], [-0.1]),
    (epsilon, [1e-12, 0.5], [0, 1, float("nan"), True, "1e-6"]),
    (flag, [True, False], [1, "true", None]),
    (strings, [[], ["stage2"]], [5, "stage2", [2]]),
    (optional(count(10)), [None, 3], [0]),
]


@pytest.mark.parametrize("check, accepted, refused", CHECKS)
def test_each_check_accepts_and_refuses_what_it_says(check, accepted, refused):
    for value in accepted:
        assert check_fields("c.json", {"f": value}, {"f": check}) == {"f": value}
    for value in refused:
        with pytest.raises(CheckpointError, match=r"^c\.json: f is .+; .+\.$"):
            check_fields("c.json", {"f": value}, {"f": check})


def test_a_required_field_that_is_absent_is_named_and_an_optional_one_is_left():
    assert check_fields("c.json", {}, {"f": count(3)}) == {}
    with pytest.raises(CheckpointError, match=r"^c\.json: backbone\.f is missing; "):
        check_fields("c.json", {}, {"f": count(3)}, prefix="backbone.", required=("f",))


def test_a_lying_value_is_not_dumped_into_the_message():
    with pytest.raises(CheckpointError) as error:
        check_fields("c.json", {"f": list(range(10_000))}, {"f": count(3)})
    assert len(str(error.value)) < 200


def test_json_reads_1e400_as_infinity_which_the_checks_refuse():
    """The premise of the width_factor case: Python's json gives inf, not an error."""
    assert json.loads('{"w": 1e400}')["w"] == float("inf")

