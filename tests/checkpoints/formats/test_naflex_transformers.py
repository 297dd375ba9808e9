"""SigLIP 2 NaFlex from transformers' `save_pretrained` folders: Siglip2VisionModel with a small
config (width 64, 2 blocks, 2 heads, 16-pixel patches, a 4 x 4 position table) and random
weights, read by `keras_vit.from_pretrained`; the pooled output on packed batches of three
aspect ratios under two budgets is transformers' `pooler_output`.

Tolerance: 1e-4 of the largest output, as tests/checkpoints/formats/test_transformers_families.py
argues (measured here below 1e-6).
"""

import numpy as np

import keras_vit
from keras_vit.checkpoints.formats.transformers_families import family_to_official
from keras_vit.checkpoints.layout import official_arrays
from keras_vit.runtime.naflex_inputs import pack, sequence_grid
from tests.checkpoints.formats.test_formats import _randomise, _torch
from tests.checkpoints.formats.writers import official_to_family

RELATIVE_TOLERANCE = 1e-4
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
             patch_size=16, num_patches=16)
ASPECT_RATIOS = [(300, 400), (512, 128), (224, 224)]


def _saved(tmp_path):
    torch = _torch()
    import transformers

    model = transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(**SMALL)).eval()
    _randomise(model, torch)
    model.save_pretrained(str(tmp_path))
    return model, torch


def _batch(budget):
    rng = np.random.default_rng(budget)
    images = [rng.uniform(-1, 1, (rows * 16, cols * 16, 3)).astype(np.float32)
              for rows, cols in (sequence_grid(h, w, 16, budget) for h, w in ASPECT_RATIOS)]
    return pack(images, 16, budget)


def test_siglip2_naflex_computes_what_transformers_computes(tmp_path):
    theirs, torch = _saved(tmp_path)
    ours = keras_vit.from_pretrained(str(tmp_path), include_top=False)
    assert ours.get_layer("encoderblock_0").mlp.approximate_gelu  # gelu_pytorch_tanh
    for budget in (24, 64):  # grids below and above the stored 4 x 4
        batch = _batch(budget)
        mask = np.arange(budget)[None] < batch["grid"].prod(axis=1)[:, None]
        with torch.no_grad():
            expected = theirs(pixel_values=torch.from_numpy(batch["patches"]),
                              pixel_attention_mask=torch.from_numpy(mask.astype(np.int64)),
                              spatial_shapes=torch.from_numpy(batch["grid"].astype(np.int64))
                              ).pooler_output.numpy()
        found = np.asarray(ours(batch))
        relative = np.abs(found - expected).max() / np.abs(expected).max()
        assert relative <= RELATIVE_TOLERANCE, (budget, relative)


def test_official_to_siglip2_to_official_is_identity(tmp_path):
    from safetensors import safe_open

    _saved(tmp_path)
    arrays = official_arrays(keras_vit.from_pretrained(str(tmp_path), include_top=False))
    written = official_to_family("siglip2_vision_model", arrays)
    with safe_open(f"{tmp_path}/model.safetensors", "np") as f:
        assert set(written) == {k.removeprefix("vision_model.") for k in f.keys()}
    back = family_to_official("siglip2_vision_model", written, heads=2)
    for key, array in arrays.items():
        np.testing.assert_array_equal(back[key].reshape(array.shape), array, err_msg=key)
