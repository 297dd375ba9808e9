"""weights="imagenet" as keras.applications users write it, and list_models()."""

import json
import os

import pytest

import keras_vit
from keras_vit.checkpoints import find_checkpoint, resolve_weights
from tests.conftest import ROOT


def _entries():
    with open(os.path.join(ROOT, "keras_vit", "checkpoints", "catalogue.json")) as f:
        return json.load(f)["checkpoints"]


@pytest.mark.parametrize("variant, tag", [
    ("B/16", "augreg-in21k-ft-in1k-384"),  # AugReg's fine-tune where there is one
    ("L/32", "imagenet21k+imagenet2012"),  # else the paper's own
    ("R50+B/16", "imagenet21k+imagenet2012"),
    ("Ti/16", "augreg-in21k-ft-in1k-384"),
])
def test_imagenet_is_the_variants_imagenet_1k_classifier(variant, tag):
    entry = resolve_weights(keras_vit.get_variant(variant), "imagenet")
    assert entry.tag == tag and entry.classes == 1000


def test_a_variant_without_an_imagenet_1k_classifier_is_refused_naming_what_it_has():
    with pytest.raises(keras_vit.ArgumentError, match="no ImageNet-1k classifier.*imagenet21k"):
        find_checkpoint(keras_vit.get_variant("H/14"), "imagenet")


def test_list_models_shows_every_variant_with_its_catalogued_weights():
    listed = keras_vit.list_models()
    assert set(listed) == {*keras_vit.variant_names(), *keras_vit.BIT_VARIANTS}
    for entry in _entries():  # read from the catalogue's file, not through the code under test
        if not entry.get("hub"):
            assert entry["tag"] in listed[entry["variant"]], entry
    assert listed["ViT-H_14"] == ["imagenet21k"]
