"""timm architecture names: every row of keras_vit's table against timm's own registry, and a
timm folder (config.json + model.safetensors, written with timm) whose heads differ from the
official variant's loads with timm's heads or is refused naming both."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.formats import inspect_checkpoint
from keras_vit.export.timm_config import registered_name
from keras_vit.variants import timm_variant
from keras_vit.variants.timm_names import TIMM_ARCHITECTURES
from tests.checkpoints.formats.test_formats import TOL, _images, _randomise, run_timm
from tests.oracle import import_timm


@pytest.mark.parametrize("base", sorted(TIMM_ARCHITECTURES))
def test_every_row_builds_what_timm_registers(base):
    timm = import_timm()
    import torch

    sized = f"{base}_{timm_variant(base).image_size}"  # at the row's resolution, else unsized
    name = sized if sized in timm.list_models(base + "*") else base
    assert name in timm.list_models(base + "*"), f"timm registers no {base}"
    assert registered_name(base) == name  # what save_pretrained's config.json names
    variant = timm_variant(name)
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    if variant.is_hybrid:  # the trunk's stages, and the transformer on top
        # A stem-only trunk (R+Ti/16) is a plain Sequential in timm, without stages.
        backbone = model.patch_embed.backbone
        stages = tuple(len(stage.blocks) for stage in getattr(backbone, "stages", ()))
        assert stages == tuple(variant.resnet_stages)
    # timm's NaFlexVit keeps its patch embedding and tokens under `embeds`
    embedding = model.embeds if variant.patch_input == "naflex" else model.patch_embed
    tokens = model.embeds if variant.patch_input == "naflex" else model
    if not variant.is_hybrid:
        assert embedding.patch_size == (variant.patch_size,) * 2
    assert model.embed_dim == variant.width and len(model.blocks) == variant.depth
    assert model.blocks[0].attn.num_heads == variant.heads
    mlp = model.blocks[0].mlp
    # a split SwiGLU (timm's SwiGLU: fc1_g and fc1_x) has half the row's width in each
    first = mlp.fc1_g.out_features * 2 if hasattr(mlp, "fc1_g") else mlp.fc1.out_features
    assert first == variant.mlp_dim
    assert (model.global_pool == "avg") == (variant.classifier == "gap")
    assert (tokens.cls_token is not None) == variant.has_class_token
    if getattr(model, "attn_pool", None) is not None:  # the MAP head's own heads
        assert model.attn_pool.num_heads == variant.pooling_heads
    rope = getattr(model, "rope", None)
    if rope is not None:  # timm's grid options of RoPE (PE-core's)
        assert (rope.grid_offset, rope.grid_indexing) == (variant.rope_grid_offset,
                                                         variant.rope_grid_indexing)


def test_every_resolution_timm_registers_a_row_at_is_that_row():
    """timm names a table row's architecture at every resolution it registers it at
    (`<base>_<pixels>`: EVA-02 at 224, 336 and 448; AIMv2 and PE-core likewise); each such name
    finds its row by timm's rule, not a list of resolutions, and builds the row's sizes."""
    timm = import_timm()
    import torch

    at_resolutions = [name for base in TIMM_ARCHITECTURES for name in timm.list_models(base + "_*")
                      if name[len(base) + 1:].isdigit()]
    suffixes = {name.rsplit("_", 1)[1] for name in at_resolutions}
    assert {"224", "336", "384", "448", "512"} <= suffixes  # the families' resolutions among them
    for name in at_resolutions:
        variant = timm_variant(name)
        assert variant is not None, f"{name} finds no row"
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
        assert (model.embed_dim, len(model.blocks), model.blocks[0].attn.num_heads) == \
            (variant.width, variant.depth, variant.heads), name


def test_siglip_at_timms_other_resolutions_is_the_same_architecture():
    """timm registers SigLIP's image towers at several resolutions (SigLIP 2's fixed-resolution
    ".v2_webli" weights among them, built by the same functions); each name the table accepts
    builds the row's architecture: width, heads, MLP width, patch, the MAP head, and timm's
    erf GELU (timm's patch-16 So400m and B/32 use the tanh form: the table accepts neither).
    One block each (shapes only): the depth is the row's, as the 224 test above checks."""
    timm = import_timm()
    import torch

    names = [n for n in timm.list_models("vit_*_siglip_*") if timm_variant(n)]
    assert {"vit_base_patch16_siglip_512", "vit_so400m_patch14_siglip_378"} <= set(names)
    for name in names:
        variant = timm_variant(name)
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, depth=1)
        block = model.blocks[0]
        found = (model.embed_dim, block.attn.num_heads, block.mlp.fc1.out_features,
                 model.patch_embed.patch_size[0], model.global_pool, model.cls_token is None,
                 type(block.mlp.act).__name__, getattr(block.mlp.act, "approximate", None))
        assert found == (variant.width, variant.heads, variant.mlp_dim, variant.patch_size,
                         "map", True, "GELU", "none"), name


def _timm_folder(tmp_path, architecture, **kwargs):
    """A Hub-style timm folder as timm's push_to_hf_hub writes it: model.safetensors and a
    config.json naming the architecture, the classes and the pretrained config."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    model = timm.create_model(architecture, pretrained=False, **kwargs)
    _randomise(model, torch)
    folder = tmp_path / architecture
    folder.mkdir()
    save_file(model.state_dict(), str(folder / "model.safetensors"))
    config = {"architecture": architecture, "num_classes": model.num_classes,
              "pretrained_cfg": {**model.pretrained_cfg, "num_classes": model.num_classes}}
    (folder / "config.json").write_text(json.dumps(config, default=str))
    return model, folder


def test_a_timm_folder_with_sixteen_heads_loads_as_sixteen_heads(tmp_path):
    # depth 2 and 64 px keep it small; timm's architecture fixes width and heads.
    model, folder = _timm_folder(tmp_path, "vit_base_patch16_gap_224", depth=2, img_size=64,
                                 num_classes=5)
    from keras_vit.checkpoints.formats import inspect_checkpoint

    info = inspect_checkpoint(str(folder))
    assert info.heads == 16
    variant = dataclasses.replace(timm_variant("vit_base_patch16_gap_224"), depth=2)
    ours = keras_vit.ViT(variant, weights=str(folder), image_size=64)
    assert ours.get_layer("encoderblock_0").attention.num_heads == 16
    images = _images(2, (64, 64))
    np.testing.assert_allclose(np.asarray(ours(images)), run_timm(model, images), atol=TOL)
    # The official B/16-gap has 12 heads: asked for it, the folder is refused naming both.
    official = dataclasses.replace(keras_vit.get_variant("B/16-gap"), depth=2)
    with pytest.raises(keras_vit.CheckpointError, match="16 attention heads.*has 12"):
        keras_vit.ViT(official, weights=str(folder), image_size=64)


# --- timm's config.json, each field checked for its type (issue 32) ----------------------

@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory):
    """A one-block timm ViT as timm's push_to_hf_hub writes it (_timm_folder above)."""
    return _timm_folder(tmp_path_factory.mktemp("timm"), "vit_tiny_patch16_224", depth=1,
                        img_size=32, num_classes=3)[1]


@pytest.mark.parametrize("field, value, words", [
    ("architecture", 5, "architecture is 5; a string was expected"),
    ("pretrained_cfg", [0.5] * 3, "pretrained_cfg is [0.5, 0.5, 0.5]; an object was expected"),
])
def test_a_timm_config_field_of_the_wrong_type_is_one_line(timm_folder, tmp_path, field, value,
                                                           words):
    folder = tmp_path / "edited"
    shutil.copytree(timm_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(keras_vit.CheckpointError) as error:
        inspect_checkpoint(str(folder))
    assert str(error.value) == f"{folder}/config.json: {words}."
    assert inspect_checkpoint(str(timm_folder)).heads == 3  # the control: unedited, it reads
