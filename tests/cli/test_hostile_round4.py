"""Hostile inputs to the commands, fourth round: each refused in one line on stderr, exit 2,
with nothing the user had written or overwritten."""

import os

import numpy as np
import pytest

import keras_vit


def _snapshot(folder):
    return {os.path.relpath(os.path.join(root, name), folder):
            open(os.path.join(root, name), "rb").read()
            for root, _, files in os.walk(folder) for name in files}


def _one_line(result, *named):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"keras-vit {result.args[1]}: error: "), \
        result.stderr
    for text in named:
        assert text in lines[0], lines[0]


@pytest.fixture(scope="module")
def vit_npz(tmp_path_factory):
    """A ViT's .npz as keras_vit writes it (its record of the variant inside)."""
    path = str(tmp_path_factory.mktemp("vit") / "vit.npz")
    keras_vit.save_npz(keras_vit.ViT("demo", image_size=16, classes=3), path)
    return path


def test_a_vit_npz_of_keras_vits_own_for_a_bit_is_one_line(cli, vit_npz, tmp_path):
    """The file records its ViT: the check of that record must not read a BiT's heads."""
    with pytest.raises(keras_vit.CheckpointError, match="not a BiT ResNetV2") as raised:
        keras_vit.BiT_R50x1(weights=vit_npz, image_size=32)
    assert "\n" not in str(raised.value)
    image = tmp_path / "a.png"
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    _one_line(cli(["predict", "--model", "BiT-R50x1", "--weights", vit_npz, str(image)]),
              vit_npz, "not a BiT ResNetV2")


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """A .keras model, and a run-like folder holding one as model.keras."""
    folder = tmp_path_factory.mktemp("models")
    model = keras_vit.ViT("demo", image_size=16, classes=3)
    model.save(folder / "m.keras")
    (folder / "run").mkdir()
    model.save(folder / "run" / "model.keras")
    return folder


@pytest.mark.parametrize("arguments, named", [
    (["--model", "{m}/m.keras", "--format", "tflite", "--output", "{m}/m.keras"],
     "writes a .tflite file"),
    (["--model", "{m}/m.keras", "--format", "keras", "--output", "{m}/m.keras"],
     "is the model --model"),
    (["--model", "{m}/m.keras", "--format", "keras", "--output", "{m}/./m.keras"],
     "is the model --model"),
    (["--model", "{m}/run", "--format", "keras", "--output", "{m}/run/model.keras"],
     "a file of the model folder"),
    (["--model", "{m}/m.keras", "--format", "tflite", "--output", "{m}/new.keras"],
     "writes a .tflite file"),
    (["--model", "{m}/m.keras", "--output", "{m}/new.tflite"], "writes a folder"),
], ids=["tflite-over-the-input", "keras-over-the-input", "the-input-spelled-otherwise",
        "over-a-runs-model", "tflite-named-keras", "saved_model-named-tflite"])
def test_export_never_writes_over_its_model_nor_under_another_formats_name(
        cli, model_files, arguments, named):
    before = _snapshot(model_files)
    result = cli(["export", *[a.replace("{m}", str(model_files)) for a in arguments]])
    _one_line(result, named)
    assert _snapshot(model_files) == before  # nothing written or overwritten


def test_a_lora_run_out_of_memory_names_its_rank(cli, monkeypatch, tmp_path):
    import keras_vit.training

    def no_memory(**kwargs):
        raise MemoryError("planted")
    monkeypatch.setattr(keras_vit.training, "train", no_memory)
    result = cli(["train", "--lora-rank", "8", "--batch-size", "16", "--output",
                  str(tmp_path / "run")])
    _one_line(result, "out of memory", "retry with a smaller --batch-size or --lora-rank")


@pytest.fixture(scope="module")
def digit_models(tmp_path_factory):
    """Models of the digits' ten classes at 8x8: a float .keras, its int8 quantisation (as
    `export --format keras --quantize int8` writes it), a one-channel one and a LoRA one."""
    import warnings

    folder = tmp_path_factory.mktemp("digit_models")
    model = keras_vit.ViT("demo", image_size=8, classes=10)
    model.save(folder / "float.keras")
    with warnings.catch_warnings():  # Keras names each layer it has no int8 form of
        warnings.simplefilter("ignore")
        model.quantize("int8")
    model.save(folder / "int8.keras")
    keras_vit.ViT("demo", image_size=8, classes=10, channels=1).save(folder / "gray.keras")
    lora = keras_vit.enable_lora(keras_vit.ViT("demo", image_size=8, classes=10), rank=2)
    lora.save(folder / "lora.keras")
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "a.png")
    return folder


@pytest.mark.parametrize("teacher, named", [("int8.keras", "quantised (int8)"),
                                            ("gray.keras", "takes 1 channels")],
                         ids=["int8", "one-channel"])
def test_a_teacher_that_cannot_teach_is_refused_before_the_run_starts(
        cli, digit_models, tmp_path, teacher, named):
    result = cli(["train", "--dataset", "digits", "--model", "demo", "--image-size", "8",
                  "--steps", "1", "--teacher", str(digit_models / teacher),
                  "--output", str(tmp_path / "run")])
    _one_line(result, named)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("arguments, named", [
    (["predict", "--model", "{m}/int8.keras", "--precision", "bfloat16", "{m}/a.png"],
     "quantised (int8)"),
    (["export", "--model", "{m}/int8.keras", "--precision", "bfloat16", "--format", "keras",
      "--output", "{o}/b.keras"], "quantised (int8)"),
    (["export", "--model", "{m}/int8.keras", "--quantize", "int8", "--format", "keras",
      "--output", "{o}/q.keras"], "already quantised (int8)"),
], ids=["predict-bfloat16", "export-bfloat16", "export-requantised"])
def test_an_int8_model_is_not_cast_nor_quantised_again(cli, digit_models, tmp_path, arguments,
                                                       named):
    result = cli([a.replace("{m}", str(digit_models)).replace("{o}", str(tmp_path))
                  for a in arguments])
    _one_line(result, named)
    assert os.listdir(tmp_path) == []


def test_a_lora_model_runs_in_bfloat16(cli, digit_models, tmp_path):
    """Saved merged (keras_vit/lora.py), a LoRA model is a plain model to bfloat16."""
    result = cli(["predict", "--model", str(digit_models / "lora.keras"), "--precision",
                  "bfloat16", "--top", "1", "--output", str(tmp_path / "p.csv"),
                  str(digit_models / "a.png")])
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 2  # a header, the image


@pytest.mark.parametrize("archive", ["photos.zip", "flowers.tar.gz"],
                         ids=["a-zip-that-exists", "a-tarball-that-does-not"])
@pytest.mark.parametrize("command", [
    ["train", "--model", "demo", "--image-size", "8", "--steps", "1", "--output", "{o}/run",
     "--dataset"],
    ["evaluate", "--model", "{m}/float.keras", "--output", "{o}/eval", "--dataset"],
    ["export", "--model", "{m}/float.keras", "--format", "tflite", "--quantize", "int8",
     "--output", "{o}/m.tflite", "--calibration-data"],
], ids=["train", "evaluate", "export"])
def test_an_archive_as_a_dataset_is_refused_saying_extract_it_first(
        cli, digit_models, tmp_path, monkeypatch, archive, command):
    monkeypatch.chdir(tmp_path)
    if archive.endswith(".zip"):
        import zipfile

        with zipfile.ZipFile(archive, "w") as zipped:
            zipped.writestr("cats/a.png", b"")
    before = _snapshot(tmp_path)
    result = cli([a.replace("{m}", str(digit_models)).replace("{o}", str(tmp_path))
                  for a in command] + [archive])
    _one_line(result, archive, "archives are not read", "extract")
    assert _snapshot(tmp_path) == before


def test_lora_targets_without_a_rank_are_refused(cli, tmp_path):
    result = cli(["train", "--lora-targets", "mlp", "--output", str(tmp_path / "run")])
    _one_line(result, "--lora-targets needs --lora-rank")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("arguments", [["info"], ["predict", "--model", "{m}/float.keras",
                                                  "{m}/a.png", "{m}/a.png"]],
                         ids=["info", "predict"])
def test_a_reader_that_has_gone_ends_the_command_quietly(digit_models, arguments):
    """`keras-vit info | head -1`: stdout a pipe whose reader has closed. Ends as a Unix tool
    the pipe killed, 128 + SIGPIPE, with no traceback."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "keras_vit.cli",
             *[a.replace("{m}", str(digit_models)) for a in arguments]],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


def test_calibration_images_are_bounded_and_exports_memory_advice_names_its_own_flags(
        cli, digit_models, tmp_path, monkeypatch):
    arguments = ["export", "--model", str(digit_models / "float.keras"), "--format", "tflite",
                 "--quantize", "int8", "--calibration-data", "digits",
                 "--output", str(tmp_path / "m.tflite")]
    _one_line(cli([*arguments, "--calibration-images", "100000"]),
              "--calibration-images 100000", "1000")
    assert os.listdir(tmp_path) == []
    from keras_vit.cli import export

    def no_memory(args, model):
        raise MemoryError("planted")
    monkeypatch.setattr(export, "_export_quantized", no_memory)
    result = cli(arguments)
    _one_line(result, "out of memory", "retry with a smaller --calibration-images")
    assert "--batch-size" not in result.stderr  # a flag export does not have


@pytest.mark.parametrize("address", ["hf://me/tiny@../../../../evilref", "hf://me/tiny@/etc",
                                     "hf://../../tiny", "hf://me/tiny@main/../../x"],
                         ids=["revision-up", "revision-absolute", "repo-up", "revision-inside-up"])
def test_a_hub_address_never_reaches_outside_the_hub_cache(cli, digit_models, monkeypatch,
                                                           address):
    """Offline, huggingface_hub reads the revision as a file under its cache's refs/: the
    address is refused as spelled, before the Hub is asked."""
    import huggingface_hub

    asked = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda *args, **kwargs: asked.append(args) or "/")
    with pytest.raises(keras_vit.CheckpointError, match="hf://owner/name|is not a revision"):
        keras_vit.from_pretrained(address)
    _one_line(cli(["predict", "--model", "demo", "--weights", address,
                   str(digit_models / "a.png")]), address)
    assert asked == []


def test_an_int8_model_of_a_trained_run_loads_without_a_warning(tmp_path):
    """An int8 export of a compiled, trained model keeps its optimizer's state, which Keras'
    fresh optimizer skips with a UserWarning on every load: nothing a user can act on."""
    import warnings

    import keras

    from keras_vit.models.factory import load_keras

    model = keras_vit.ViT("demo", image_size=8, classes=3)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(np.zeros((2, 8, 8, 3), np.float32), np.zeros((2,), np.int32), verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.quantize("int8")
    model.save(tmp_path / "int8.keras")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_keras(tmp_path / "int8.keras")
    assert [str(w.message) for w in caught if "optimizer" in str(w.message)] == []
    assert isinstance(loaded, keras.Model)


@pytest.mark.parametrize("content", ["legacy-pickle", "torch-zip-of-an-object"])
def test_a_pth_refusal_comes_with_no_warning_before_it(tmp_path, content):
    """torch's warnings on the way (its import's, its loader's) would print before the
    command's one line: the refusal is all there is."""
    import pickle
    import warnings

    torch = pytest.importorskip("torch")
    from keras_vit.checkpoints.formats import inspect_checkpoint

    path = tmp_path / "dinov2_vits14_pretrain.pth"
    if content == "legacy-pickle":
        path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    else:
        torch.save({"model": {"w": torch.zeros(2)}}, path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(keras_vit.CheckpointError, match="pickled PyTorch file") as error:
            inspect_checkpoint(str(path))
    assert [str(w.message) for w in caught] == [] and "\n" not in str(error.value)
