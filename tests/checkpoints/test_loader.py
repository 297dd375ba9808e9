"""Strict checkpoint loading, plain and hybrid: layouts, resizing, every kind of bad file,
and the one place the official key layout is spelled."""

import dataclasses
import io
import pathlib
import re
import time
import zipfile

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from keras_vit import CheckpointError, resize_position_embedding
from keras_vit.variants import get_variant
from tests.memory import peak_rss_mb, reset_peak, status_mb
from tests.oracle import random_hybrid_npz, random_vit_npz, run_timm, timm_vit

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny-ti")
# The real trunk layout in miniature: 2 stages of 2 units, a 1-block width-64 transformer.
TINY_HYBRID = keras_vit.Variant("R-tiny", 64, 1, 128, 2, 1, "token", (2, 2))


def _images(n, size, seed=3):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *size, 3)).astype(np.float32)


def _weights(model):
    return [v.numpy().copy() for v in model.weights]


def _assert_unchanged(model, before):
    after = _weights(model)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def _assert_load_refused(path, match, model=None, load=keras_vit.load_weights):
    """Loading `path` with `load` into `model` (default: a fresh TINY ViT) raises `match`
    and changes no weight; returns the error."""
    model = keras_vit.ViT(TINY, classes=10) if model is None else model
    before = _weights(model)
    with pytest.raises(CheckpointError, match=match) as error:
        load(model, str(path))
    _assert_unchanged(model, before)
    return error.value


# --- the position-embedding resize --------------------------------------------------------

@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((14, 14), (7, 7)),
                                     ((14, 14), (12, 20)), ((4, 6), (9, 5)), ((3, 3), (3, 3))])
def test_resize_equals_scipy_zoom(old, new):
    rng = np.random.default_rng(0)
    pos = rng.standard_normal((1, 1 + old[0] * old[1], 16)).astype(np.float32)
    resized = resize_position_embedding(pos, old, new, num_prefix_tokens=1)
    grid = pos[0, 1:].reshape(*old, 16)
    expected = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert resized.shape == (1, 1 + new[0] * new[1], 16)
    np.testing.assert_array_equal(resized[:, :1], pos[:, :1])  # class token unchanged
    np.testing.assert_allclose(resized[0, 1:].reshape(*new, 16), expected, atol=1e-5)


def test_resize_rejects_a_wrong_token_count():
    with pytest.raises(ValueError, match="needs 197 positions"):
        resize_position_embedding(np.zeros((1, 190, 8)), (14, 14), (24, 24))


def test_model_at_384_from_224_checkpoint_equals_timm_on_resized_file(tmp_path):
    """keras_vit resizes at load; timm gets a file already resized by the same function."""
    variant = dataclasses.replace(get_variant("Ti/16"), depth=3, name="ti-depth3")
    path = tmp_path / "224.npz"
    arrays = random_vit_npz(path, variant, (14, 14), classes=10)
    ours = keras_vit.ViT(variant, weights=str(path), image_size=384)

    key = "Transformer/posembed_input/pos_embedding"
    resized = dict(arrays, **{key: resize_position_embedding(arrays[key], (14, 14), (24, 24))})
    grid = resized[key][0, 1:].reshape(14 * 0 + 24, 24, -1)
    zoomed = scipy.ndimage.zoom(arrays[key][0, 1:].reshape(14, 14, -1), (24 / 14, 24 / 14, 1), order=1)
    np.testing.assert_allclose(grid, zoomed, atol=1e-5)  # the file timm gets is the official resize
    np.savez(tmp_path / "384.npz", **resized)
    theirs = timm_vit(variant, 384, 10, tmp_path / "384.npz")
    images = _images(1, (384, 384))
    np.testing.assert_allclose(np.asarray(ours(images)), run_timm(theirs, images), atol=1e-4)


def test_rectangular_image_resizes_rows_and_columns_separately(tmp_path):
    path = tmp_path / "ckpt.npz"
    arrays = random_vit_npz(path, TINY, (4, 4), classes=10)
    model = keras_vit.ViT(TINY, weights=str(path), image_size=(48, 96))
    loaded = model.get_layer("posembed_input").pos_embedding.numpy()
    pos = arrays["Transformer/posembed_input/pos_embedding"]
    expected = scipy.ndimage.zoom(pos[0, 1:].reshape(4, 4, -1), (3 / 4, 6 / 4, 1), order=1)
    np.testing.assert_allclose(loaded[0, 1:].reshape(3, 6, -1), expected, atol=1e-5)
    np.testing.assert_array_equal(loaded[:, :1], pos[:, :1])


# --- accepted layouts ----------------------------------------------------------------------

@pytest.mark.parametrize("layout", [dict(linen=True), dict(prefix="opt/target/"),
                                    dict(prefix="params/")])
def test_alternative_layouts_load_the_same_model(layout, tmp_path):
    random_vit_npz(tmp_path / "a.npz", TINY, (4, 4), classes=10)
    random_vit_npz(tmp_path / "b.npz", TINY, (4, 4), classes=10, **layout)
    images = _images(2, (64, 64))
    a = np.asarray(keras_vit.ViT(TINY, weights=str(tmp_path / "a.npz"))(images))
    b = np.asarray(keras_vit.ViT(TINY, weights=str(tmp_path / "b.npz"))(images))
    np.testing.assert_array_equal(a, b)


def test_new_class_count_zero_initialises_the_head(tmp_path):
    path = tmp_path / "ckpt.npz"
    random_vit_npz(path, TINY, (4, 4), classes=10)
    model = keras_vit.ViT(TINY, weights=str(path), classes=5)
    assert model.get_layer("head").kernel.shape == (192, 5)
    assert not np.any(model.get_layer("head").kernel.numpy())
    assert not np.any(model.get_layer("head").bias.numpy())
    assert np.any(model.get_layer("embedding").kernel.numpy())  # the backbone did load


def test_defaults_follow_the_file(tmp_path):
    path = tmp_path / "ckpt.npz"
    random_vit_npz(path, TINY, (6, 6), classes=7, pre_logits=192)
    model = keras_vit.ViT(TINY, weights=str(path))
    assert model.input_shape == (None, 96, 96, 3)
    assert model.output_shape == (None, 7)
    assert model.get_layer("pre_logits").units == 192


# --- bad checkpoints: a clear error, and the model untouched ---------------------------------

def _corrupt(tmp_path, edit):
    path = tmp_path / "bad.npz"
    arrays = random_vit_npz(tmp_path / "good.npz", TINY, (4, 4), classes=10)
    edit(arrays)  # mutates in place
    np.savez(path, **arrays)
    return path


BLOCK = "Transformer/encoderblock_1/MlpBlock_3/Dense_0"


@pytest.mark.parametrize("edit,message", [
    (lambda a: a.pop(f"{BLOCK}/kernel"), f"missing keys:\n    {BLOCK}/kernel"),
    (lambda a: a.update(extra=np.zeros(3)), "unexpected keys:\n    extra"),
    (lambda a: a.update({f"{BLOCK}/bias": np.zeros(5)}),
     rf"{BLOCK}/bias: expected \(768,\), found \(5,\)"),
    (lambda a: a.update(cls=np.array(["a", "b"])), "non-float arrays:\n    cls: <U1"),
])
def test_bad_checkpoint_raises_and_leaves_model_unchanged(edit, message, tmp_path):
    path = _corrupt(tmp_path, edit)
    error = _assert_load_refused(path, message)
    assert "No weights were changed" in str(error)


# --- hostile checkpoints (issue 17): one table, each refused by name, nothing changed --------

HUGE_UNUSED_BYTES = 512 << 20  # far above the 100 MB the refusal may cost: reading it would show


def _npy_header(shape, dtype="<f4"):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False,
                                                  "shape": shape})
    return buffer.getvalue()


def _zip_npz(path, arrays, raw=None, huge=None):
    """An .npz written member by member: `arrays` as np.savez would, `raw` {key: bytes} as
    given, `huge` (key, bytes) a float32 member of that many zero bytes, deflated."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for key, value in arrays.items():
            with archive.open(f"{key}.npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(value), allow_pickle=False)
        for key, data in (raw or {}).items():
            archive.writestr(f"{key}.npy", data)
        if huge:
            key, size = huge
            chunk = bytes(16 << 20)
            with archive.open(f"{key}.npy", "w", force_zip64=True) as f:
                f.write(_npy_header((size // 4,)))
                for _ in range(size // len(chunk)):
                    f.write(chunk)
    return path


def _good_arrays(tmp_path):
    return random_vit_npz(tmp_path / "good.npz", TINY, (4, 4), classes=10)


def _edited(edit):
    def build(tmp_path):
        arrays = _good_arrays(tmp_path)
        raw = edit(arrays)  # mutates in place; may return raw members
        return _zip_npz(tmp_path / "bad.npz", arrays, raw=raw)
    return build


def _set(key, change):
    def edit(arrays):
        arrays[key] = change(arrays[key])
    return edit


def _drop(key):
    def edit(arrays):
        del arrays[key]
    return edit


def _with_nan(a):
    a = a.copy()
    a.flat[3] = np.nan
    return a


def _with_inf(a):
    a = a.copy()
    a.flat[0], a.flat[5] = np.inf, -np.inf
    return a


def _duplicate(arrays):
    arrays["params/embedding/kernel"] = arrays["embedding/kernel"] + 1


def _lying_header(arrays):
    del arrays["cls"]
    return {"cls": _npy_header((10**13,)) + bytes(16)}  # claims 36 TiB, holds 16 bytes


def _short_data(arrays):
    kernel = arrays.pop("embedding/kernel")  # the right shape in the header, 12 bytes of data
    return {"embedding/kernel": _npy_header(kernel.shape) + bytes(12)}


def _not_npy(arrays):
    del arrays["cls"]
    return {"cls": b"these are not the droids"}


def _huge_unused(tmp_path):
    return _zip_npz(tmp_path / "bad.npz", _good_arrays(tmp_path),
                    huge=("optimizer_state", HUGE_UNUSED_BYTES))


def _model_prefix(tmp_path):
    arrays = _good_arrays(tmp_path)
    return _zip_npz(tmp_path / "bad.npz", {f"model/{k}": v for k, v in arrays.items()})


def _folder(tmp_path):
    (tmp_path / "weights.npz").mkdir()
    return tmp_path / "weights.npz"


HEAD = "head"
HOSTILE_CHECKPOINTS = {
    "nan": (_edited(_set("cls", _with_nan)), r"non-finite values:\n    cls: 1 NaN values"),
    "inf": (_edited(_set(f"{BLOCK}/kernel", _with_inf)),
            rf"non-finite values:\n    {BLOCK}/kernel: 2 Inf values"),
    "int32": (_edited(_set("embedding/bias", lambda a: a.astype(np.int32))),
              r"non-float arrays:\n    embedding/bias: int32"),
    "complex64": (_edited(_set("embedding/bias", lambda a: a.astype(np.complex64))),
                  r"non-float arrays:\n    embedding/bias: complex64"),
    "head bias missing": (_edited(_drop(f"{HEAD}/bias")),
                          rf"missing keys:\n    {HEAD}/bias"),
    "head bias mis-shaped": (_edited(_set(f"{HEAD}/bias", lambda a: a[:7])),
                             rf"{HEAD}/bias: expected \(10,\), found \(7,\)"),
    "head kernel only, other classes": (
        _edited(lambda a: _drop(f"{HEAD}/bias")(a) or _set(f"{HEAD}/kernel", lambda k: k[:, :5])(a)),
        rf"(?s)missing keys:\n    {HEAD}/bias.*{HEAD}/kernel: expected"),
    "duplicate after normalisation": (
        _edited(_duplicate), "'embedding/kernel' and 'params/embedding/kernel' are the same "
                             "parameter"),
    "lying header": (_edited(_lying_header), r"cls: its header claims \(10000000000000,\) float32"),
    "short data": (_edited(_short_data), r"embedding/kernel: its header claims \(16, 16, 3, 192\)"),
    "non-npy member": (_edited(_not_npy), r"cls: not an .npy array"),
    "huge unused member": (_huge_unused, r"unexpected keys:\n    optimizer_state"),
    "missing path": (lambda tmp_path: tmp_path / "absent.npz", r"No checkpoint file at .*absent"),
    "directory": (_folder, r"weights.npz is a folder; a checkpoint is one .npz file"),
    "model/ prefix": (_model_prefix, r"unexpected keys are missing keys under the prefix "
                                     r"'model/'"),
}
# Refused from the headers alone: fast, and without allocating what the file claims.
CHEAP_REFUSALS = ("lying header", "huge unused member")


def _measured(load, stats):
    """`load`, recording its seconds and the growth of the process's peak RSS (Linux)."""
    def run(model, path):
        reset_peak()
        before = status_mb("VmRSS")
        start = time.perf_counter()
        try:
            return load(model, path)
        finally:
            stats["seconds"] = time.perf_counter() - start
            stats["peak_growth_mb"] = peak_rss_mb() - before
    return run


@pytest.mark.parametrize("case", list(HOSTILE_CHECKPOINTS))
def test_hostile_checkpoint_is_refused_by_name_and_changes_nothing(case, tmp_path):
    build, message = HOSTILE_CHECKPOINTS[case]
    path = build(tmp_path)
    stats = {}
    error = _assert_load_refused(path, message, load=_measured(keras_vit.load_weights, stats))
    assert "\n" not in message or "No weights were changed" in str(error)
    if case in CHEAP_REFUSALS:
        assert stats["seconds"] < 1.0, stats
        assert stats["peak_growth_mb"] < 100, stats


def test_a_huge_member_under_a_droppable_key_is_never_read(tmp_path):
    """An unused pre-training head is skipped from its header: the load costs no more."""
    arrays = _good_arrays(tmp_path)
    path = _zip_npz(tmp_path / "ok.npz", arrays, huge=("pre_logits/kernel", HUGE_UNUSED_BYTES))
    model = keras_vit.ViT(TINY, classes=10)
    stats = {}
    _measured(keras_vit.load_weights, stats)(model, str(path))
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), arrays["cls"])
    assert stats["peak_growth_mb"] < 100, stats


def test_a_whole_head_for_other_classes_still_starts_at_zero(tmp_path):
    """The zero-head rule stays for a complete head of another class count."""
    arrays = _good_arrays(tmp_path)
    path = _zip_npz(tmp_path / "ok.npz", arrays)
    model = keras_vit.load_weights(keras_vit.ViT(TINY, classes=3), str(path))
    assert not np.any(model.get_layer("head").kernel.numpy())
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), arrays["cls"])


def test_the_command_line_reports_a_lying_header_in_one_line(tmp_path, capsys):
    from keras_vit.cli import main

    # A file of the model named: one of another depth is refused before its headers are read.
    arrays = random_vit_npz(tmp_path / "good.npz", get_variant("Ti/16"), (4, 4), classes=10)
    path = _zip_npz(tmp_path / "bad.npz", arrays, raw=_lying_header(arrays))
    image = tmp_path / "x.png"
    keras.utils.save_img(str(image), np.zeros((8, 8, 3), np.uint8))
    code = main(["predict", str(image), "--model", "Ti/16", "--weights", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "cls: its header claims" in err, err


def test_truncated_file(tmp_path):
    good = tmp_path / "good.npz"
    random_vit_npz(good, TINY, (4, 4), classes=10)
    data = good.read_bytes()
    bad = tmp_path / "truncated.npz"
    bad.write_bytes(data[: len(data) // 2])
    _assert_load_refused(bad, "truncated.npz is not a readable .npz")
    with pytest.raises(CheckpointError, match="not a readable"):
        keras_vit.ViT(TINY, weights=str(bad))


def test_object_array_needing_pickle(tmp_path):
    path = tmp_path / "pickled.npz"
    arrays = random_vit_npz(tmp_path / "good.npz", TINY, (4, 4), classes=10)
    arrays["cls"] = np.array([{"evil": 1}], dtype=object)
    np.savez(path, **arrays)
    _assert_load_refused(path, "object arrays, which need pickle")


def test_another_variants_file_is_named(tmp_path):
    other = dataclasses.replace(get_variant("S/16"), depth=2, name="small")
    path = tmp_path / "s16.npz"
    random_vit_npz(path, other, (4, 4), classes=10)
    _assert_load_refused(path, r"(?s)shape mismatches.*width 384, depth 2, patch 16")


def test_a_failure_late_in_the_file_leaves_early_variables_untouched(tmp_path):
    """The last key is wrong; the first variables must not have been assigned."""
    path = _corrupt(tmp_path, lambda a: a.update({"Transformer/encoder_norm/scale": np.zeros(7)}))
    _assert_load_refused(path, "encoder_norm/scale")


def test_non_zip_file(tmp_path):
    path = tmp_path / "text.npz"
    path.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable"):
        keras_vit.load_weights(keras_vit.ViT(TINY), str(path))
    assert not zipfile.is_zipfile(path)


def test_a_mismatch_report_recognises_a_full_official_file():
    from keras_vit.checkpoints import describe_architecture

    arrays = {"embedding/kernel": np.zeros((32, 32, 3, 384)), "cls": np.zeros((1, 1, 384))}
    arrays.update({f"Transformer/encoderblock_{i}/LayerNorm_0/scale": np.zeros(1) for i in range(12)})
    assert describe_architecture(arrays).startswith("ViT-S_32 ")

    def hybrid_keys(stages_channels, depth=12):
        arrays = {"embedding/kernel": np.zeros((1, 1, stages_channels, 768)), "cls": 0,
                  "conv_root/kernel": 0}
        arrays.update({f"Transformer/encoderblock_{i}/x": 0 for i in range(depth)})
        return arrays

    assert describe_architecture(hybrid_keys(1024)).startswith("R50+ViT-B_16")
    assert describe_architecture(hybrid_keys(2048)).startswith("R26+ViT-B_32")


# --- hybrids: the ResNet trunk's keys, through the same loader ---------------------------------

@pytest.fixture
def hybrid_checkpoint(tmp_path):
    variant = TINY_HYBRID
    path = tmp_path / "hybrid.npz"
    arrays = random_hybrid_npz(path, variant, variant.token_grid((32, 32)), classes=5)
    return variant, path, arrays


def _broken(tmp_path, arrays, drop=(), replace=None):
    arrays = {k: v for k, v in arrays.items() if not k.startswith(drop)} if drop else dict(arrays)
    arrays.update(replace or {})
    path = tmp_path / "broken.npz"
    np.savez(path, **arrays)
    return str(path)


def test_a_hybrid_checkpoint_loads_every_trunk_array(hybrid_checkpoint):
    variant, path, arrays = hybrid_checkpoint
    model = keras_vit.ViT(variant, weights=str(path))
    trunk = model.get_layer("resnet")
    np.testing.assert_array_equal(trunk.conv_root.kernel.numpy(), arrays["conv_root/kernel"])
    unit = dict(((s, u), layer) for s, u, layer in trunk.units)[(2, 1)]
    np.testing.assert_array_equal(unit.gn_proj.gamma.numpy(),
                                  arrays["block2/unit1/gn_proj/scale"].reshape(-1))
    assert unit.conv_proj is not None and dict(
        ((s, u), layer) for s, u, layer in trunk.units)[(2, 2)].conv_proj is None


@pytest.mark.parametrize("problem", ["missing unit", "wrong channels"])
def test_a_failed_hybrid_load_names_the_problem_and_changes_nothing(problem, hybrid_checkpoint,
                                                                    tmp_path):
    variant, _, arrays = hybrid_checkpoint
    if problem == "missing unit":
        path = _broken(tmp_path, arrays, drop=("block2/unit2/",))
        expected = r"missing keys:\n    block2/unit2/conv1/kernel"
    else:
        path = _broken(tmp_path, arrays, replace={
            "block1/unit2/conv1/kernel": np.ones((1, 1, 128, 64), np.float32)})
        expected = r"block1/unit2/conv1/kernel: expected \(1, 1, 256, 64\), found \(1, 1, 128, 64\)"
    error = _assert_load_refused(path, expected, keras_vit.ViT(variant, image_size=32, classes=5))
    assert "No weights were changed" in str(error)
    # The trunk-only loader is as strict.
    _assert_load_refused(path, expected, keras_vit.ResNetV2(variant), keras_vit.load_resnet_weights)


def test_trunk_only_and_full_loads_report_a_broken_file_alike(hybrid_checkpoint, tmp_path):
    """load_resnet_weights is load_weights with the rows filtered: one report format."""
    variant, _, arrays = hybrid_checkpoint
    path = _broken(tmp_path, arrays, drop=("block2/unit2/",), replace={
        "block1/unit2/conv1/kernel": np.ones((1, 1, 128, 64), np.float32),
        "block3/unit1/conv1/kernel": np.ones((1, 1, 512, 256), np.float32)})
    full = str(_assert_load_refused(path, "does not fit", keras_vit.ViT(variant, image_size=32,
                                                                         classes=5)))
    trunk = str(_assert_load_refused(path, "does not fit", keras_vit.ResNetV2(variant),
                                     keras_vit.load_resnet_weights))
    reports = {"full": full.splitlines(), "trunk": trunk.splitlines()}
    first = {k: re.fullmatch(r"(.+) does not fit (.+):", lines[0]) for k, lines in reports.items()}
    assert first["full"] and first["trunk"], reports
    assert first["full"].group(1) == first["trunk"].group(1) == path
    assert first["full"].group(2) == f"model {variant.name!r}"
    assert first["trunk"].group(2) == "the ResNet trunk of model 'R-tiny_resnet'"
    titles = {k: [m.group(1) for line in lines if (m := re.fullmatch(r"  \d+ (.+):", line))]
              for k, lines in reports.items()}
    assert titles["full"] == titles["trunk"] == ["missing keys", "unexpected keys",
                                                 "shape mismatches"]
    assert reports["full"][-1] == reports["trunk"][-1] == "  No weights were changed."
    # Only trunk keys are wrong, so everything after the subject is the same.
    assert reports["full"][1:] == reports["trunk"][1:]


def test_an_extra_unit_is_reported(hybrid_checkpoint, tmp_path):
    variant, _, arrays = hybrid_checkpoint
    extra = {k.replace("unit2", "unit3"): v for k, v in arrays.items() if "block2/unit2/" in k}
    path = _broken(tmp_path, arrays, replace=extra)
    with pytest.raises(keras_vit.CheckpointError, match="unexpected keys:\n    block2/unit3/"):
        keras_vit.ViT(variant, weights=path)


def test_resnet_features_load_the_trunk_of_a_hybrid_file(hybrid_checkpoint):
    variant, path, _ = hybrid_checkpoint
    hybrid = keras_vit.ViT(variant, weights=str(path))
    trunk = keras_vit.ResNetV2(variant, weights=str(path))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    np.testing.assert_allclose(trunk(x)["block2"].numpy(),
                               hybrid.get_layer("resnet")(x).numpy(), atol=1e-6)


def test_a_loaded_hybrid_and_its_trunk_survive_keras_saving(hybrid_checkpoint, tmp_path):
    variant, path, _ = hybrid_checkpoint
    model = keras_vit.ViT(variant, weights=str(path))
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    file = tmp_path / "hybrid.keras"
    model.save(file)
    restored = keras.saving.load_model(file)  # safe_mode stays on: no Lambda, no pickles
    np.testing.assert_array_equal(restored(x).numpy(), model(x).numpy())
    layer = restored.get_layer("resnet")
    assert type(layer).__name__ == "ResNetTrunk" and layer.stages == (2, 2)
    trunk = keras_vit.ResNetV2(variant, weights=str(path))
    trunk.save(tmp_path / "trunk.keras")
    again = keras.saving.load_model(tmp_path / "trunk.keras")
    np.testing.assert_array_equal(again(x)["block2"].numpy(), trunk(x)["block2"].numpy())


def test_position_embedding_resizes_to_the_hybrid_grid(hybrid_checkpoint):
    variant, path, _ = hybrid_checkpoint  # saved for 32 px: a 4 x 4 grid at stride 8
    model = keras_vit.ViT(variant, weights=str(path), image_size=50)  # ceil(50 / 8) = 7
    posembed = model.get_layer("posembed_input")
    assert posembed.grid_size == (7, 7)
    assert tuple(posembed.pos_embedding.shape) == (1, 1 + 49, 64)
