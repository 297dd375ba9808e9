"""Catalogue look-up and the offline download error."""

import time

import pytest

import keras_vit
from keras_vit.checkpoints import catalogue, find_checkpoint
from keras_vit.variants import FAMILIES, get_variant


def test_catalogue_covers_the_promised_checkpoints():
    have = {(c.variant, c.tag) for c in catalogue()}
    for v in ("ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32", "ViT-H_14"):
        assert (v, "imagenet21k") in have
    for v in ("ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32"):
        assert (v, "imagenet21k+imagenet2012") in have
    for v in ("ViT-Ti_16", "ViT-S_16", "ViT-S_32", "ViT-B_16", "ViT-B_32", "ViT-L_16"):
        for tag in ("augreg-in21k", "augreg-in21k-ft-in1k-224", "augreg-in21k-ft-in1k-384"):
            assert (v, tag) in have
    for c in catalogue():
        if c.hub:  # a Hugging Face repository: no URL; the ImageNet-21k transformers ViTs are headless
            assert c.url is None and c.format in ("timm", "transformers") and c.tag == f"hf://{c.hub}"
            if c.variant in FAMILIES:  # timm's releases of the families: test_family_catalogue.py
                continue
            assert c.classes in (None, 1000, 21843) and c.resolution in (224, 384)
            continue
        if c.format == "bit":  # big_transfer's files: no position embedding, no resolution
            assert c.url == f"https://storage.googleapis.com/bit_models/{_bit_file(c)}", c
            assert c.resolution is None and c.classes == (21843 if c.tag == "bit-m" else 1000)
            continue
        assert c.url.startswith("https://storage.googleapis.com/vit_models/") and c.url.endswith(".npz")
        assert c.classes in (1000, 21843) and c.resolution in (224, 384)


def _bit_file(checkpoint):
    """big_transfer's file name for a BiT entry: BiT-M-R50x1.npz, BiT-S-..., ...-ILSVRC2012."""
    size = checkpoint.variant.removeprefix("BiT-")
    return {"bit-m": f"BiT-M-{size}.npz", "bit-s": f"BiT-S-{size}.npz",
            "bit-m-ilsvrc2012": f"BiT-M-{size}-ILSVRC2012.npz"}[checkpoint.tag]


def test_offline_download_fails_fast_and_says_what_to_do(tmp_path, monkeypatch):
    """The constructor a user calls, with an empty cache and no mirror; no network is
    reachable here. In this process: the cache folder and the mirror are read at each call
    (not at import), so a fresh process would only add TensorFlow's start-up."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.delenv("KERAS_VIT_WEIGHTS_URL", raising=False)
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        keras_vit.ViT_B16(weights="imagenet21k")
    out = str(info.value)
    checkpoint = find_checkpoint(get_variant("B/16"), "imagenet21k")
    assert "\n" not in out
    assert checkpoint.url in out
    assert str(tmp_path / "keras_vit" / "vit_models" / "imagenet21k" / "ViT-B_16.npz") in out
    assert "copy it to the cache path" in out and "weights='/path/to/file.npz'" in out
    # Not timed here: the failure itself is timed by the next test.


def test_offline_error_appears_within_ten_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    checkpoint = find_checkpoint(get_variant("B/16"), "imagenet21k")
    start = time.monotonic()
    with pytest.raises(keras_vit.WeightsUnavailableError, match="Could not download"):
        checkpoint.path()
    assert time.monotonic() - start < 10
    assert not list((tmp_path / "keras_vit").rglob("*.npz*"))  # nothing half-written


def test_a_cached_file_is_used_without_network(tmp_path, monkeypatch):
    import dataclasses

    from tests.oracle import random_vit_npz

    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    variant = get_variant("Ti/16")
    checkpoint = find_checkpoint(variant, "augreg-in21k-ft-in1k-224")
    path = tmp_path / "keras_vit" / checkpoint.cache_key
    path.parent.mkdir(parents=True)
    tiny = dataclasses.replace(variant, depth=12)
    random_vit_npz(path, tiny, (14, 14), classes=1000)
    model = keras_vit.ViT_Ti16(weights="augreg-in21k-ft-in1k-224")
    assert model.output_shape == (None, 1000)
    # The first use recorded the file's checksum; a changed file is now refused.
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(keras_vit.WeightsUnavailableError):
        keras_vit.ViT_Ti16(weights="augreg-in21k-ft-in1k-224")


def test_pin_checksum_validates_its_argument(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="64 hexadecimal"):
        keras_vit.pin_checksum("x.npz", "abc")
    keras_vit.pin_checksum("x.npz", "a" * 64)
    assert '"x.npz": "' + "a" * 64 in (tmp_path / "keras_vit" / "checksums.json").read_text()
