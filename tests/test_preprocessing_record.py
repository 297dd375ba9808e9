"""The preprocessing of record against each library's own pipeline, on non-square photos.

For each family, the record keras_vit reads from the file its library writes (timm's
config.json, a transformers image processor's preprocessor_config.json, open_clip's
preprocess_cfg) resizes two photos (400 x 300 and 150 x 220, one larger and one smaller than
the model) through keras_vit's own decode; the input tensor must equal timm's
`resolve_data_config(model=...)` + `create_transform(**cfg)`, the transformers image
processor's `pixel_values` and open_clip's `image_transform(...)` on the same PNG files.

Tolerance, derived: every library hands the model uint8 pixels. Pillow (timm, open_clip)
resizes one axis, rounds to uint8, then the other and rounds again; torchvision's tensor
resize (transformers) resizes both in float and rounds once; keras_vit resizes in float with
the same kernels and rounds once. Before the last rounding the values differ by at most the
first pass's rounding (0.5) times the second pass's total absolute weight (Keys cubic,
a = -0.5: at most 1.07; the triangle: 1), under 1, plus the kernels' float differences
(Pillow's 22-bit fixed-point weights: 255 * 2^-22 = 6e-5): the rounded pixels differ by at
most one level, 1/255 on [0, 1]. The photos stay inside [16, 239] with noise of sd 12 so that
no overshoot of the cubic reaches the clip at 0 or 255, which Pillow applies after each pass.
Normalised, one level is 1 / (255 std); float32 normalisation adds under 1e-5.
A wrong crop offset (one pixel), size or interpolation moves pixels by many levels: the
noise differs by about 12 levels from one pixel to the next. The official stretch is also
checked to differ from every cropping pipeline by more than the tolerance.
"""

import json
import os

import numpy as np
import pytest

from keras_vit.checkpoints.formats.base import normalization_from
from keras_vit.checkpoints.formats.preprocess_configs import (
    keras_hub_preprocessing,
    open_clip_preprocessing,
    processor_preprocessing,
    timm_preprocessing,
)
from keras_vit.normalization import normalize_pixels
from keras_vit.preprocessing import load_image
from keras_vit.preprocessing_record import OFFICIAL_PREPROCESSING

# (width, height): one larger than the models on both sides, one smaller on one.
PHOTO_SIZES = ((400, 300), (150, 220))
LEVEL = 1.0 / 255.0
FLOAT32_NORMALISATION = 1e-5


def _photo(width, height, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    smooth = 128 + 80 * np.stack([np.sin(6 * x + 1), np.cos(5 * y), np.sin(4 * (x + y))], -1)
    return np.clip(smooth + rng.normal(0, 12, (height, width, 3)), 16, 239).round().astype(np.uint8)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from PIL import Image

    folder = tmp_path_factory.mktemp("photos")
    paths = []
    for seed, (width, height) in enumerate(PHOTO_SIZES):
        path = str(folder / f"photo_{width}x{height}.png")
        Image.fromarray(_photo(width, height, seed)).save(path)
        paths.append(path)
    return paths


def _keras_vit_input(path, size, record, normalization):
    return normalize_pixels(load_image(path, size, preprocessing=record), normalization)


def _check(path, size, record, normalization, theirs):
    """keras_vit's input for `path` equals `theirs` (HWC) within one level, normalised."""
    ours = _keras_vit_input(path, size, record, normalization)
    assert ours.shape == theirs.shape
    tolerance = LEVEL / min(normalization[1]) + FLOAT32_NORMALISATION
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=tolerance)
    return tolerance


def _pil(path):
    from PIL import Image

    return Image.open(path).convert("RGB")


# timm's pretrained configurations, one per family: crop_pct 0.9 and 0.95, DINOv2's 1.0 at
# 518, SigLIP's "squash" (timm's stretch); DINOv3 at 256, EVA-02's 0.9, AIMv2 and PE at 1.0
# (SigLIP 2 NaFlex: test_a_timm_naflex_model_is_packed_as_timms_naflex_eval_transform).
TIMM_MODELS = ["vit_base_patch16_224.augreg2_in21k_ft_in1k", "deit_base_patch16_224.fb_in1k",
               "deit3_small_patch16_224.fb_in1k", "vit_small_patch14_dinov2.lvd142m",
               "vit_base_patch16_siglip_224.webli", "vit_so400m_patch14_siglip_378.webli_ft_in1k",
               "vit_base_patch16_clip_224.openai", "flexivit_small.1200ep_in1k",
               "vit_small_patch16_dinov3.lvd1689m", "eva02_tiny_patch14_224.mim_in22k",
               "aimv2_large_patch14_224.apple_pt", "vit_pe_core_tiny_patch16_384.fb"]


@pytest.mark.parametrize("name", TIMM_MODELS)
def test_timm_eval_transform(name, photos, tmp_path):
    from tests.oracle import import_timm

    timm = import_timm()
    from timm.data import create_transform, resolve_data_config
    from timm.models._hub import save_config_for_hf

    model = timm.create_model(name, pretrained=False, depth=1, num_classes=0)
    config_path = str(tmp_path / "config.json")
    save_config_for_hf(model, config_path)  # what a timm Hub folder holds
    with open(config_path) as f:
        pretrained = json.load(f)["pretrained_cfg"]
    record = timm_preprocessing(config_path, pretrained)
    normalization = normalization_from(config_path, pretrained["mean"], pretrained["std"])
    config = resolve_data_config(model=model)
    transform = create_transform(**config)
    size = config["input_size"][1:]
    for path in photos:
        theirs = transform(_pil(path)).permute(1, 2, 0).numpy()
        tolerance = _check(path, size, record, normalization, theirs)
        if record.resize == "crop":  # the check can fail: the official stretch is far off
            official = _keras_vit_input(path, size, OFFICIAL_PREPROCESSING, normalization)
            assert np.abs(official - theirs).max() > 10 * tolerance


def _processors():
    """{family: (a transformers image processor as each family's checkpoints save it)}."""
    import transformers as t

    imagenet = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
    return {
        "ViT": t.ViTImageProcessor(),  # google/vit-*: 224 x 224, bilinear
        "DeiT": t.DeiTImageProcessor(),  # 256 x 256 then the centre 224, bicubic
        "DINOv2": t.BitImageProcessor(size={"shortest_edge": 256}, crop_size=224,
                                      do_convert_rgb=True, resample=3, **imagenet),
        "CLIP": t.CLIPImageProcessor(),  # shortest edge 224, centre 224, bicubic
        "SigLIP": t.SiglipImageProcessor(),  # 224 x 224, bicubic
        "DINOv3": t.DINOv3ViTImageProcessor(),  # 224 x 224, bilinear, ImageNet mean/std
        # (AIMv2's folders: whatever processor they save is read by the same function; not
        # checked here against a processor of AIMv2's own)
    }


def _saved_processor(processor, folder):
    """(the preprocessor_config.json `processor` saves in `folder`, the record keras_vit reads
    from it, its normalisation)."""
    processor.save_pretrained(folder)
    config_path = str(folder / "preprocessor_config.json")
    with open(config_path) as f:
        config = json.load(f)
    normalization = normalization_from(config_path, config["image_mean"], config["image_std"],
                                       per_unit=255.0 * config["rescale_factor"])
    return config, processor_preprocessing(config_path, config), normalization


@pytest.mark.parametrize("family", ["ViT", "DeiT", "DINOv2", "CLIP", "SigLIP", "DINOv3"])
def test_transformers_image_processor(family, photos, tmp_path):
    from tests.oracle import import_timm

    import_timm()  # torchvision, which the processors resize with, imports on CPU torch
    processor = _processors()[family]
    config, record, normalization = _saved_processor(processor, tmp_path)
    crop = config.get("crop_size") if config.get("do_center_crop") else config["size"]
    size = (crop["height"], crop["width"])
    for path in photos:
        theirs = processor(_pil(path), return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)
        _check(path, size, record, normalization, theirs)


@pytest.mark.parametrize("resize_mode", ["shortest", "squash"])
def test_open_clip_image_transform(resize_mode, photos):
    from tests.oracle import import_open_clip

    open_clip = import_open_clip()
    from open_clip.transform import PreprocessCfg, image_transform_v2

    cfg = PreprocessCfg(size=224, resize_mode=resize_mode)  # CLIP's; SigLIP's "squash"
    transform = image_transform_v2(cfg, is_train=False)
    path = "open_clip_config.json"
    record = open_clip_preprocessing(path, {"resize_mode": resize_mode,
                                            "interpolation": cfg.interpolation})
    normalization = normalization_from(path, cfg.mean, cfg.std)
    assert open_clip is not None
    for photo in photos:
        theirs = transform(_pil(photo)).permute(1, 2, 0).numpy()
        _check(photo, (224, 224), record, normalization, theirs)


# keras-hub's ImageConverter settings: its default (the crop to the model's shape, bilinear,
# no antialiasing), bicubic with antialiasing, and the stretch.
KERAS_HUB_CONVERTERS = {"default": {}, "bicubic-antialiased": {"interpolation": "bicubic",
                                                               "antialias": True},
                        "stretch": {"crop_to_aspect_ratio": False}}


@pytest.mark.parametrize("settings", list(KERAS_HUB_CONVERTERS))
def test_a_keras_hub_preset_is_preprocessed_as_its_image_converter(settings, photos, tmp_path):
    """End to end: a ViT classifier preset keras-hub saves with its preprocessor ->
    from_pretrained -> preprocess_input(model=) equals the preset's own ImageConverter on a
    wide (400 x 300) and a tall (150 x 220) photo, at a 2:1 model size. keras-hub and
    keras_vit run the same TensorFlow crop and resize in float: they differ only by float32
    rounding in the normalisation (x * scale + offset against (x - mean) / std)."""
    keras_hub = pytest.importorskip("keras_hub")

    import keras_vit
    from keras_vit.preprocessing_record import model_preprocessing

    size = (32, 64)  # 2:1, neither photo's shape
    converter = keras_hub.layers.ViTImageConverter(
        image_size=size, scale=[1 / (255 * 0.229), 1 / (255 * 0.224), 1 / (255 * 0.225)],
        offset=[-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225], **KERAS_HUB_CONVERTERS[settings])
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(*size, 3), patch_size=16, num_layers=1, num_heads=2, hidden_dim=32,
        mlp_dim=64, layer_norm_epsilon=1e-6)
    preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=3,
                                        preprocessor=preprocessor).save_to_preset(str(tmp_path))
    model = keras_vit.from_pretrained(str(tmp_path))
    expected_resize = "stretch" if settings == "stretch" else "aspect_crop"
    assert model_preprocessing(model).resize == expected_resize
    for path in photos:
        image = np.asarray(_pil(path))
        ours = keras_vit.preprocess_input(image, model=model)
        theirs = np.asarray(converter(image.astype(np.float32)))
        assert ours.shape == theirs.shape == (*size, 3)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=FLOAT32_NORMALISATION)
        if settings != "stretch":  # the check can fail: the official stretch is far off
            stretched = keras_vit.preprocess_input(image, model=model, resize="stretch")
            assert np.abs(stretched - theirs).max() > 100 * FLOAT32_NORMALISATION


def _packed(path, budget, record, normalization):
    """keras_vit's NaFlex input for the photo at `path` under `budget` tokens: the runners'
    decode, then naflex_inputs.packed_image with the model's record."""
    import tensorflow as tf

    from keras_vit.preprocessing import decode_image
    from keras_vit.runtime.naflex_inputs import packed_image

    with open(path, "rb") as f:
        image = decode_image(tf.constant(f.read()), 3)
    packed = packed_image(image, 16, budget, lambda x: normalize_pixels(x, normalization),
                          record)
    return {key: np.asarray(value) for key, value in packed.items()}


NAFLEX_BUDGETS = (64, 256)


def test_a_timm_naflex_model_is_packed_as_timms_naflex_eval_transform(photos, tmp_path):
    """timm's NaFlex eval transform (`create_transform(..., naflex=True)`: ResizeToSequence,
    bicubic on the Pillow image, antialiased) against keras_vit's packing with the record read
    from the config.json timm saves for naflexvit_base_patch16_siglip; one uint8 level, as
    above."""
    from tests.oracle import import_timm

    timm = import_timm()
    from timm.data import create_transform, resolve_data_config
    from timm.models._hub import save_config_for_hf

    from keras_vit.runtime.naflex_inputs import pack

    model = timm.create_model("naflexvit_base_patch16_siglip", pretrained=False, depth=1)
    config_path = str(tmp_path / "config.json")
    save_config_for_hf(model, config_path)
    with open(config_path) as f:
        pretrained = json.load(f)["pretrained_cfg"]
    record = timm_preprocessing(config_path, pretrained)
    assert (record.interpolation, record.antialias) == ("bicubic", True)
    normalization = normalization_from(config_path, pretrained["mean"], pretrained["std"])
    tolerance = LEVEL / min(normalization[1]) + FLOAT32_NORMALISATION
    for budget in NAFLEX_BUDGETS:
        transform = create_transform(**resolve_data_config(model=model), naflex=True,
                                     patch_size=16, max_seq_len=budget)
        for path in photos:
            theirs = pack([transform(_pil(path)).permute(1, 2, 0).numpy()], 16, budget)
            ours = _packed(path, budget, record, normalization)
            np.testing.assert_array_equal(ours["grid"], theirs["grid"][0])
            np.testing.assert_allclose(ours["patches"], theirs["patches"][0], rtol=0,
                                       atol=tolerance)
            # the check can fail: the bilinear packing keras_vit had before is far off
            bilinear = _packed(path, budget, OFFICIAL_PREPROCESSING, normalization)
            assert np.abs(bilinear["patches"] - theirs["patches"][0]).max() > 5 * tolerance


def test_a_transformers_naflex_model_is_packed_as_its_image_processor(photos, tmp_path):
    """transformers' Siglip2ImageProcessor (its grid for `max_num_patches`, Pillow's bilinear,
    antialiased) as saved with google/siglip2-*-naflex, against keras_vit's packing with the
    record read from that preprocessor_config.json: the same grid, patches within one level."""
    from tests.oracle import import_timm

    import_timm()
    import transformers as t

    import keras_vit

    processor = t.Siglip2ImageProcessor()
    config, record, normalization = _saved_processor(processor, tmp_path)
    tolerance = LEVEL / min(normalization[1]) + FLOAT32_NORMALISATION
    for budget in NAFLEX_BUDGETS:
        for path in photos:
            theirs = processor(_pil(path), max_num_patches=budget, return_tensors="np")
            ours = _packed(path, budget, record, normalization)
            np.testing.assert_array_equal(ours["grid"], theirs["spatial_shapes"][0])
            np.testing.assert_allclose(ours["patches"], theirs["pixel_values"][0], rtol=0,
                                       atol=tolerance)
            if budget == NAFLEX_BUDGETS[0]:  # both photos shrink: antialiasing shows
                bilinear = _packed(path, budget, OFFICIAL_PREPROCESSING, normalization)
                assert np.abs(bilinear["patches"] - theirs["pixel_values"][0]).max() > \
                    5 * tolerance
    # A folder of the model beside its processor: from_pretrained's model carries the record
    # the runners pack with (keras_vit/runtime/runners.py).
    from keras_vit.preprocessing_record import model_preprocessing
    from tests.checkpoints.formats.test_naflex_transformers import _saved

    _saved(tmp_path)
    assert model_preprocessing(keras_vit.from_pretrained(str(tmp_path))) == record


def test_a_file_value_keras_vit_cannot_compute_is_refused_in_one_line():
    from keras_vit.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"^config.json: crop_mode 'border' is not one "
                                              r"keras_vit computes \(center, squash\)\.$"):
        timm_preprocessing("config.json", {"crop_mode": "border"})
    with pytest.raises(CheckpointError, match=r"^p.json: resample 0 is not one keras_vit "
                                              r"computes \(2 \(bilinear\), 3 \(bicubic\)\)\.$"):
        processor_preprocessing("p.json", {"resample": 0})
    with pytest.raises(CheckpointError, match=r"^p.json: crop_size 300 is not a crop of the 256"):
        processor_preprocessing("p.json", {"size": {"shortest_edge": 256}, "do_center_crop": True,
                                           "crop_size": {"height": 300, "width": 300}})
    with pytest.raises(CheckpointError, match=r"^c.json: preprocessing crop_pct must be a number "
                                              r"from 0.1 to 1, got '5.0'\.$"):
        timm_preprocessing("c.json", {"crop_pct": 5})
    with pytest.raises(CheckpointError, match=r"^o.json: resize_mode 'longest' is not one "):
        open_clip_preprocessing("o.json", {"resize_mode": "longest"})
    with pytest.raises(CheckpointError, match=r"^p.json: pad_to_aspect_ratio is not a resize "):
        keras_hub_preprocessing("p.json", {"pad_to_aspect_ratio": True,
                                           "crop_to_aspect_ratio": False})
    with pytest.raises(CheckpointError, match=r"^p.json: interpolation 'lanczos5' is not one "):
        keras_hub_preprocessing("p.json", {"interpolation": "lanczos5"})
    with pytest.raises(CheckpointError, match=r"^p.json: an antialiased stretch without rounding"):
        keras_hub_preprocessing("p.json", {"crop_to_aspect_ratio": False, "antialias": True})


def test_the_record_travels_with_a_saved_model_and_the_resize_override(photos, tmp_path):
    """preprocess_input(model=) resizes by the model's record, kept by a .keras round trip;
    resize= overrides it; the official models keep the stretch."""
    import keras

    import keras_vit
    from keras_vit.layer_names import EMBEDDING
    from keras_vit.preprocessing_record import Preprocessing, model_preprocessing

    model = keras_vit.ViT("Ti/16", image_size=32, classes=3)
    assert model_preprocessing(model) == OFFICIAL_PREPROCESSING
    official = keras_vit.preprocess_input(np.asarray(_pil(photos[0])), model=model)
    expected = keras_vit.preprocess_input(load_image(photos[0], (32, 32)))
    np.testing.assert_array_equal(official, expected)  # the official path, unchanged

    record = Preprocessing("crop", "bicubic", True, 0.875)
    model.get_layer(EMBEDDING).input_preprocessing = record.to_config()
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert model_preprocessing(loaded) == record
    image = np.asarray(_pil(photos[0]))
    cropped = keras_vit.preprocess_input(image, model=loaded)
    np.testing.assert_allclose(
        cropped, keras_vit.preprocess_input(load_image(photos[0], (32, 32), preprocessing=record)),
        atol=1e-6)
    stretched = keras_vit.preprocess_input(image, model=loaded, resize="stretch")
    assert np.abs(stretched - cropped).max() > 0.1  # the override is not the record
    batch = keras_vit.preprocess_input(np.stack([image, image]), model=loaded)
    np.testing.assert_allclose(batch[1], cropped, atol=1e-6)
    with pytest.raises(keras_vit.errors.ArgumentError, match="resize must be one of"):
        keras_vit.preprocess_input(image, model=loaded, resize="squash")


def test_a_transformers_folder_is_preprocessed_as_its_processor_through_from_pretrained(
        photos, tmp_path):
    """End to end: a folder transformers saves (model and CLIP's processor) -> from_pretrained
    -> preprocess_input(model=) equals the processor's pixel_values."""
    from tests.oracle import import_timm

    import_timm()
    import transformers as t

    import keras_vit

    config = t.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, image_size=224, patch_size=16)
    t.ViTModel(config, add_pooling_layer=False).save_pretrained(tmp_path)
    processor = t.CLIPImageProcessor()
    processor.save_pretrained(tmp_path)
    model = keras_vit.from_pretrained(str(tmp_path))
    for path in photos:
        ours = keras_vit.preprocess_input(np.asarray(_pil(path)), model=model)
        theirs = processor(_pil(path), return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)
        std = min(processor.image_std)
        np.testing.assert_allclose(ours, theirs, rtol=0,
                                   atol=LEVEL / std + FLOAT32_NORMALISATION)
    assert os.path.exists(tmp_path / "preprocessor_config.json")


@pytest.fixture(scope="module")
def cropping_model():
    """A tiny classifier carrying timm's DeiT resize (short side to size / 0.875, bicubic)."""
    import keras_vit
    from keras_vit.layer_names import EMBEDDING
    from keras_vit.preprocessing_record import Preprocessing

    model = keras_vit.ViT("Ti/16", image_size=32, classes=3)
    record = Preprocessing("crop", "bicubic", True, 0.875)
    model.get_layer(EMBEDDING).input_preprocessing = record.to_config()
    head = model.get_layer("head")  # zero-initialised: every input would give 1/3 each
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.05, head.kernel.shape))
    return model


def _probabilities(model, image, resize=None):
    import keras

    import keras_vit

    inputs = keras_vit.preprocess_input(image[None], model=model, resize=resize)
    return keras.ops.convert_to_numpy(keras.ops.softmax(model(inputs), axis=-1))[0]


def test_predict_images_resizes_by_the_record_unless_told(cropping_model, photos):
    import keras_vit

    image = np.asarray(_pil(photos[1]))
    for resize in (None, "stretch"):
        result = next(iter(keras_vit.predict_images(cropping_model, [photos[1]], resize=resize)))
        np.testing.assert_allclose(result.probabilities,
                                   _probabilities(cropping_model, image, resize), atol=1e-5)
    cropped, stretched = (_probabilities(cropping_model, image, r) for r in (None, "stretch"))
    assert np.abs(cropped - stretched).max() > 1e-4  # the two resizes give other inputs
    with pytest.raises(keras_vit.errors.ArgumentError, match="resize must be one of"):
        keras_vit.predict_images(cropping_model, [photos[1]], resize="squash")


@pytest.mark.slow  # an export (minutes under load); the default tests cover the same resize
# through load_image and predict_images, which serve_bytes' decode_images shares
def test_the_image_file_signature_resizes_by_the_record(cropping_model, photos, tmp_path):
    import tensorflow as tf

    import keras_vit

    folder = keras_vit.export_saved_model(cropping_model, str(tmp_path / "export"))
    serve = tf.saved_model.load(folder).signatures["serve_bytes"]
    with open(photos[0], "rb") as f:
        outputs = serve(image_bytes=tf.constant([f.read()]))
    np.testing.assert_allclose(outputs["probabilities"].numpy()[0],
                               _probabilities(cropping_model, np.asarray(_pil(photos[0]))),
                               atol=1e-5)


def test_the_catalogue_records_each_sources_preprocessing():
    """Every hf://timm entry carries its timm pretrained configuration's eval resize, every
    google/vit-* entry the saved ViTImageProcessor's bilinear stretch, the official files none."""
    from tests.oracle import import_timm

    timm = import_timm()
    from keras_vit.checkpoints.catalogue import catalogue

    for entry in catalogue():
        if entry.hub and entry.format == "timm":
            cfg = timm.models.get_pretrained_cfg(entry.hub.split("/", 1)[1]).to_dict()
            assert entry.preprocessing.resize == {"center": "crop", "squash": "stretch"}[
                cfg.get("crop_mode") or "center"], entry.hub
            assert (entry.preprocessing.crop_pct, entry.preprocessing.interpolation) == (
                cfg["crop_pct"], cfg["interpolation"]), entry.hub
        elif entry.hub:
            assert (entry.preprocessing.resize, entry.preprocessing.interpolation) == (
                "stretch", "bilinear"), entry.hub
        else:
            assert entry.preprocessing is None, entry.url
