"""SigLIP 2 NaFlex from timm's own files: timm's NaFlexVit with random weights, its state dict
written by safetensors beside a Hub config.json, read by `keras_vit.from_pretrained`; the
pooled output at three aspect ratios and two sequence budgets is timm's NaFlex forward on the
same patches, each image at the grid timm's rule gives for that budget.

Tolerance: 1e-4 of the largest output (tests/checkpoints/formats/test_timm_families.py says
why); measured here about 1.5e-6. Batched against alone: 1e-5, the same arithmetic on rows that
differ only in the padding masked away (measured below 1e-6).
"""

import json

import numpy as np
import pytest

import keras_vit
from keras_vit.errors import ArgumentError
from keras_vit.runtime.naflex_inputs import pack, sequence_grid
from tests.checkpoints.formats.test_formats import _randomise
from tests.oracle import import_timm

RELATIVE_TOLERANCE = 1e-4
BATCHED_TOLERANCE = 1e-5
ASPECT_RATIOS = [(300, 400), (512, 128), (224, 224)]  # landscape, a tall strip, square
BUDGETS = [256, 576]


def _timm_folder(tmp_path, architecture, depth=None):
    """timm's model with random weights and its Hub folder (model.safetensors, config.json)."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    kwargs = {} if depth is None else {"depth": depth}
    model = _randomise(timm.create_model(architecture, pretrained=False, num_classes=0, **kwargs),
                       torch)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    config = {"architecture": architecture, "num_classes": 0, "model_args": kwargs}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return model, str(tmp_path)


def _timm_naflex(model, batch):
    """timm's NaFlex forward: patches, each patch's (row, col), and which tokens are patches."""
    import torch

    size = batch["patches"].shape[1]
    coords = np.zeros((len(batch["grid"]), size, 2), np.int64)
    valid = np.zeros((len(batch["grid"]), size), bool)
    for i, (rows, cols) in enumerate(batch["grid"]):
        coords[i, :rows * cols] = np.stack(np.meshgrid(np.arange(rows), np.arange(cols),
                                                       indexing="ij"), -1).reshape(-1, 2)
        valid[i, :rows * cols] = True
    with torch.no_grad():
        return model(torch.from_numpy(batch["patches"]), patch_coord=torch.from_numpy(coords),
                     patch_valid=torch.from_numpy(valid)).numpy()


def _image(height, width, budget, seed=0):
    rows, cols = sequence_grid(height, width, 16, budget)
    return np.random.default_rng(seed).uniform(-1, 1, (rows * 16, cols * 16, 3)).astype(np.float32)


def _assert_parity(theirs, ours):
    for budget in BUDGETS:
        for height, width in ASPECT_RATIOS:
            batch = pack([_image(height, width, budget)], 16, budget)
            expected = _timm_naflex(theirs, batch)
            relative = np.abs(np.asarray(ours(batch)) - expected).max() / np.abs(expected).max()
            assert relative <= RELATIVE_TOLERANCE, (budget, height, width, relative)


def test_siglip2_naflex_computes_what_timm_computes(tmp_path):
    theirs, folder = _timm_folder(tmp_path, "naflexvit_base_patch16_siglip", depth=2)
    ours = keras_vit.from_pretrained(folder, include_top=False)
    assert [layer.approximate_gelu for layer in ours.layers if hasattr(layer, "approximate_gelu")
            ][0] is True  # timm builds naflexvit_*_siglip with tanh GELU
    _assert_parity(theirs, ours)


def test_a_batch_of_mixed_aspect_ratios_equals_each_image_alone(tmp_path):
    _, folder = _timm_folder(tmp_path, "naflexvit_base_patch16_siglip", depth=2)
    ours = keras_vit.from_pretrained(folder, include_top=False)
    budget = 256
    images = [_image(h, w, budget, seed) for seed, (h, w) in enumerate(ASPECT_RATIOS)]
    batched = np.asarray(ours(pack(images, 16, budget)))
    for image, row in zip(images, batched):
        count = (image.shape[0] // 16) * (image.shape[1] // 16)
        alone = np.asarray(ours(pack([image], 16, count)))[0]  # no padding at all
        assert np.abs(row - alone).max() <= BATCHED_TOLERANCE * np.abs(alone).max()


def test_image_size_that_would_resize_the_stored_grid_is_refused(tmp_path):
    """timm keeps a NaFlex checkpoint's 16 x 16 position grid whatever img_size says, and
    resizes it for each image; building at another image_size resized it once at load too,
    a different function (5e-5 relative). Refused in one line; the stored size is accepted."""
    _, folder = _timm_folder(tmp_path, "naflexvit_base_patch16_siglip", depth=1)
    with pytest.raises(ArgumentError, match="16x16 position grid .* image_size does not apply"):
        keras_vit.from_pretrained(folder, include_top=False, image_size=224)
    model = keras_vit.from_pretrained(folder, include_top=False, image_size=256)
    assert tuple(model.get_layer("posembed_input").grid_size) == (16, 16)


@pytest.mark.slow  # full size; the default run's two-block test above checks every mapping
def test_siglip2_naflex_b16_full_size_computes_what_timm_computes(tmp_path):
    theirs, folder = _timm_folder(tmp_path, "naflexvit_base_patch16_siglip")
    _assert_parity(theirs, keras_vit.from_pretrained(folder, include_top=False))
