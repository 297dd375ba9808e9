"""Writes the transformers ViTHybrid fixtures of tests/test_vit_hybrid_transformers.py.

Written by transformers 4.57.6 (torch 2.13.0+cpu, safetensors 0.8.0), the last
transformers line that ships `ViTHybridForImageClassification` (5.0 removed it
with the other deprecated models), so it runs in a venv of its own, never in the
project's:

    python3 -m venv /tmp/venv-hf4
    /tmp/venv-hf4/bin/pip install torch==2.13.0 "transformers<5" safetensors numpy
    /tmp/venv-hf4/bin/python tests/data/make_vit_hybrid_fixture.py

It writes, beside itself:

- vit_hybrid_tiny/: `save_pretrained` of a small random ViTHybridForImageClassification
  (config.json + model.safetensors): BiT trunk of two one-unit stages (stride 8, 512
  channels), a 2-block ViT of width 32 with 2 heads on 56 x 56 images, 5 classes. Every
  parameter random, GroupNorm and LayerNorm scales and biases included. Stored as
  float16 (about 1 MB), the values rounded to float16 before the reference ran, so the
  file holds exactly the weights that gave the logits.
- vit_hybrid_tiny_expected.npz (git add -f: *.npz is ignored): `images`, two NHWC
  float32 images in [-1, 1], and `logits`, the model's float32 output in eval mode.
- vit_hybrid_r50_b16_keys.json: every (name, shape) of a full-size
  ViTHybridForImageClassification made with the configuration of
  google/vit-hybrid-base-bit-384 (R50+ViT-B/16 at 384, 1000 classes; the BitConfig of
  transformers' conversion script), built on the meta device: names and shapes only.
"""

import json
import os
import shutil

import numpy as np
import torch
import transformers
from transformers import BitConfig, ViTHybridConfig, ViTHybridForImageClassification

HERE = os.path.dirname(os.path.abspath(__file__))


def _init_without_mask_token():
    # 4.57.6's ViTHybrid _init_weights zeroes the embeddings' mask token, which models built
    # without one (every classifier) lack: it raises AttributeError. Skip that one step; the
    # weights are all replaced by randomise() anyway.
    from transformers.models.deprecated.vit_hybrid import modeling_vit_hybrid as m

    original = m.ViTHybridPreTrainedModel._init_weights

    def init(self, module):
        if isinstance(module, m.ViTHybridEmbeddings) and module.mask_token is None:
            module.mask_token = torch.nn.Parameter(torch.zeros(1))
            original(self, module)
            module.mask_token = None
        else:
            original(self, module)

    m.ViTHybridPreTrainedModel._init_weights = init


def bit(depths, **kwargs):
    # The conversion script's BiT: post-activation bottlenecks, TF "SAME" padding everywhere.
    return BitConfig(global_padding="same", layer_type="bottleneck", depths=depths,
                     out_features=[f"stage{len(depths)}"], embedding_dynamic_padding=True,
                     **kwargs)


def randomise(model, seed=0):
    """Every parameter random, then rounded to float16 (the file stores float16).

    Norm scales near 1 and the rest near 0, except where the trunk's numerics must show:
    each convolution's output channels get entries of a standard deviation between 3e-4 and
    3e-2 (where (w - mean) / (std + 1e-5), the official form, and transformers'
    (w - mean) / sqrt(var + 1e-8) differ by up to a few per cent), and the stem's GroupNorm
    scale and bias are ~1e-3, so the next GroupNorms see a variance near 1e-4 (where
    epsilon 1e-5, transformers', and 1e-6, the official one, differ by a few per cent).
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if ".backbone." in name and p.ndim == 4:
                exponent = -3.5 + 2 * torch.rand((p.shape[0], 1, 1, 1), generator=g)
                p.copy_(noise * 10 ** exponent)
            elif "embedder.norm" in name:
                p.copy_(1e-3 * (1 + 0.2 * noise if name.endswith("weight") else noise))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            elif p.ndim == 1:
                p.copy_(0.2 * noise)
            else:
                p.copy_(noise / max(1, p[0].numel()) ** 0.5)
            p.copy_(p.half().float())


def tiny():
    torch.manual_seed(0)
    config = ViTHybridConfig(
        backbone_config=bit([1, 1], hidden_sizes=[256, 512]), hidden_size=32,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=56,
        patch_size=1, backbone_featmap_shape=[1, 512, 7, 7], num_labels=5)
    model = ViTHybridForImageClassification(config).eval()
    randomise(model)
    images = np.random.default_rng(7).uniform(-1, 1, (2, 56, 56, 3)).astype(np.float32)
    with torch.no_grad():
        logits = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).logits
    folder = os.path.join(HERE, "vit_hybrid_tiny")
    shutil.rmtree(folder, ignore_errors=True)
    model.half().save_pretrained(folder)
    np.savez(os.path.join(HERE, "vit_hybrid_tiny_expected.npz"), images=images,
             logits=logits.numpy().astype(np.float32))


def full_size_keys():
    config = ViTHybridConfig(backbone_config=bit([3, 4, 9]), image_size=384, num_labels=1000)
    with torch.device("meta"):
        model = ViTHybridForImageClassification(config)
    keys = [json.dumps([name, list(t.shape)]) for name, t in model.state_dict().items()]
    head = json.dumps({"transformers": transformers.__version__, "config": config.to_dict()})
    with open(os.path.join(HERE, "vit_hybrid_r50_b16_keys.json"), "w") as f:
        f.write(head[:-1] + ',\n"keys": [\n' + ",\n".join(keys) + "\n]}\n")  # a key a line


if __name__ == "__main__":
    _init_without_mask_token()
    tiny()
    full_size_keys()
