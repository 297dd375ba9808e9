"""OpenCLIP Hub folders whose image tower is a timm trunk (vision_cfg.timm_model_name, as
open_clip's SigLIP models are): open_clip builds the model (ViT-Ti/16 as the trunk, the
smallest timm VisionTransformer with a row, and a one-block text tower), its own
`save_config_for_hf` writes the config beside the state dict, and keras_vit's
`from_pretrained` computes open_clip's `encode_image` (relative 1e-4, as
test_timm_families.py derives it). A timm model keras_vit has no row for is refused naming
`timm_model_name`.
"""

import copy
import json

import numpy as np
import pytest
from safetensors.numpy import save_file

import keras_vit
from keras_vit import CheckpointError
from tests.checkpoints.formats.test_formats import _images
from tests.checkpoints.formats.test_timm_families import _assert_close
from tests.oracle import import_open_clip

TEXT = {"context_length": 4, "vocab_size": 16, "width": 16, "heads": 2, "layers": 1}


def randomise_clip(model, torch):
    """As test_open_clip's hub_folder: LayerNorm scales near 1, every other weight random
    (logit_scale, a scalar, too)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape)
            p.copy_(1 + 0.2 * noise if "norm" in name and name.endswith("weight")
                    or ".ln_" in f".{name}" and name.endswith("weight")
                    else noise * (0.2 if p.ndim <= 1 else 1 / max(1, p[0].numel()) ** 0.5))
    return model.eval()


def _config(projection):
    return {"embed_dim": 16, "text_cfg": TEXT,
            "vision_cfg": {"image_size": 224, "timm_model_name": "vit_tiny_patch16_224",
                           "timm_model_pretrained": False, "timm_pool": "token",
                           "timm_proj": projection}}


@pytest.mark.parametrize("projection", ["linear", "none"])
def test_a_timm_trunk_folder_computes_open_clips_image_features(projection, tmp_path):
    import_open_clip()
    import torch
    from open_clip.model import CLIP, set_model_preprocess_cfg
    from open_clip.push_to_hf_hub import save_config_for_hf
    from safetensors.torch import save_file as save_torch_file

    config = _config(projection)
    theirs = randomise_clip(CLIP(**copy.deepcopy(config)), torch)
    # The official [-1, 1] normalisation, so that the images below are both models' input.
    set_model_preprocess_cfg(theirs, {"size": 224, "mean": (0.5,) * 3, "std": (0.5,) * 3})
    save_torch_file(theirs.state_dict(), str(tmp_path / "open_clip_model.safetensors"))
    save_config_for_hf(theirs, tmp_path / "open_clip_config.json", model_config=config)
    ours = keras_vit.from_pretrained(str(tmp_path), include_top=projection == "linear")
    images = _images(2, (224, 224))
    with torch.no_grad():
        expected = theirs.encode_image(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()))
    _assert_close(np.asarray(ours(images)), expected.numpy())


@pytest.mark.parametrize("change, named", [
    (dict(timm_model_name="resnet50"), "timm_model_name 'resnet50'"),
    (dict(timm_pool="avg"), "timm_pool 'avg'"),
    (dict(timm_proj="mlp"), "timm_proj 'mlp'"),
])
def test_a_timm_trunk_keras_vit_does_not_read_is_refused_naming_the_field(change, named,
                                                                          tmp_path):
    config = _config("linear")
    config["vision_cfg"].update(change)
    (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": config}))
    save_file({"visual.trunk.cls_token": np.zeros((1, 1, 192), np.float32)},
              str(tmp_path / "open_clip_model.safetensors"))
    with pytest.raises(CheckpointError, match=named) as raised:
        keras_vit.from_pretrained(str(tmp_path))
    assert "\n" not in str(raised.value)
