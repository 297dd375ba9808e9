"""save_pretrained: a folder timm loads as itself (timm.create_model('local-dir:' + folder,
pretrained=True), timm 1.0's loader of a local Hub folder), with the same outputs as the
keras_vit model; keras_vit.from_pretrained reads it back bit for bit; push_to_hub uploads it
through a stand-in HfApi, never the network."""

import dataclasses
import json
import os

import numpy as np
import pytest

import keras_vit
from keras_vit.errors import ArgumentError, PathExistsError, PathNotFoundError, WeightsUnavailableError
from keras_vit.normalization import input_normalization
from keras_vit.variants import FAMILIES
from tests.oracle import import_timm


def _timm_outputs(folder, pixels):
    """timm's outputs of the folder's model on normalised NHWC `pixels`."""
    timm = import_timm()
    import torch

    model = timm.create_model("local-dir:" + str(folder), pretrained=True).eval()
    with torch.no_grad():
        return model, model(torch.from_numpy(pixels.transpose(0, 3, 1, 2).copy())).numpy()


def _normalised(model, n, seed=0):
    """`n` random images in [0, 1], normalised as `model`'s weights expect."""
    size = model.input_shape[1]
    mean, std = (np.asarray(v, np.float32) for v in input_normalization(model))
    images = np.random.default_rng(seed).uniform(0, 1, (n, size, size, 3)).astype(np.float32)
    return (images - mean) / std


def _randomised(model, seed=1):
    """`model` with every weight drawn at random (LayerScale and norms too), so that a weight
    written to the wrong place changes the outputs."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(np.float32))
    return model


def _assert_close(ours, reference):
    """Within 1e-4 of the reference's largest magnitude: float32 rounding over a few blocks."""
    assert ours.shape == reference.shape
    assert np.max(np.abs(ours - reference)) <= 1e-4 * np.max(np.abs(reference))


# Each family's image tower, two blocks wide 96 at 32-56 pixels: its structure (DINOv2's
# LayerScale and erf GELU, SigLIP's MAP head and tanh GELU, CLIP's pre-norm, QuickGELU and
# bias-free patches) at a size timm has no name for, so its config.json carries model_args.
_SMALL = dict(depth=2, width=96, heads=3, mlp_dim=384)
FAMILY_CASES = {"DINOv2-S/14": 28, "SigLIP-B/16": 32, "CLIP-B/16": 32,
                # timm's Eva class (RoPE; LayerScale as gamma_1; q_bias and v_bias; SwiGLU
                # packed, or split as fc1_g and fc1_x with a norm inside; no final norm) and
                # its VisionTransformer's split SwiGLU with RMSNorm (AIMv2)
                "DINOv3-S+/16-qkvb": 32, "EVA02-Ti/14": 28, "EVA02-B/14": 28,
                "PE-Core-Ti/16": 32, "PE-Lang-L/14": 28, "AIMv2-L/14": 28}


@pytest.mark.parametrize("row,size", FAMILY_CASES.items(), ids=list(FAMILY_CASES))
def test_a_family_backbone_loads_in_timm_and_back_in_keras_vit(row, size, tmp_path):
    variant = dataclasses.replace(FAMILIES[row], **_SMALL)
    model = _randomised(keras_vit.ViT(variant, image_size=size, include_top=False))
    folder = keras_vit.save_pretrained(model, tmp_path / "hub")
    pixels = _normalised(model, 2)
    _, reference = _timm_outputs(folder, pixels)
    _assert_close(np.asarray(model(pixels)), reference)
    with pytest.warns(UserWarning) if variant.normalization else _no_warning():
        back = keras_vit.from_pretrained(folder, include_top=False)
    assert back.input_shape == model.input_shape
    for ours, read in zip(model.weights, back.weights):
        np.testing.assert_array_equal(ours.numpy(), read.numpy())
    np.testing.assert_array_equal(np.asarray(back(pixels)), np.asarray(model(pixels)))


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_trained_digits_run_loads_in_timm_with_its_labels(digits_run, tmp_path):
    """The shared `keras-vit train --dataset digits` run, saved from its folder: timm builds the
    demo architecture from config.json's model_args, gives the Keras model's logits and the
    run's class names; the card quotes the run's accuracy; from_pretrained reads it back."""
    run, _ = digits_run
    folder = keras_vit.save_pretrained(run, tmp_path / "digits-vit")
    assert sorted(os.listdir(folder)) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((tmp_path / "digits-vit" / "config.json").read_text())
    labels = open(os.path.join(run, "labels.txt")).read().split()
    assert config["label_names"] == labels and config["num_classes"] == len(labels)
    model = keras_vit.models.factory.load(os.path.join(run, "model.keras"))
    pixels = _normalised(model, 8)
    timm_model, reference = _timm_outputs(folder, pixels)
    assert timm_model.pretrained_cfg["label_names"] == labels
    back = keras_vit.from_pretrained(folder)  # logits: timm's head has no softmax
    _assert_close(np.asarray(back(pixels)), reference)
    ours = np.asarray(model(pixels))
    if keras_vit.models.vit.has_softmax_head(model):
        reference = np.exp(reference - reference.max(-1, keepdims=True))
        reference /= reference.sum(-1, keepdims=True)
    _assert_close(ours, reference)
    report = json.loads(open(os.path.join(run, "report.json")).read())
    card = (tmp_path / "digits-vit" / "README.md").read_text()
    assert f"accuracy {report['accuracy']:.4f}" in card and "Trained from random weights" in card


def test_the_export_command_writes_the_folder(digits_run, cli, tmp_path):
    run, _ = digits_run
    out = tmp_path / "hub"
    result = cli(["export", "--model", run, "--format", "hub", "--output", str(out)])
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "vit_tiny_patch16_224"
    assert config["label_names"] == open(os.path.join(run, "labels.txt")).read().split()
    again = cli(["export", "--model", run, "--format", "hub", "--output", str(out)])
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "exists" in again.stderr


def test_the_card_names_the_licence_of_the_weights_a_run_started_from(tmp_path):
    from keras_vit.export.model_card import weights_licence

    entry = next(c for c in keras_vit.catalogue() if c.license and c.hub)
    weights = f"hf://{entry.hub}"
    assert weights_licence(weights) == entry.license
    assert weights_licence(None) is None
    model = keras_vit.ViT("demo", image_size=16, classes=3)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"config": {"weights": weights}}))
    keras_vit.save_pretrained(model, tmp_path / "hub", run=run)
    card = (tmp_path / "hub" / "README.md").read_text()
    config = json.loads((tmp_path / "hub" / "config.json").read_text())
    assert f"license: {entry.license}" in card and config["pretrained_cfg"]["license"] == entry.license


def test_what_the_folder_cannot_hold_is_refused_in_one_line(tmp_path):
    model = keras_vit.ViT("demo", image_size=16, classes=3)
    (tmp_path / "taken").mkdir()
    with pytest.raises(PathExistsError, match="exists"):
        keras_vit.save_pretrained(model, tmp_path / "taken")
    with pytest.raises(ArgumentError, match="2 label names for a head of 3 classes"):
        keras_vit.save_pretrained(model, tmp_path / "a", labels=["x", "y"])
    with pytest.raises(PathNotFoundError, match="no keras-vit train run"):
        keras_vit.save_pretrained(model, tmp_path / "b", run=tmp_path / "taken")
    hybrid = keras_vit.ViT(dataclasses.replace(keras_vit.get_variant("R+Ti/16"), depth=1),
                           image_size=32, classes=3)
    with pytest.raises(ArgumentError, match="hybrid"):
        keras_vit.save_pretrained(hybrid, tmp_path / "c")
    assert sorted(os.listdir(tmp_path)) == ["taken"]  # nothing half-written


def test_a_tanh_gelu_model_of_an_eva_row_is_refused_in_one_line(tmp_path):
    """timm's Eva computes the erf GELU whatever its config says: a DINOv3 model built with the
    tanh form would load in timm and compute another function."""
    variant = dataclasses.replace(FAMILIES["DINOv3-S/16"], **_SMALL)
    model = keras_vit.ViT(variant, image_size=32, include_top=False, approximate_gelu=True)
    with pytest.raises(ArgumentError, match="computes the erf GELU, which its config cannot "
                                            "change; this model computes the tanh gelu"):
        keras_vit.save_pretrained(model, tmp_path / "hub")
    assert not os.path.exists(tmp_path / "hub")


def test_a_switch_timm_config_cannot_set_is_refused_not_dropped(tmp_path):
    """A SigLIP MAP head of its own head count (a big_vision MAPHead built with num_heads):
    timm's SigLIP pools with the encoder's heads, so the same weights would load in timm and
    compute another function. Refused in one line that names the field, nothing written."""
    variant = dataclasses.replace(FAMILIES["SigLIP-B/16"], **_SMALL, map_heads=1)
    model = keras_vit.ViT(variant, image_size=32, include_top=False)
    with pytest.raises(ArgumentError, match="timm registers no architecture .*: its map_heads "
                                            "differ from every SigLIP row's"):
        keras_vit.save_pretrained(model, tmp_path / "hub")
    assert not os.path.exists(tmp_path / "hub")


class _StandInHub:
    """huggingface_hub's HfApi as push_to_hub calls it, recording each call."""

    calls = []

    def __init__(self, token=None):
        self.token = token

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs, self.token))

    def upload_folder(self, repo_id, folder_path, **kwargs):
        self.calls.append(("upload_folder", repo_id, sorted(os.listdir(folder_path)), self.token))
        return type("Commit", (), {"commit_url": f"https://stand-in/{repo_id}/commit/1"})()


def test_push_to_hub_uploads_the_folder_with_the_token(tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(huggingface_hub, "HfApi", _StandInHub)
    monkeypatch.setattr(_StandInHub, "calls", [])
    folder = keras_vit.save_pretrained(keras_vit.ViT("demo", image_size=16, classes=3),
                                       tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(WeightsUnavailableError, match="no Hugging Face token"):
        keras_vit.push_to_hub(folder, "owner/name")
    assert _StandInHub.calls == []
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_stand_in")
    url = keras_vit.push_to_hub(folder, "owner/name")
    assert url == "https://stand-in/owner/name/commit/1"
    assert [call[0] for call in _StandInHub.calls] == ["create_repo", "upload_folder"]
    assert _StandInHub.calls[1][1:] == ("owner/name", ["README.md", "config.json",
                                                       "model.safetensors"], "hf_stand_in")
    with pytest.raises(ArgumentError, match="owner/name"):
        keras_vit.push_to_hub(folder, "no-owner")
    with pytest.raises(PathNotFoundError, match="no save_pretrained folder"):
        keras_vit.push_to_hub(tmp_path, "owner/name")


def _transformers_outputs(folder, pixels, output):
    """transformers' model class the folder names, run on normalised NHWC `pixels`: `output`."""
    import_timm()  # torch on CPU, as the timm oracle imports it
    import torch
    import transformers

    # The class the folder names (CLIP's projection is CLIPVisionModelWithProjection, which
    # AutoModel, reading the model type alone, would not build).
    with open(os.path.join(folder, "config.json")) as f:
        architecture = json.load(f)["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(str(folder)).eval()
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(pixels.transpose(0, 3, 1, 2).copy()))
    return model, getattr(out, output).numpy()


# (family row, image size, include_top, transformers' output the Keras model's output is).
TRANSFORMERS_CASES = {
    "DINOv2-S/14": (28, False, "pooler_output"),  # the class token after the final norm
    "DINOv2-S/14-reg4": (28, False, "pooler_output"),
    "SigLIP-B/16": (32, False, "pooler_output"),  # the MAP head's output
    "CLIP-B/16": (32, True, "image_embeds"),  # the projected class token
}


@pytest.mark.parametrize("row", TRANSFORMERS_CASES, ids=list(TRANSFORMERS_CASES))
def test_a_family_tower_loads_in_transformers_and_back_in_keras_vit(row, tmp_path):
    size, top, output = TRANSFORMERS_CASES[row]
    variant = dataclasses.replace(FAMILIES[row], **_SMALL)
    model = keras_vit.ViT(variant, image_size=size, include_top=top, **({"classes": 24} if top else {}))
    _randomised(model)
    if top:  # CLIP's projection has no bias
        model.get_layer("head").bias.assign(np.zeros(24, np.float32))
    folder = keras_vit.save_pretrained(model, tmp_path / "hf", layout="transformers")
    pixels = _normalised(model, 2)
    loaded, reference = _transformers_outputs(folder, pixels, output)
    _assert_close(np.asarray(model(pixels)), reference)
    with pytest.warns(UserWarning) if variant.normalization else _no_warning():
        back = keras_vit.from_pretrained(folder, include_top=top)
    np.testing.assert_array_equal(np.asarray(back(pixels)), np.asarray(model(pixels)))


def test_a_classifier_loads_in_transformers_with_its_labels(tmp_path):
    model = _randomised(keras_vit.ViT("demo", image_size=16, classes=3))
    folder = keras_vit.save_pretrained(model, tmp_path / "hf", labels=["a", "b", "c"],
                                       layout="transformers")
    import_timm()
    import torch
    import transformers

    loaded = transformers.AutoModelForImageClassification.from_pretrained(str(folder)).eval()
    assert loaded.config.id2label == {0: "a", 1: "b", 2: "c"}
    pixels = _normalised(model, 2)
    with torch.no_grad():
        logits = loaded(pixel_values=torch.from_numpy(pixels.transpose(0, 3, 1, 2).copy())).logits
    _assert_close(np.asarray(model(pixels)), logits.numpy())


def test_transformers_has_no_class_for_every_model(tmp_path):
    gap = keras_vit.ViT(dataclasses.replace(keras_vit.get_variant("B/16-gap"), depth=1,
                                            width=32, heads=2, mlp_dim=64), image_size=32)
    with pytest.raises(ArgumentError, match="transformers has no class"):
        keras_vit.save_pretrained(gap, tmp_path / "hf", layout="transformers")
    with pytest.raises(ArgumentError, match="layout must be"):
        keras_vit.save_pretrained(gap, tmp_path / "x", layout="onnx")
    assert os.listdir(tmp_path) == []


def test_the_export_command_refuses_what_a_folder_cannot_hold(cli, tmp_path):
    for flags, message in ((["--format", "hub", "--quantize", "int8"], "--quantize applies"),
                           (["--format", "transformers", "--precision", "bfloat16"],
                            "writes float32 weights"),
                           (["--format", "hub", "--output", str(tmp_path / "x.keras")],
                            "writes a folder")):
        args = ["export", "--model", "demo", "--image-size", "16", "--output",
                str(tmp_path / "out"), *flags]
        result = cli(args)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert message in result.stderr
    gap = cli(["export", "--model", "B/16-gap", "--image-size", "32", "--format", "transformers",
               "--output", str(tmp_path / "gap")])
    assert gap.returncode == 2 and "transformers has no class" in gap.stderr
    assert sorted(os.listdir(tmp_path)) == []
