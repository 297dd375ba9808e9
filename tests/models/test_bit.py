"""BiT ResNetV2, the paper's CNN baseline: logits against timm's resnetv2_*_bit loaded from a
big_transfer-layout .npz, parameter counts of every size, the release files through the
catalogue and the strict loader, refusals, the command line, and its layers' numerics."""

import json
import os
import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints import find_checkpoint
from keras_vit.checkpoints.cache import WEIGHTS_URL_ENV
from keras_vit.variants import BIT_VARIANTS, get_bit_variant
from tests.checkpoints.test_cache import server  # noqa: F401  the HTTP mirror on 127.0.0.1
from tests.conftest import BIG_MEMORY_BYTES
from tests.oracle import import_timm, official_bit_arrays, random_vit_npz, run_timm

# timm 1.0.31's parameter counts with 1000 classes (timm.create_model(name, num_classes=1000)
# on the meta device, summed over parameters()); test_the_table_is_timms_count re-counts them.
TIMM_PARAMS = {
    "BiT-R50x1": ("resnetv2_50x1_bit", 25_549_352),
    "BiT-R50x3": ("resnetv2_50x3_bit", 217_319_080),
    "BiT-R101x1": ("resnetv2_101x1_bit", 44_541_480),
    "BiT-R101x3": ("resnetv2_101x3_bit", 387_934_888),
    "BiT-R152x2": ("resnetv2_152x2_bit", 236_335_208),
    "BiT-R152x4": ("resnetv2_152x4_bit", 936_533_224),
}


def test_every_bit_size_has_its_timm_count():
    assert set(TIMM_PARAMS) == set(BIT_VARIANTS)


def test_the_table_is_timms_count():
    """timm's counts, on the meta device (no memory): the numbers above are timm's."""
    timm = import_timm()
    import torch

    assert sorted(timm.list_models("resnetv2_*_bit")) == sorted(n for n, _ in TIMM_PARAMS.values())
    for name, count in TIMM_PARAMS.values():
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, num_classes=1000)
        assert sum(p.numel() for p in model.parameters()) == count, name


def test_parameter_count_equals_timms_r50x1(r50):
    """The default run's count: R50x1 (counts do not depend on the image size: built at 32 px).
    Every other size: test_parameter_count_equals_timms, under `slow`."""
    assert r50.count_params() == TIMM_PARAMS["BiT-R50x1"][1]


@pytest.mark.slow
# a model of over a gigabyte of weights: R152x4 grew its worker by 4.2 GiB (the conftest bound)
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=(pytest.mark.big_memory,) if TIMM_PARAMS[n][1] * 4 > BIG_MEMORY_BYTES
                 else ()) for n in TIMM_PARAMS if n != "BiT-R50x1"])
def test_parameter_count_equals_timms(name):
    """The five larger sizes (depths 101 and 152, widths 1 to 4, up to 3.7 GB of weights),
    built at 32 px; the default run counts R50x1 (test_parameter_count_equals_timms_r50x1)."""
    model = keras_vit.BiT(name, image_size=32)
    assert model.count_params() == TIMM_PARAMS[name][1]


def test_names_and_constructors():
    assert keras_vit.BiT_R50x1.__name__ == "BiT_R50x1"
    for spelling in ("BiT-R50x1", "R50x1", "bit_r50x1", "resnetv2_50x1_bit"):
        assert get_bit_variant(spelling) is BIT_VARIANTS["BiT-R50x1"]
    assert keras_vit.variants.get_architecture("BiT-R101x3") is BIT_VARIANTS["BiT-R101x3"]
    assert keras_vit.variants.get_architecture("r101x3") is BIT_VARIANTS["BiT-R101x3"]
    assert keras_vit.variants.get_architecture("resnetv2_152x4_bit") is BIT_VARIANTS["BiT-R152x4"]
    assert keras_vit.variants.get_architecture("B/16").name == "ViT-B_16"
    with pytest.raises(keras_vit.ArgumentError, match="is a BiT ResNet, not a ViT"):
        keras_vit.ViT("BiT-R50x1")
    with pytest.raises(keras_vit.ArgumentError, match='Unknown BiT model .R50x2.. Did you mean'):
        keras_vit.BiT("R50x2")


def test_each_constructor_is_bit_with_its_size(monkeypatch):
    """BiT_R50x1 ... BiT_R152x4: BiT's signature minus `variant`, each asking BiT for its own
    size (nothing is built)."""
    import inspect

    from keras_vit.models import bit as bit_module

    parameters = list(inspect.signature(keras_vit.BiT).parameters.values())
    calls = []
    monkeypatch.setattr(bit_module, "BiT", lambda variant, **kwargs: calls.append((variant, kwargs)))
    for name in BIT_VARIANTS:
        constructor = getattr(keras_vit, name.replace("-", "_"))
        assert list(inspect.signature(constructor).parameters.values()) == parameters[1:]
        constructor(image_size=-1)
        assert calls.pop() == (name, {"weights": None, "image_size": -1})


# --- parity with timm, through a file in big_transfer's layout ------------------------------

def _randomize(model, seed):
    """Every timm parameter random (timm zero-initialises each unit's last convolution, which
    would hide that branch): GroupNorm scales near 1, biases and kernels small."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            is_norm_scale = "norm" in name and name.endswith("weight")
            parameter.copy_(1 + 0.1 * noise if is_norm_scale else
                            0.1 * noise if name.endswith("bias") else 0.05 * noise)


def _bit_npz_from_timm(model, path):
    """Writes `model` (timm's ResNetV2 BiT) in big_transfer's layout: timm's own
    `resnetv2._load_weights`, inverted (OIHW -> HWIO; keys as it reads them)."""
    def hwio(tensor):
        return tensor.detach().numpy().transpose(2, 3, 1, 0)

    def vector(tensor):
        return tensor.detach().numpy()

    arrays = {"resnet/root_block/standardized_conv2d/kernel": hwio(model.stem.conv.weight),
              "resnet/group_norm/gamma": vector(model.norm.weight),
              "resnet/group_norm/beta": vector(model.norm.bias),
              "resnet/head/conv2d/kernel": hwio(model.head.fc.weight),
              "resnet/head/conv2d/bias": vector(model.head.fc.bias)}
    for i, stage in enumerate(model.stages):
        for j, block in enumerate(stage.blocks):
            prefix = f"resnet/block{i + 1}/unit{j + 1:02d}/"
            for part, conv, norm in (("a", block.conv1, block.norm1), ("b", block.conv2, block.norm2),
                                     ("c", block.conv3, block.norm3)):
                arrays[f"{prefix}{part}/standardized_conv2d/kernel"] = hwio(conv.weight)
                arrays[f"{prefix}{part}/group_norm/gamma"] = vector(norm.weight)
                arrays[f"{prefix}{part}/group_norm/beta"] = vector(norm.bias)
            if block.downsample is not None:
                arrays[f"{prefix}a/proj/standardized_conv2d/kernel"] = hwio(block.downsample.conv.weight)
    np.savez(path, **arrays)


@pytest.fixture(scope="module")
def timm_bit(tmp_path_factory):
    """(timm resnetv2_50x1_bit with random weights, the .npz it was written to), the file
    checked by loading it back with timm's own BiT loader into a fresh model."""
    timm = import_timm()
    import torch
    from timm.models.resnetv2 import _load_weights

    model = timm.create_model("resnetv2_50x1_bit", pretrained=False, num_classes=1000).eval()
    _randomize(model, seed=0)
    path = tmp_path_factory.mktemp("bit") / "BiT-R50x1-random.npz"
    _bit_npz_from_timm(model, path)
    fresh = timm.create_model("resnetv2_50x1_bit", pretrained=False, num_classes=1000)
    with torch.no_grad():
        _load_weights(fresh, str(path))
    for (name, ours), (_, loaded) in zip(model.state_dict().items(), fresh.state_dict().items(),
                                         strict=True):
        assert torch.equal(ours, loaded), f"timm's loader reads {name} otherwise"
    return model, str(path)


def _check_parity(timm_bit, size):
    model, path = timm_bit
    images = np.random.default_rng(size).uniform(-1, 1, (2, size, size, 3)).astype(np.float32)
    expected = run_timm(model, images)
    ours = np.asarray(keras_vit.BiT_R50x1(weights=path, image_size=size)(images))
    # float32 (unit roundoff u = 6e-8): a convolution sums up to n = 3 * 3 * 512 = 4608 products
    # (relative error ~ sqrt(n) u = 4e-6), and GroupNorm re-normalises after each of the ~50
    # layers, so errors add (as a random walk, ~ sqrt(50) * 4e-6 = 3e-5 relative) instead of
    # compounding; on logits of magnitude <= 4 that is ~1e-4 (measured: 2.8e-5 at 128 px).
    assert np.abs(expected).max() > 1  # logits of order 1: a 1e-4 tolerance is meaningful
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)
    assert (ours.argmax(-1) == expected.argmax(-1)).all()


def test_random_bit_npz_matches_timm_at_128(timm_bit):
    _check_parity(timm_bit, 128)


@pytest.mark.slow
def test_random_bit_npz_matches_timm_at_224(timm_bit):
    """224 px: the same computation as test_random_bit_npz_matches_timm_at_128 (the default
    run's), at the release resolution."""
    _check_parity(timm_bit, 224)


def test_save_npz_writes_big_transfers_layout_that_timm_reads_back(timm_bit, tmp_path):
    """keras_vit.save_npz of a BiT: the file it was loaded from, array for array (plus
    keras_vit's metadata member), and timm's own BiT loader fills a fresh timm model from it
    with exactly the weights of the model the file came from."""
    import torch
    from timm.models.resnetv2 import _load_weights

    timm = import_timm()
    source_model, source = timm_bit
    written = keras_vit.save_npz(keras_vit.BiT_R50x1(weights=source, image_size=32),
                                 str(tmp_path / "saved.npz"))
    with np.load(source) as original, np.load(written) as saved:
        assert sorted(saved.files) == sorted([*original.files, "keras_vit/metadata"])
        for key in original.files:
            np.testing.assert_array_equal(saved[key], original[key], err_msg=key)
    fresh = timm.create_model("resnetv2_50x1_bit", pretrained=False, num_classes=1000)
    with torch.no_grad():
        _load_weights(fresh, written)
    for (name, expected), (_, loaded) in zip(source_model.state_dict().items(),
                                             fresh.state_dict().items(), strict=True):
        assert torch.equal(expected, loaded), name


# --- the release files through the catalogue, the cache and the strict loader ----------------

@pytest.fixture(scope="module")
def bit_s_file(tmp_path_factory):
    """A random BiT-S-R50x1.npz (1000 classes) in big_transfer's layout: (path, arrays)."""
    arrays = official_bit_arrays(50, 1, classes=1000, seed=1)
    path = tmp_path_factory.mktemp("release") / "BiT-S-R50x1.npz"
    np.savez(path, **arrays)
    return str(path), arrays


@pytest.fixture(scope="module")
def r50(tmp_path_factory):
    """One BiT-R50x1 at 32 px with 1000 classes, for the refusal tests (nothing is loaded)."""
    return keras_vit.BiT_R50x1(image_size=32)


def test_catalogue_entries_are_big_transfers_files():
    variant = get_bit_variant("R50x1")
    for tag, name, classes in (("bit-m", "BiT-M-R50x1.npz", 21843),
                               ("bit-s", "BiT-S-R50x1.npz", 1000),
                               ("bit-m-ilsvrc2012", "BiT-M-R50x1-ILSVRC2012.npz", 1000)):
        entry = find_checkpoint(variant, tag)
        assert entry.url == f"https://storage.googleapis.com/bit_models/{name}"
        assert entry.classes == classes and entry.format == "bit"
        assert entry.cache_key == f"bit_models/{name}"
    assert find_checkpoint(variant, "imagenet").tag == "bit-m-ilsvrc2012"
    assert keras_vit.list_models()["BiT-R152x4"] == ["bit-m", "bit-s", "bit-m-ilsvrc2012"]


def test_catalogue_file_through_the_mirror_and_the_verified_cache(server, bit_s_file):  # noqa: F811
    """weights="bit-s": fetched from $KERAS_VIT_WEIGHTS_URL (the mirror stands for the
    bit_models bucket), checked against the entry, cached at bit_models/..., pinned; the
    arrays land in the model unchanged; a second build reads the cache only."""
    path, arrays = bit_s_file
    shutil.copy(path, os.path.join(server.root, "BiT-S-R50x1.npz"))
    model = keras_vit.BiT_R50x1(weights="bit-s", image_size=32)
    assert server.requests == ["/BiT-S-R50x1.npz"]
    cached = os.path.join(os.environ["KERAS_HOME"], "keras_vit", "bit_models", "BiT-S-R50x1.npz")
    assert os.path.exists(cached)
    np.testing.assert_array_equal(model.get_layer("root_block").kernel.numpy(),
                                  arrays["resnet/root_block/standardized_conv2d/kernel"])
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(),
                                  arrays["resnet/head/conv2d/kernel"][0, 0])
    unit = model.get_layer("block2_unit01")
    np.testing.assert_array_equal(unit.a_proj.kernel.numpy(),
                                  arrays["resnet/block2/unit01/a/proj/standardized_conv2d/kernel"])
    np.testing.assert_array_equal(unit.b_norm.gamma.numpy(),
                                  arrays["resnet/block2/unit01/b/group_norm/gamma"])
    find_checkpoint(get_bit_variant("R50x1"), "bit-s").open().close()  # checked, from the cache
    assert server.requests == ["/BiT-S-R50x1.npz"]


def test_a_file_that_is_not_its_entry_is_refused(server, bit_s_file):  # noqa: F811
    """The 1000-class file served as BiT-M (21843 classes): refused, not cached."""
    shutil.copy(bit_s_file[0], os.path.join(server.root, "BiT-M-R50x1.npz"))
    with pytest.raises(keras_vit.WeightsUnavailableError,
                       match=r"'bit-m' BiT-R50x1 file.*classes 1000 where the entry says 21843"):
        find_checkpoint(get_bit_variant("R50x1"), "bit-m").open()  # what BiT_R50x1(weights=) opens
    assert not os.path.exists(os.path.join(os.environ["KERAS_HOME"], "keras_vit", "bit_models",
                                           "BiT-M-R50x1.npz"))


def test_offline_message_names_the_url_and_the_cache_path(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setenv(WEIGHTS_URL_ENV, "http://127.0.0.1:9")  # nothing listens: refused at once
    with pytest.raises(keras_vit.WeightsUnavailableError) as error:
        find_checkpoint(get_bit_variant("R50x3"), "bit-m-ilsvrc2012").open()
    message = str(error.value)
    assert "http://127.0.0.1:9/BiT-M-R50x3-ILSVRC2012.npz" in message
    assert "gs://bit_models/BiT-M-R50x3-ILSVRC2012.npz" in message
    assert os.path.join(str(tmp_path), "keras_vit", "bit_models", "BiT-M-R50x3-ILSVRC2012.npz") in message
    assert "\n" not in message


def test_a_head_of_another_class_count_starts_at_zero(bit_s_file):
    path, arrays = bit_s_file
    model = keras_vit.BiT_R50x1(weights=path, image_size=32, classes=5)
    assert not model.get_layer("head").kernel.numpy().any()
    assert not model.get_layer("head").bias.numpy().any()
    np.testing.assert_array_equal(model.get_layer("group_norm").gamma.numpy(),
                                  arrays["resnet/group_norm/gamma"])


def _weights(model):
    return [w.numpy().copy() for w in model.weights]


@pytest.mark.parametrize("change, named", [
    ("drop", "resnet/block3/unit04/b/standardized_conv2d/kernel"),
    ("reshape", "resnet/block1/unit01/a/proj/standardized_conv2d/kernel"),
])
def test_a_wrong_bit_file_is_refused_naming_file_and_key_with_nothing_assigned(
        change, named, r50, bit_s_file, tmp_path, cli):
    arrays = dict(bit_s_file[1])
    if change == "drop":
        del arrays[named]
    else:
        arrays[named] = arrays[named][:, :, :, :128]
    path = str(tmp_path / "wrong.npz")
    np.savez(path, **arrays)
    before = _weights(r50)
    with pytest.raises(keras_vit.CheckpointError) as error:
        keras_vit.load_weights(r50, path)
    message = str(error.value)
    assert message.splitlines()[0].startswith(path) and named in message
    assert "missing" in message if change == "drop" else "(1, 1, 64, 256), found (1, 1, 64, 128)" in message
    for old, new in zip(before, _weights(r50), strict=True):
        np.testing.assert_array_equal(old, new)
    if change == "reshape":
        return
    # The command line says it in one line, exit 2 (one case: each builds a model).
    result = cli(["export", "--model", "BiT-R50x1", "--weights", path, "--image-size", "32",
                  "--output", str(tmp_path / "out")])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and named in lines[0], result.stderr


def test_a_vit_file_given_to_bit_and_a_bit_file_given_to_vit_are_refused(r50, bit_s_file, tmp_path):
    vit_path = str(tmp_path / "vit.npz")
    ti = keras_vit.get_variant("Ti/16")
    random_vit_npz(vit_path, ti, (2, 2), classes=10)
    before = _weights(r50)
    with pytest.raises(keras_vit.CheckpointError) as error:
        keras_vit.load_weights(r50, vit_path)
    message = str(error.value)
    assert "\n" not in message and vit_path in message
    assert "ViT-Ti_16" in message and "not a BiT ResNetV2" in message
    for old, new in zip(before, _weights(r50), strict=True):
        np.testing.assert_array_equal(old, new)
    with pytest.raises(keras_vit.CheckpointError, match="not a BiT ResNetV2"):
        keras_vit.BiT_R50x1(weights=vit_path, image_size=32)

    vit = keras_vit.ViT("Ti/16", image_size=32, classes=10)
    vit_before = _weights(vit)
    with pytest.raises(keras_vit.CheckpointError) as error:
        keras_vit.load_weights(vit, bit_s_file[0])
    message = str(error.value)
    assert "\n" not in message and bit_s_file[0] in message
    assert "is a BiT ResNetV2 checkpoint (BiT-R50x1" in message and "keras_vit.BiT" in message
    for old, new in zip(vit_before, _weights(vit), strict=True):
        np.testing.assert_array_equal(old, new)
    with pytest.raises(keras_vit.CheckpointError, match="is a BiT ResNetV2 checkpoint"):
        keras_vit.ViT("Ti/16", weights=bit_s_file[0], image_size=32)


def test_the_bit_format_is_detected_from_member_names():
    from keras_vit.checkpoints.formats import FORMATS

    names = [f.name for f in FORMATS]
    assert names[-1] == "npz" and "bit" in names  # bit before npz, which takes any file


# --- keras.applications arguments -------------------------------------------------------------

def test_keras_applications_arguments(r50):
    features = keras_vit.BiT("R50x1", include_top=False, image_size=(32, 48))
    assert features.output_shape == (None, 1, 2, 2048)
    pooled = keras_vit.BiT("R50x1", include_top=False, pooling="max", input_shape=(32, 32, 3))
    assert pooled.output_shape == (None, 2048)
    raw = keras_vit.BiT_R50x1(image_size=32, classes=4, include_preprocessing=True,
                              classifier_activation="softmax")
    assert raw.get_layer("preprocessing").scale == pytest.approx(1 / 127.5)
    assert raw.output_shape == (None, 4)
    for kwargs in ({"pooling": "max"}, {"include_top": False, "classes": 3},
                   {"include_top": False, "classifier_activation": "softmax"},
                   {"weights": "imagenet21k"}):
        with pytest.raises(keras_vit.ArgumentError):
            keras_vit.BiT_R50x1(image_size=32, **kwargs)


# --- layers -------------------------------------------------------------------------------------

def test_bit_standardisation_adds_epsilon_to_the_variance():
    """BiT's StdConv2D against NumPy: (w - mean) / sqrt(var + 1e-8), over H, W, Cin."""
    from keras_vit.layers.resnet import bit_conv

    conv = bit_conv(4, 3)
    x = np.random.default_rng(0).standard_normal((1, 5, 5, 2)).astype(np.float32)
    conv.build(x.shape)
    kernel = np.random.default_rng(1).standard_normal((3, 3, 2, 4)).astype(np.float32) * 1e-3
    conv.kernel.assign(kernel)
    centred = kernel - kernel.mean(axis=(0, 1, 2), keepdims=True)
    standard = centred / np.sqrt((centred ** 2).mean(axis=(0, 1, 2), keepdims=True) + 1e-8)
    expected = np.einsum("hwio,bhwi->bo", standard, x[:, 1:4, 1:4, :])
    np.testing.assert_allclose(np.asarray(conv(x))[:, 1, 1], expected, rtol=1e-5, atol=1e-5)


# --- the command line -------------------------------------------------------------------------

def _train_and_reload(python, tmp_path, extra):
    output = tmp_path / "run"
    result = python(["-m", "keras_vit.cli", "train", "--model", "BiT-R50x1", "--recipe", "scratch",
                     "--dataset", "digits", *extra, "--output", str(output)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    check = python(["-c", "import keras, keras_vit, sys; m = keras.saving.load_model(sys.argv[1]); "
                          "print(m.name, m.count_params())", str(output / "model.keras")], timeout=300)
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.split() == ["BiT-R50x1", str(25_549_352 - 2048 * 1000 - 1000 + 2048 * 10 + 10)]
    return output


def test_train_bit_one_step_and_reload(tmp_path):
    """One weight update of BiT-R50x1 as `keras-vit train` builds and compiles it (the name
    resolved by get_architecture, run.build_model, the scratch recipe's optimizer), saved to
    .keras and reloaded; the whole command runs in test_train_bit_on_digits_end_to_end (slow:
    a traced R50 step and three 280 MB files take ~40 s of CPU)."""
    import keras

    from keras_vit.training import get_recipe
    from keras_vit.training.recipes import make_optimizer
    from keras_vit.training.run import build_model

    model = build_model(keras_vit.variants.get_architecture("BiT-R50x1"), None, 16, 10)
    model.compile(optimizer=make_optimizer(get_recipe("scratch", learning_rate=1e-2), 1),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True), run_eagerly=True)
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[[0, 1, 2, 3]]
    head = model.get_layer("head").kernel.numpy().copy()
    model.fit(images, labels, batch_size=4, epochs=1, verbose=0)
    assert not np.array_equal(model.get_layer("head").kernel.numpy(), head)  # it learned
    # Saved without the optimizer's two 100 MB slots (its reload is the ViTs' tests' business;
    # BiT's own layers are what is new here): the same layers, in an uncompiled model.
    path = str(tmp_path / "model.keras")
    keras.Model(model.input, model.output, name=model.name).save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.name == "BiT-R50x1" and reloaded.count_params() == model.count_params()
    np.testing.assert_allclose(np.asarray(reloaded(images)), np.asarray(model(images)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_train_bit_on_digits_end_to_end(python, tmp_path):
    """`keras-vit train --model BiT-R50x1 --recipe scratch --dataset digits --epochs 1`, its
    model.keras reloaded in a fresh process after `import keras_vit` (default run:
    test_train_bit_one_step_and_reload)."""
    output = _train_and_reload(python, tmp_path, ["--epochs", "1"])
    report = json.loads((output / "report.json").read_text())
    assert report["num_test"] == 360 and 0 <= report["accuracy"] <= 1
