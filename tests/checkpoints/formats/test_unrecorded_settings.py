"""Never silently wrong: a setting that changes a model's outputs and that a file does not
record is refused in one line naming it, and the route each refusal names, followed, computes
what the library that wrote the file computes.

timm writes every file here, from its own models (random weights, 2 blocks, 48 pixels), as a
bare state dict, or in open_clip's or big_vision's layout by inverting timm's own converters
(test_open_clip.py, test_big_vision.py); timm's forward is the reference. A bare state dict
fuses its attention heads and records neither the MLP activation, the GELU form nor the
epsilon; from_pretrained refuses it naming each and the `keras_vit.ViT(dataclasses.replace(...))`
call that gives them. The tests follow that call with the file's model's values in place of
the row's. The files are 2 blocks deep where the rows are 12: the `tiny_rows` fixture stands in
the rows at that depth (the only thing changed), so the refusal names the real rows and the
call runs on the rows at the file's depth. What the shapes do say (the registers, LayerScale,
big_vision's split heads) is read from them, and named with the row.

A file whose config records a setting the variant named differs in is refused when `ViT` opens
it, naming the setting and `keras_vit.from_pretrained` (keras_vit/checkpoints/catalogue.py):
tests/checkpoints/formats/test_timm_names.py (the heads), test_transformers_families.py (the
activation), tests/checkpoints/test_npz_metadata.py (the MAP head's heads).

Tolerance: relative (to the largest output) 1e-4, as tests/checkpoints/formats/test_timm_families.py
derives it: two float32 implementations of two blocks differ by ~1e-6. Where the wrong value
moves the outputs by more (the heads, the MAP head's, the activation, an epsilon of 1e-3), the
row's own values are shown to miss the tolerance, so each check can fail; tanh for erf GELU
moves these random two blocks by ~1.4e-4 only, too near the bound to assert.
"""

import dataclasses
import json
import re
import types
from functools import partial

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.shape_check import variant_fits_shapes
from keras_vit.errors import CheckpointError
from keras_vit.variants import FAMILIES, VARIANTS
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.oracle import import_timm, run_timm

RELATIVE_TOLERANCE = 1e-4
DEPTH, SIZE = 2, 48


def _relative(ours, theirs):
    assert ours.shape == theirs.shape
    assert np.abs(theirs).max() > 0.1  # a loaded model, not zeros
    return np.abs(ours - theirs).max() / np.abs(theirs).max()


def _timm_file(tmp_path, architecture, setup=None, size=SIZE, **kwargs):
    """timm's model with random weights (`setup` may change it, as a user's code would), its
    state dict written bare by safetensors."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    model = timm.create_model(architecture, pretrained=False, depth=DEPTH, img_size=size,
                              num_classes=0, **kwargs)
    if setup is not None:
        setup(model)
    _randomise(model, torch)
    path = tmp_path / f"{architecture}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model.eval(), str(path)


def _tiny(variant):
    return dataclasses.replace(variant, depth=DEPTH)


@pytest.fixture
def tiny_rows(monkeypatch):
    """The rows at the files' depth, for from_pretrained's fit (the names stay the rows')."""
    from keras_vit.models import pretrained

    rows = [_tiny(v) for v in [*VARIANTS.values(), *FAMILIES.values()]]

    def fitting(shapes, **fields):
        return [v for v in (dataclasses.replace(r, **fields) for r in rows)
                if variant_fits_shapes(v, shapes)]

    monkeypatch.setattr(pretrained, "fitting_variants", fitting)


def _refusal(path, size=SIZE):
    with pytest.raises(CheckpointError) as raised:
        keras_vit.from_pretrained(path, include_top=False, image_size=size)
    message = str(raised.value)
    assert "\n" not in message
    return message


def _follow(message, size=SIZE, **values):
    """Runs the call the refusal names, its values replaced by `values` (the file's model's),
    on the rows at the file's depth; the model it builds."""
    call = re.search(r"keras_vit\.ViT\(dataclasses\.replace\(.*\)", message).group(0)
    for name, value in values.items():
        call, count = re.subn(rf"\b{name}=[^,)]+", f"{name}={value!r}", call)
        assert count == 1, f"the refusal's call does not give {name}: {call}"
    call = call[:-1] + f", include_top=False, image_size={size})"
    tiny = types.SimpleNamespace(ViT=keras_vit.ViT,
                                 get_variant=lambda name: _tiny(keras_vit.get_variant(name)))
    return eval(call, {"keras_vit": tiny, "dataclasses": dataclasses})


def _output(model, theirs, size=SIZE):
    images = _images(2, (size, size))
    return np.asarray(model(images)), run_timm(theirs, images, features=True)


def test_a_bare_file_with_other_heads_is_refused_naming_them(tmp_path, tiny_rows):
    # SigLIP-B/16's shapes with 16 heads, not the row's 12: the issue's 10.5% error, silent.
    theirs, path = _timm_file(tmp_path, "vit_base_patch16_siglip_224", num_heads=16)
    message = _refusal(path)
    assert "attention heads" in message and '"SigLIP-B/16"' in message
    ours, reference = _output(_follow(message, heads=16, map_heads=16), theirs)
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE
    wrong, _ = _output(_follow(message), theirs)  # the row's 12 heads, as loaded before
    assert _relative(wrong, reference) > RELATIVE_TOLERANCE


def test_a_map_head_with_its_own_heads_is_refused_and_then_exact(tmp_path, tiny_rows):
    # A SigLIP whose attention pooling has 4 heads under a 12-head encoder (timm's own
    # AttentionPoolLatent, built with its num_heads): expressible as Variant.map_heads.
    import torch

    AttentionPoolLatent = import_timm().layers.AttentionPoolLatent

    def four_head_pool(model):  # as VisionTransformer builds it, but for num_heads
        model.attn_pool = AttentionPoolLatent(
            model.embed_dim, num_heads=4, mlp_ratio=4.0,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6))

    theirs, path = _timm_file(tmp_path, "vit_base_patch16_siglip_224", setup=four_head_pool)
    message = _refusal(path)
    assert "MAP head's attention heads" in message
    ours, reference = _output(_follow(message, map_heads=4), theirs)
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE
    wrong, _ = _output(_follow(message), theirs)
    assert _relative(wrong, reference) > RELATIVE_TOLERANCE


def test_a_map_heads_own_count_is_read_from_big_visions_shapes(tmp_path, tiny_rows):
    # big_vision splits its attention arrays (D, heads, head_dim): the MAP head's 4 heads are
    # in its shapes, and nothing else is left out, so the refusal names the row with them.
    import torch

    from tests.checkpoints.formats.test_big_vision import big_vision_arrays

    timm = import_timm()
    AttentionPoolLatent = timm.layers.AttentionPoolLatent
    theirs = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, depth=DEPTH,
                               img_size=SIZE, num_classes=16, act_layer="gelu_tanh")
    theirs.attn_pool = AttentionPoolLatent(theirs.embed_dim, num_heads=4, mlp_ratio=4.0,
                                           norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
                                           act_layer=timm.layers.get_act_layer("gelu_tanh"))
    _randomise(theirs, torch)
    path = str(tmp_path / "siglip.npz")
    np.savez(path, **big_vision_arrays(theirs.eval()))
    message = _refusal(path)
    assert "fit with map_heads=4" in message and "neither its shapes nor" not in message
    ours, reference = _output(_follow(message), theirs)  # as named, nothing to replace
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE


def test_a_bare_gelu_clip_file_is_refused_naming_the_activation(tmp_path, tiny_rows):
    # timm's GELU CLIP has the QuickGELU row's shapes: the 0.7-1.2%, silent.
    theirs, path = _timm_file(tmp_path, "vit_base_patch16_clip_224")
    message = _refusal(path)
    assert "MLP activation" in message and '"CLIP-B/16"' in message
    assert "activation='quick_gelu'" in message  # the row's, to be replaced by the file's
    ours, reference = _output(_follow(message, activation="gelu"), theirs)
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE
    wrong, _ = _output(_follow(message), theirs)
    assert _relative(wrong, reference) > RELATIVE_TOLERANCE


def test_a_timm_folder_of_the_gelu_clip_loads_with_gelu(tmp_path, tiny_rows):
    # The route: a timm Hub folder of the GELU CLIP (the CLIP rows are QuickGELU) was
    # refused recommending keras_vit.ViT("CLIP-B/16", weights=folder), 0.7-1.2% off. Its
    # config's architecture names the CLIP row with erf GELU, which from_pretrained builds.
    from tests.checkpoints.formats.test_timm_names import _timm_folder

    theirs, folder = _timm_folder(tmp_path, "vit_base_patch16_clip_224", depth=DEPTH,
                                  img_size=SIZE, num_classes=0)
    config = json.loads((folder / "config.json").read_text())  # the depth, as timm records it
    config["model_args"] = {"depth": DEPTH, "img_size": SIZE}
    (folder / "config.json").write_text(json.dumps(config))
    ours = keras_vit.from_pretrained(str(folder), include_top=False, image_size=SIZE)
    assert ours.get_layer("encoderblock_0").mlp.activation == "gelu"
    ours, reference = _output(ours, theirs.eval())
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE


def test_a_bare_open_clip_file_is_refused_naming_the_activation(tmp_path, tiny_rows):
    # open_clip builds GELU towers as well as OpenAI's QuickGELU ones, and its state dict
    # (written here from timm's GELU CLIP by inverting timm's own converter) records neither.
    import torch
    from safetensors.numpy import save_file

    from tests.checkpoints.formats.test_open_clip import open_clip_arrays

    timm = import_timm()
    theirs = timm.create_model("vit_base_patch16_clip_224", pretrained=False, depth=DEPTH,
                               img_size=SIZE, num_classes=24)
    _randomise(theirs, torch)
    with torch.no_grad():
        theirs.head.bias.zero_()  # open_clip's projection has none
    path = str(tmp_path / "open_clip_model.safetensors")
    save_file(open_clip_arrays(theirs.eval()), path)
    message = _refusal(path)
    assert "MLP activation" in message and "GELU form" not in message
    ours, reference = _output(_follow(message, activation="gelu"), theirs)
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE
    wrong, _ = _output(_follow(message), theirs)
    assert _relative(wrong, reference) > RELATIVE_TOLERANCE


def test_a_bare_file_is_refused_naming_the_gelu_form(tmp_path, tiny_rows):
    # timm builds some SigLIPs with tanh GELU (act_layer="gelu_tanh"), others with erf.
    theirs, path = _timm_file(tmp_path, "vit_base_patch16_siglip_224", act_layer="gelu_tanh")
    message = _refusal(path)
    assert "GELU form" in message and "approximate_gelu=False" in message
    ours, reference = _output(_follow(message, approximate_gelu=True), theirs)
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE


def test_a_bare_file_is_refused_naming_the_epsilon(tmp_path, tiny_rows):
    # timm's epsilon is the architecture's (1e-6, CLIP's 1e-5); this one 1e-3, which moves
    # unit-scale LayerNorm inputs visibly.
    import torch

    theirs, path = _timm_file(tmp_path, "vit_base_patch16_siglip_224",
                              norm_layer=partial(torch.nn.LayerNorm, eps=1e-3))
    message = _refusal(path)
    assert "LayerNorm epsilon" in message and "layer_norm_epsilon=1e-06" in message
    ours, reference = _output(_follow(message, layer_norm_epsilon=1e-3), theirs)
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE
    wrong, _ = _output(_follow(message), theirs)  # the row's 1e-6
    assert _relative(wrong, reference) > RELATIVE_TOLERANCE


def test_registers_and_layer_scale_are_read_from_the_shapes(tmp_path, tiny_rows):
    # The register count (reg_token's shape) and LayerScale (its gamma arrays) are in a bare
    # file exactly: the refusal names the row with 4 registers and LayerScale alone, and its
    # call, given the settings a timm file leaves out, computes what timm computes.
    size = 56  # a multiple of DINOv2's patch 14
    theirs, path = _timm_file(tmp_path, "vit_small_patch14_reg4_dinov2", size=size)
    message = _refusal(path, size)
    assert '"DINOv2-S/14-reg4"' in message and '"DINOv2-S/14"' not in message
    assert '"DeiT-S/16"' not in message
    ours, reference = _output(_follow(message, size), theirs, size)
    assert _relative(ours, reference) <= RELATIVE_TOLERANCE


def test_a_file_whose_shapes_record_everything_names_the_row_alone(tmp_path):
    # The official layout splits the heads, and its writer fixes the rest: the row is exact,
    # the refusal names no setting, and its call computes what timm's npz loader computes.
    from tests.oracle import random_vit_npz, timm_vit

    path = str(tmp_path / "ti16.npz")
    variant = keras_vit.get_variant("Ti/16")
    random_vit_npz(path, variant, (2, 2), classes=10)
    with pytest.raises(CheckpointError) as raised:
        keras_vit.from_pretrained(path)
    message = str(raised.value)
    assert "neither its shapes nor a config" not in message
    call = re.search(r"keras_vit\.ViT\('ViT-Ti_16', weights='[^']+'\)", message).group(0)
    ours = eval(call, {"keras_vit": keras_vit})
    theirs = timm_vit(variant, 32, 10, npz_path=path)
    images = _images(2, (32, 32))
    assert _relative(np.asarray(ours(images)), run_timm(theirs, images)) <= RELATIVE_TOLERANCE


def test_heads_a_files_shapes_record_refuse_another_count_naming_them(tmp_path):
    # big_vision's split arrays record 4 heads; a variant of 2 is refused naming the count and
    # the call with it, which (followed) is the variant that computes what timm computes.
    import torch

    from tests.checkpoints.formats.test_big_vision import (
        _timm_siglip,
        _variant,
        big_vision_arrays,
    )

    theirs = _randomise(_timm_siglip(), torch).eval()
    path = str(tmp_path / "siglip.npz")
    np.savez(path, **big_vision_arrays(theirs))
    with pytest.raises(CheckpointError) as raised:
        keras_vit.ViT(dataclasses.replace(_variant(), heads=2), weights=path)
    message = str(raised.value)
    assert "\n" not in message and "has 4 attention heads" in message
    assert "dataclasses.replace(your variant, heads=4)" in message
    ours = keras_vit.ViT(dataclasses.replace(_variant(), heads=4), weights=path)
    images = _images(2, (32, 32))
    assert _relative(np.asarray(ours(images)), run_timm(theirs, images)) <= RELATIVE_TOLERANCE
