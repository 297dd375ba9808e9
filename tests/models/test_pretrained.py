"""keras_vit.from_pretrained builds the architecture each source records, without being told:
the variant it builds is compared field by field with the one the test writes down from the
library's own config, and its outputs with the writing library's forward (tolerance: see
tests/checkpoints/formats/test_transformers_families.py, relative 1e-4 in float32)."""

import dataclasses
import os

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats.base import shape_stand_ins
from keras_vit.checkpoints.formats.npz_metadata import VARIANT_ATTRIBUTE
from keras_vit.checkpoints.formats.timm import timm_to_official
from keras_vit.models import pretrained
from keras_vit.models.pretrained import fitting_variants
from tests.checkpoints.formats.test_formats import _images, _randomise, _torch
from tests.checkpoints.formats.test_transformers_families import _assert_close, _run, _saved, _variant
from tests.oracle import import_timm, random_vit_npz, run_timm


def _same_architecture(model, expected):
    built = getattr(model, VARIANT_ATTRIBUTE)
    assert dataclasses.replace(built, name=expected.name) == expected, built


def test_a_transformers_folder_builds_its_family(tmp_path):
    theirs, torch, directory = _saved(tmp_path, "Dinov2WithRegistersModel",
                                      "Dinov2WithRegistersConfig")
    ours = keras_vit.from_pretrained(directory, include_top=False)
    _same_architecture(ours, _variant("DINOv2-S/14-reg4", mlp_dim=128))
    images = _images(2, (32, 32))
    _assert_close(np.asarray(ours(images)), _run(theirs, torch, images, "pooler_output"))


@pytest.mark.parametrize("model_class", ["DeiTForImageClassification",
                                         "DeiTForImageClassificationWithTeacher"])
def test_a_deit_classifier_folder_builds_its_family_with_its_heads(model_class, tmp_path):
    """The teacher model's two heads averaged, as transformers averages them at inference;
    the plain classifier's one head on the class token."""
    theirs, torch, directory = _saved(tmp_path, model_class, "DeiTConfig", num_labels=5)
    ours = keras_vit.from_pretrained(directory)
    _same_architecture(ours, _variant("DeiT-S/16-distilled", mlp_dim=64))
    assert ours.output_shape == (None, 5)
    images = _images(2, (32, 32))
    _assert_close(np.asarray(ours(images)), _run(theirs, torch, images, "logits"))


def test_clip_features_are_projected_when_the_file_has_the_projection(tmp_path):
    theirs, torch, directory = _saved(tmp_path, "CLIPVisionModelWithProjection",
                                      "CLIPVisionConfig", projection_dim=16)
    ours = keras_vit.from_pretrained(directory, include_top=False)
    _same_architecture(ours, _variant("CLIP-B/16", mlp_dim=64))
    images = _images(2, (32, 32))
    assert ours.output_shape == (None, 16)
    _assert_close(np.asarray(ours(images)), _run(theirs, torch, images, "image_embeds"))


def test_a_timm_hub_folder_builds_its_architecture(tmp_path):
    """timm's own save_for_hf writes the folder: config.json names the architecture and the
    model_args it was created with (which timm applies when it loads the folder)."""
    timm = import_timm()
    torch = _torch()
    from timm.models import save_for_hf

    args = dict(depth=2, img_size=28)
    theirs = timm.create_model("vit_small_patch14_reg4_dinov2", pretrained=False, **args).eval()
    _randomise(theirs, torch)
    directory = tmp_path / "timm"
    save_for_hf(theirs, str(directory), model_args=args, safe_serialization=True)
    ours = keras_vit.from_pretrained(str(directory), include_top=False)
    expected = dataclasses.replace(keras_vit.get_variant("DINOv2-S/14-reg4"), depth=2,
                                   image_size=28)
    _same_architecture(ours, expected)
    images = _images(2, (28, 28))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_a_keras_vit_npz_records_its_architecture(tmp_path):
    variant = _variant("SigLIP-B/16", mlp_dim=64)
    model = keras_vit.ViT(variant, include_top=False)
    path = keras_vit.save_npz(model, str(tmp_path / "siglip.npz"))
    again = keras_vit.from_pretrained(path, include_top=False)
    _same_architecture(again, variant)
    images = _images(2, (32, 32))
    np.testing.assert_array_equal(np.asarray(again(images)), np.asarray(model(images)))


def test_a_bare_state_dict_is_refused_in_one_line(tmp_path):
    timm = import_timm()
    from safetensors.torch import save_file

    theirs = timm.create_model("vit_small_patch14_reg4_dinov2", pretrained=False, depth=2,
                               img_size=28)
    path = str(tmp_path / "bare.safetensors")
    save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, path)
    with pytest.raises(CheckpointError, match="does not record its architecture") as error:
        keras_vit.from_pretrained(path)
    assert "\n" not in str(error.value)


def test_an_official_npz_is_refused_naming_the_variants_that_fit(tmp_path):
    path = str(tmp_path / "ti16.npz")
    random_vit_npz(path, keras_vit.get_variant("Ti/16"), (2, 2), classes=0)
    with pytest.raises(CheckpointError) as error:
        keras_vit.from_pretrained(path)
    message = str(error.value)
    assert "\n" not in message
    # The official Ti/16 and DeiT-Ti/16 have the same shapes (3 heads each); DeiT-Ti/16
    # distilled has a distillation token, S/16 another width.
    assert '"ViT-Ti_16"' in message and '"DeiT-Ti/16"' in message
    assert "distilled" not in message and "ViT-S_16" not in message


@pytest.mark.slow  # the default test_an_official_npz_is_refused_naming_the_variants_that_fit
def test_the_shapes_of_each_full_size_family_fit_that_row_alone():
    """timm's full-size models on the meta device (shapes, no memory): each family's shapes
    name its row, and only rows with the same shapes. SigLIP 2 NaFlex's B/16 has SigLIP-B/16's
    arrays exactly (its patch Linear is the conv's kernel flattened, its position table is
    resized at load like any other), so a bare file of them fits both rows."""
    timm = import_timm()
    import torch

    for architecture, *rows in (("vit_small_patch14_reg4_dinov2", "DINOv2-S/14-reg4"),
                                ("vit_base_patch16_siglip_224", "SigLIP-B/16",
                                 "SigLIP2-B/16-naflex"),
                                ("deit_small_distilled_patch16_224", "DeiT-S/16-distilled"),
                                ("vit_pe_spatial_base_patch16_512", "PE-Spatial-B/16")):
        with torch.device("meta"):
            model = timm.create_model(architecture, pretrained=False)
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        official = timm_to_official(shape_stand_ins(shapes))
        assert [v.name for v in fitting_variants({k: a.shape for k, a in official.items()})] \
            == rows, architecture


def test_a_file_without_a_final_norm_fits_its_row_not_clips():
    """PE-spatial-B/16's arrays are CLIP-B/16's (a pre-norm, no patch bias, a class token, a
    position table) but for the final norm, which PE's towers lack: a bare file of them fits
    PE-Spatial-B/16 alone, where CLIP-B/16 would load it and miss its final norm. Two blocks
    on the meta device (shapes, no memory); the rows at that depth."""
    timm = import_timm()
    import torch

    with torch.device("meta"):
        model = timm.create_model("vit_pe_spatial_base_patch16_512", pretrained=False, depth=2,
                                  img_size=224)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    official = timm_to_official(shape_stand_ins(shapes))
    fitting = fitting_variants({k: a.shape for k, a in official.items()}, depth=2)
    assert [v.name for v in fitting] == ["PE-Spatial-B/16"]


def test_hf_addresses_read_the_snapshot_and_fail_fast_offline(tmp_path, monkeypatch):
    theirs, torch, directory = _saved(tmp_path, "SiglipVisionModel", "SiglipVisionConfig")
    fetched = []
    monkeypatch.setattr(pretrained, "hub_snapshot",
                        lambda repo, revision, shown: fetched.append((repo, revision)) or directory)
    ours = keras_vit.from_pretrained("hf://someone/siglip-small@v1", include_top=False)
    assert fetched == [("someone/siglip-small", "v1")]
    _same_architecture(ours, _variant("SigLIP-B/16", mlp_dim=64))
    images = _images(2, (32, 32))
    _assert_close(np.asarray(ours(images)), _run(theirs, torch, images, "pooler_output"))

    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'.\nCheck your connection.")

    monkeypatch.undo()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(keras_vit.WeightsUnavailableError, match="Offline") as error:
        keras_vit.from_pretrained("hf://someone/not-cached")
    assert "\n" not in str(error.value)


def test_catalogue_tags_and_hub_entries_name_their_variant(monkeypatch):
    # Resolution only (what would be downloaded, not the download).
    hub = next(c for c in keras_vit.catalogue() if c.hub)
    assert pretrained._resolve(f"hf://{hub.hub}")[0].name == hub.variant
    # Every tag today names weights of several sizes: refused, naming them.
    with pytest.raises(keras_vit.ArgumentError, match="names weights of .* architectures"):
        pretrained._resolve("imagenet21k")
    # A tag of one weight set names its variant.
    entry = next(c for c in keras_vit.catalogue() if c.tag == "augreg-in21k" and not c.hub)
    monkeypatch.setattr(pretrained, "catalogue", lambda: (entry,))
    variant, weights, _ = pretrained._resolve("augreg-in21k")
    assert (variant.name, weights) == (entry.variant, "augreg-in21k")
    with pytest.raises(keras_vit.ArgumentError, match="takes the variant from the source"):
        keras_vit.from_pretrained("augreg-in21k", variant="B/16")


def test_a_table_row_reads_back_by_name_and_a_broken_record_is_refused(tmp_path):
    import json

    from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY

    path = keras_vit.save_npz(keras_vit.ViT("demo", include_top=False), str(tmp_path / "d.npz"))
    # A row of the table reads back as that row, name and all.
    assert keras_vit.from_pretrained(path, include_top=False).name == "ViT-demo_4"
    with np.load(path) as saved:
        arrays = dict(saved)
    record = json.loads(arrays[METADATA_KEY].tobytes())
    record["variant"]["heads"] = "four"
    arrays[METADATA_KEY] = np.frombuffer(json.dumps(record).encode(), np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="variant heads is four: not a count") as error:
        keras_vit.from_pretrained(path)
    assert "\n" not in str(error.value)


# slow: importing keras-hub costs ~10 s; by default, tests/checkpoints/formats/test_formats.py loads
# presets and the tests above cover from_pretrained's one path through CheckpointInfo.variant.
@pytest.mark.slow
def test_a_keras_hub_preset_builds_its_architecture(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    import keras

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
        mlp_dim=64, layer_norm_epsilon=1e-6)
    rng = np.random.default_rng(1)
    for w in backbone.weights:
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.2
                 + (1.0 if "gamma" in w.path else 0))
    directory = str(tmp_path / "preset")
    backbone.save_to_preset(directory)
    ours = keras_vit.from_pretrained(directory, include_top=False)
    expected = dataclasses.replace(keras_vit.get_variant("Ti/16"), width=32, depth=2, heads=2,
                                   mlp_dim=64, patch_size=8)
    _same_architecture(ours, expected)
    images = _images(2, (32, 32))
    _assert_close(np.asarray(ours(images)), np.asarray(backbone(images))[:, 0])


def _timm_folder(directory):
    """A timm Hub folder written by keras_vit: config.json names vit_tiny_patch16_224 with one
    block at 32 px (timm's model_args), model.safetensors its weights."""
    import json

    variant = dataclasses.replace(keras_vit.get_variant("Ti/16"), depth=1, image_size=32)
    model = keras_vit.ViT(variant, image_size=32, classes=3)
    directory.mkdir()
    keras_vit.save_safetensors(model, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(
        {"architecture": "vit_tiny_patch16_224", "model_args": {"depth": 1, "img_size": 32}}))
    return model


def _count_safetensors_files(monkeypatch):
    """[path opened, ...] and [path closed, ...] of every `SafetensorsFile`, however imported."""
    from keras_vit.checkpoints.formats.safetensors import SafetensorsFile

    opened, closed = [], []
    init, close = SafetensorsFile.__init__, SafetensorsFile.close

    def counted_init(self, path):
        init(self, path)
        opened.append(path)

    def counted_close(self):
        closed.append(self.path)
        close(self)

    monkeypatch.setattr(SafetensorsFile, "__init__", counted_init)
    monkeypatch.setattr(SafetensorsFile, "close", counted_close)
    return opened, closed


def test_a_folder_is_opened_once_and_closed_on_every_path(tmp_path, monkeypatch):
    """The variant is read from the reader the weights are loaded from; a refused argument
    after the opening closes the file too."""
    saved = _timm_folder(tmp_path / "timm")
    opened, closed = _count_safetensors_files(monkeypatch)
    ours = keras_vit.from_pretrained(str(tmp_path / "timm"))
    assert [os.path.basename(p) for p in opened] == ["model.safetensors"]
    assert set(closed) == set(opened)
    for ours_weight, saved_weight in zip(ours.weights, saved.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(ours_weight), np.asarray(saved_weight))
    opened.clear(), closed.clear()
    with pytest.raises(keras_vit.ArgumentError, match="dropout"):
        keras_vit.from_pretrained(str(tmp_path / "timm"), dropout=2.0)
    assert len(opened) == 1 and set(closed) == set(opened)


def test_a_keras_hub_preset_is_built_by_keras_hub_once(tmp_path, monkeypatch):
    """keras-hub builds its model to give its weights: from_pretrained has it do so once, for
    the variant and the weights alike."""
    keras_hub = pytest.importorskip("keras_hub")
    from tests.checkpoints.formats.test_keras_hub_families import TOWER

    directory = str(tmp_path / "siglip")
    keras_hub.models.SigLIPVisionEncoder(**TOWER).save_to_preset(directory)
    builds = []
    from_preset = keras_hub.models.Backbone.from_preset.__func__

    def counted(cls, *args, **kwargs):
        builds.append(args[0] if args else kwargs)
        return from_preset(cls, *args, **kwargs)

    monkeypatch.setattr(keras_hub.models.Backbone, "from_preset", classmethod(counted))
    ours = keras_vit.from_pretrained(directory, include_top=False)
    assert builds == [directory]
    assert getattr(ours, VARIANT_ATTRIBUTE).family == "SigLIP"
