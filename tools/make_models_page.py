"""Writes docs/models-and-weights.md from the variant table and the weight catalogue.

    python tools/make_models_page.py

tests/docs/test_pages.py fails when the page and this output differ, so the page
cannot drift from the code.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from keras_vit.checkpoints import catalogue
from keras_vit.variants import BIT_VARIANTS, FAMILIES, VARIANTS
from tests.models.test_bit import TIMM_PARAMS
from tests.models.test_families import FAMILY_PARAMS
from tests.models.test_variants import EXPECTED_PARAMS

PAGE = os.path.join(os.path.dirname(__file__), "..", "docs", "models-and-weights.md")
HYBRIDS = os.path.join(os.path.dirname(__file__), "hybrids_section.md")
PATCH_SIZES = os.path.join(os.path.dirname(__file__), "patch_size_section.md")

INTRO = """# Models and weights

Every architecture of the official release, built from one table
(`keras_vit.VARIANTS`). Build one by its constructor or by name:

```python
import keras_vit

model = keras_vit.ViT_B16()                      # random weights, 224 px, 1000 classes
model = keras_vit.ViT("S/32", image_size=(224, 320), classes=10)
model = keras_vit.ViT("ViT-B_16-gap-norep", include_top=False)  # official spellings work too
```

`weights=` takes a catalogue tag (below), `hf://owner/name` (a transformers
or timm repository on the Hugging Face Hub, through `huggingface_hub`), or the
path of an official `.npz`, a timm `.safetensors` file, a transformers
`save_pretrained` directory (ViT, or ViTHybrid: see the hybrids section; DeiT, DINOv2,
SigLIP and CLIP vision models: see [Families](families.md)), a keras-hub
preset directory (ViT; SigLIP, CLIP and DINOv2: see [Families](families.md)) or an OpenCLIP
Hub folder. `keras_vit.from_pretrained(source)` builds the architecture a source
records (a timm Hub folder, a transformers folder, a keras-hub preset, an OpenCLIP Hub folder,
`hf://owner/name`, a keras_vit `.npz`) without naming it, and refuses, naming the variants whose shapes fit, a
source that records none (a bare `.safetensors`, an official `.npz`). Sharded
weights (`model.safetensors.index.json` beside its shards, as `save_pretrained`
and huggingface_hub's `save_torch_state_dict` write a large model) are read as
one file: pass the folder or the index. A timm state dict does not record its
attention heads: a bare `.safetensors` file is assumed to have the variant's,
while a timm Hub folder's `config.json` names its architecture, whose heads
keras_vit knows (a table in `keras_vit/variants/timm_names.py`; timm's
`vit_base_patch16_gap_224` has 16, the official B/16-gap 12) and checks. timm's architecture names work as
variant names: `keras_vit.ViT("vit_base_patch16_gap_224", weights=folder)`.
`weights="imagenet"`, as keras.applications users write it, is the variant's best
ImageNet-1k classifier in the catalogue: `augreg-in21k-ft-in1k-384` where there is one,
else `imagenet21k+imagenet2012`, else `augreg-in21k-ft-in1k-224`;
`keras_vit.list_models()` gives every variant with its catalogued tags. The pixel
normalisation a source records is carried by the model: a timm folder's `pretrained_cfg`
mean/std (DeiT and DINO use ImageNet's, not [-1, 1]), a transformers
`preprocessor_config.json`, a keras-hub `preprocessor.json`. Build with
`include_preprocessing=True` and the model takes [0, 255] pixels and normalises as its
weights expect; without it, export and `predict` still normalise so, and a warning names
the mean/std for your own input pipeline. A bare `.safetensors` file records none: [-1, 1]
is assumed. Loading is
strict: every key and shape is checked before any weight is assigned, and the
error lists what is missing, unexpected or mis-shaped. A checkpoint at another
resolution has its position embedding resized the official way (class token
kept, corner-aligned bilinear); a head of another size starts at zero, as
official fine-tuning does; `pre_logits` is kept only when the checkpoint's head
is kept.

## Architectures

Parameters at 224 px with a 1000-class head and no `pre_logits` (asserted by
`tests/models/test_variants.py`). "Stride" is pixels per token: image sizes must be
multiples of it.

| variant | constructor | width | depth | MLP | heads | stride | pooling | parameters |
|---|---|---|---|---|---|---|---|---|
"""

FAMILY_TABLE = """
## Families

The families after the paper, one row each of `keras_vit.FAMILIES`; what each changes and
where its weights live: [Families](families.md). timm's architecture names work as variant
names (`keras_vit.ViT("vit_small_patch14_reg4_dinov2")`). Parameters at the default size
with a 1000-class head, equal to timm's (asserted by `tests/models/test_families.py`).
"Prefix" counts the tokens before the patches (class, distillation, registers).

| variant | constructor | width | depth | MLP | heads | patch | image px | prefix | pooling | parameters |
|---|---|---|---|---|---|---|---|---|---|---|
"""

WEIGHTS = """
## Weights

`weights=` tag, per variant. Classes: 21,843 for ImageNet-21k, 1,000 for the
ImageNet-1k fine-tunes. The resolution is the model's default `image_size`
when these weights are used. Files are downloaded once into
`$KERAS_HOME/keras_vit/` (default `~/.keras/keras_vit/`), at a path that
mirrors the URL (`vit_models/imagenet21k/ViT-B_16.npz`), and checked against
their row here (architecture, classes, pre_logits, resolution) on every use.
Set `KERAS_VIT_WEIGHTS_URL` to replace `https://storage.googleapis.com/vit_models`
with a mirror; a user name and password in it (`https://user:password@host/path`)
are sent as HTTP basic auth and shown as `***` in every message. A download is
bounded: it writes at most the size in the table plus 2% and 1 MiB (4 GiB where
the table gives none), and is refused when the connection and headers take more
than 10 s or the body brings less than 64 KiB in any 10 s.

| variant | tag | classes | resolution | pre_logits | size (MiB) | file |
|---|---|---|---|---|---|---|
"""

HUB = """
### Hugging Face Hub

`weights="hf://owner/name"` (install the `hub` extra). Listed here: the
google/vit-* family (the official ImageNet-21k models, headless with their
pre-trained `pre_logits` as transformers' pooler, and their ImageNet-1k
fine-tunes at 224 and 384) and timm's AugReg ViT-Ti/S/B/L (ImageNet-21k,
and fine-tuned on ImageNet-1k at 224 and 384, plus B/16's augreg2), the
weights most ViT users start from. Any other transformers or timm ViT
repository loads too; these rows add the check of each file against its row.
Files stay in huggingface_hub's cache (`HF_HOME`, `HF_HUB_OFFLINE` respected);
only `config.json` and `*.safetensors` are fetched. A model built from them
computes what their library computes: exact-erf GELU, and transformers'
LayerNorm epsilon of 1e-12 (`approximate_gelu=` and `layer_norm_epsilon=`
override).

| variant | `weights=` | format | classes | resolution | pre_logits |
|---|---|---|---|---|---|
"""

FAMILY_HUB = """
### Hugging Face Hub: the families

timm's releases of every row of [Families](families.md), as its registry records them
(`timm.models.get_pretrained_cfg`: the repository, classes, input size, mean/std and
licence; `tests/checkpoints/test_family_catalogue.py` asserts each row below against it):
DeiT and DeiT III (ImageNet-1k, and DeiT III's ImageNet-21k fine-tunes, at 224 and 384),
DINOv2 with and without registers (LVD-142M, headless, 518 px), SigLIP and SigLIP 2's
fixed-resolution image towers (WebLI, headless, at each resolution timm registers; one
So400m fine-tuned on ImageNet-1k), CLIP (OpenAI's, and the QuickGELU-trained LAION-400M,
MetaCLIP and DFN ones: the head is the image projection) and FlexiViT (ImageNet-1k and
-21k, 240 px). Build the row and name the repository, or let `from_pretrained` read the row
from the catalogue:

<!-- no-test: downloads from the Hub; tests/checkpoints/test_family_catalogue.py checks one -->
```python
model = keras_vit.DINOv2_S14_reg4(weights="hf://timm/vit_small_patch14_reg4_dinov2.lvd142m",
                                  include_top=False)                 # features, (batch, 384)
model = keras_vit.from_pretrained("hf://timm/vit_base_patch16_clip_224.openai")  # CLIP-B/16
```

A headless file loads with `include_top=False` (the family's features), or with a new head
that starts at zero. timm's CLIP repositories are named by its GELU architecture
(`vit_base_patch16_clip_224.openai`); the weights are QuickGELU's, as timm's
`vit_base_patch16_clip_quickgelu_224.openai` loads them, and so is the CLIP row; of a
catalogued repository only the JSON files and `model.safetensors` are fetched (timm's CLIP
repositories also hold OpenCLIP's two-tower `open_clip_model.safetensors`). timm's
So400m/14 at 384 px has a 27 x 27 grid, so its row says 378 (see Families). The licence is
each release's as timm records it: the MetaCLIP weights are `cc-by-nc-4.0` (not for
commercial use), DFN's `apple-ascl` (Apple's sample code licence). As for the rows above,
the model computes timm's numerics and normalises as the family does (ImageNet's mean/std
for DeiT and DINOv2, OpenAI's for CLIP, [-1, 1] for SigLIP and FlexiViT).

| variant | `weights=` | classes | resolution | licence |
|---|---|---|---|---|
"""

OFFLINE = """
### Without network access

The official files live in the public bucket `gs://vit_models`. When a
download fails, keras_vit stops within seconds and names the URL and the cache
path in one line: fetch the file elsewhere, copy it to that path, and call
again, set `KERAS_VIT_WEIGHTS_URL` to a mirror, or pass the file's path as
`weights=`. Files of the old flat cache layout (`keras_vit/ViT-B_16.npz`,
which two tags shared) are never used.

No published checksums exist for these files. keras_vit records a file's
sha256 the first time it uses it (in `$KERAS_HOME/keras_vit/checksums.json`)
and refuses it if it changes later; pin a known hash yourself with
`keras_vit.pin_checksum(key, sha256)`, the key being the file's path inside
the cache (`Checkpoint.cache_key`, e.g. `vit_models/imagenet21k/ViT-B_16.npz`).

The numbers a model built from these files computes are checked against timm
loading the same file (`tests/checkpoints/test_official_parity.py`), on random weights written
in the official layout, since the real files cannot be downloaded in CI.
"""


BIT = """
## BiT ResNetV2, the CNN baseline

The paper's convolutional baseline: BiT (Kolesnikov et al., "Big Transfer"), a
pre-activation ResNetV2 with weight-standardised convolutions and GroupNorm (32
groups), its 7x7/2 stem with a 3x3/2 max pool, and a head of GroupNorm, ReLU,
global mean and a 1x1 convolution. It takes the ViTs' keras.applications
arguments (`weights`, `include_top`, `classes`, `image_size` / `input_shape`,
`pooling`, `include_preprocessing`, `classifier_activation`), any image size
(224 by default; every stride-2 step gives ceil(size / 2)), and [-1, 1] pixels,
as the ViTs. Where its numbers differ from the hybrids' trunk (unit order,
padding, standardisation and GroupNorm epsilons) is one table, in
`keras_vit/layers/resnet.py`.

```python
model = keras_vit.BiT_R50x1(classes=5)          # random weights, 224 px
features = keras_vit.BiT("R50x1", include_top=False, pooling="avg")  # (batch, 2048)
# keras_vit.BiT_R50x1(weights="bit-m", classes=5): ImageNet-21k weights, a zero 5-class head
```

On the command line: `keras-vit train --model BiT-R50x1 ...` (and `export`,
`predict`). Parameters with a 1000-class head, equal to timm's `resnetv2_*_bit`
(asserted by `tests/models/test_bit.py`):

| model | constructor | depth | width | units per stage | features | parameters |
|---|---|---|---|---|---|---|
"""

BIT_WEIGHTS = """
Weights: big_transfer's release files, `weights="bit-m"` (ImageNet-21k, 21,843
classes), `"bit-s"` (ImageNet-1k, 1,000) and `"bit-m-ilsvrc2012"` (ImageNet-21k
fine-tuned on ImageNet-1k, 1,000; also `weights="imagenet"`), or the path of
such a file. They are read by the same strict loader as the ViT files (the
`bit` format: keys `resnet/root_block/...`, `resnet/block{s}/unit{uu}/...`,
`resnet/group_norm/...`, `resnet/head/conv2d/...`), cached at
`$KERAS_HOME/keras_vit/bit_models/<file>`, checked against their row
(architecture, classes) on every use, and their sha256 recorded on first use
(no checksums are published). No sizes are published either: the catalogue
gives each file the size of its float32 arrays, which bounds its download as the
ViT files' sizes do. They live in `gs://bit_models`; `KERAS_VIT_WEIGHTS_URL` stands for that
bucket too (the file names never clash with the ViT files', so one mirror folder
can hold both). A ViT file given to a BiT, or a BiT file to a ViT, is refused in
one line naming what the file is.

| model | `bit-m` | `bit-s` | `bit-m-ilsvrc2012` |
|---|---|---|---|
"""


def constructor_name(variant):
    if variant.constructor_name:
        return f"`{variant.constructor_name}`"
    return f'`ViT("{variant.short_name}")`'


def render():
    lines = [INTRO]
    for v in VARIANTS.values():
        count = EXPECTED_PARAMS.get(v.name)
        count = f"{count:,}" if count else "see hybrids"
        pooling = "class token" if v.classifier == "token" else "mean (gap)"
        lines.append(f"| {v.name} | {constructor_name(v)} | {v.width} | {v.depth} | {v.mlp_dim} | "
                     f"{v.heads} | {v.total_stride} | {pooling} | {count} |\n")
    lines.append(FAMILY_TABLE)
    for v in FAMILIES.values():
        pooling = {"token": "class token", "gap": "mean (gap)", "map": "MAP head"}[v.classifier]
        pooling += " + distillation" if v.distilled else ""
        mlp = f"{v.mlp_dim} (SwiGLU)" if v.feed_forward.startswith("swiglu") else str(v.mlp_dim)
        lines.append(f"| {v.name} | `{v.constructor_name}` | {v.width} | {v.depth} | {mlp} | "
                     f"{v.heads} | {v.patch_size} | {v.image_size} | {v.num_prefix_tokens} | "
                     f"{pooling} | {FAMILY_PARAMS[v.name]:,} |\n")
    lines.append(WEIGHTS)
    for c in catalogue():
        if c.hub or c.format == "bit":
            continue
        size = f"{c.size_mib:g}" if c.size_mib else "-"
        lines.append(f"| {c.variant} | `{c.tag}` | {c.classes:,} | {c.resolution} | "
                     f"{c.representation_size or '-'} | {size} | [{c.filename}]({c.url}) |\n")
    lines.append(HUB)
    for c in catalogue():
        if c.hub and c.variant not in FAMILIES:
            classes = f"{c.classes:,}" if c.classes else "none (headless)"
            lines.append(f"| {c.variant} | [`{c.tag}`](https://huggingface.co/{c.hub}) | {c.format} | "
                         f"{classes} | {c.resolution} | {c.representation_size or '-'} |\n")
    lines.append(FAMILY_HUB)
    for c in catalogue():
        if c.variant in FAMILIES:
            classes = f"{c.classes:,}" if c.classes else "none (headless)"
            lines.append(f"| {c.variant} | [`{c.tag}`](https://huggingface.co/{c.hub}) | "
                         f"{classes} | {c.resolution} | {c.license or '-'} |\n")
    lines.append(OFFLINE)
    with open(PATCH_SIZES) as f:  # hand-written prose on patch and image sizes
        lines.append("\n" + f.read())
    lines.append(BIT)
    for v in BIT_VARIANTS.values():
        units = ", ".join(map(str, v.units))
        lines.append(f"| {v.name} | `{v.constructor_name}` | {v.depth} | x{v.width} | {units} | "
                     f"{v.channels:,} | {TIMM_PARAMS[v.name][1]:,} |\n")
    lines.append(BIT_WEIGHTS)
    for v in BIT_VARIANTS.values():
        files = {c.tag: f"[{c.filename}]({c.url})" for c in catalogue() if c.variant == v.name}
        lines.append(f"| {v.name} | {files['bit-m']} | {files['bit-s']} | "
                     f"{files['bit-m-ilsvrc2012']} |\n")
    with open(HYBRIDS) as f:  # hand-written prose on the hybrids, kept beside this script
        lines.append("\n" + f.read())
    return "".join(lines)


if __name__ == "__main__":
    with open(PAGE, "w") as f:
        f.write(render())
    print("wrote", os.path.normpath(PAGE))
