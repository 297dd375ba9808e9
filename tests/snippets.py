"""Code blocks of the Markdown docs, and a smaller stand-in for `keras_vit.ViT` to run them.

A block is skipped when the line before its opening fence is
`<!-- no-test: REASON -->`; the reason is shown by the tests.
"""

import dataclasses
import pathlib
import re
import shlex

from keras_vit import checkpoints, variants

FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!--\s*no-test:\s*(.*?)\s*-->\s*$")


@dataclasses.dataclass
class Block:
    page: str        # path relative to the repository root
    line: int        # 1-based line of the opening fence
    language: str
    code: str
    skip_reason: str | None

    @property
    def name(self):
        return f"{self.page}:{self.line}"


def read_blocks(path, root):
    """Every fenced block of a Markdown file, in order."""
    lines = pathlib.Path(path).read_text().splitlines()
    page = str(pathlib.Path(path).relative_to(root))
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        before = lines[start - 1] if start else ""
        if not before.strip() and start >= 2:
            before = lines[start - 2]
        skip = SKIP.match(before)
        blocks.append(Block(page, start + 1, match.group(1), "\n".join(body) + "\n",
                            skip.group(1) if skip else None))
        i += 1
    return blocks


def shell_commands(code):
    """The commands of a bash block: continuation lines joined, comments dropped."""
    joined = code.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            commands.append(shlex.split(line, comments=True))
    return commands


def tiny_variant(variant, image_size):
    """The same kind of ViT (pooling, hybrid stride) with one narrow block (a block's code
    is the same at any depth, and each block costs every fit, predict and export its tracing).

    Plain variants also get twice the patch size where `image_size` allows it:
    a quarter of the tokens keeps the docs' 384 x 512 examples fast (the
    position-embedding plot draws one panel per patch).
    """
    stages, patch = variant.resnet_stages, variant.patch_size
    if stages:
        stages = tuple(1 for _ in stages)  # one unit per stage keeps the ResNet's stride
    elif all(size % (2 * patch) == 0 for size in image_size):
        patch = 2 * patch
    return dataclasses.replace(variant, width=32, depth=1, mlp_dim=64, heads=2,
                               patch_size=patch, resnet_stages=stages)


def make_smoke_vit(real_vit):
    """A `keras_vit.ViT` that builds a tiny model where the real one would load weights.

    A catalogue tag gives the model the checkpoint's class count and resolution,
    as the real call does, without downloading anything; other arguments are
    passed through, so a wrong argument still fails as it would for the user.
    """

    def smoke_vit(variant, weights=None, image_size=None, classes=None, **kwargs):
        variant = variants.get_variant(variant)
        if weights is not None:
            if str(weights).endswith(".npz"):
                raise AssertionError(f"a docs block loads the file {weights}; mark it no-test")
            entry = checkpoints.find_checkpoint(variant, weights)
            image_size = image_size or entry.resolution
            if kwargs.get("include_top", True):  # as the real call: a headless model has no classes
                classes = classes or entry.classes
        size = image_size or variant.image_size  # the family's default (DINOv2: 518)
        size = (size, size) if isinstance(size, int) else tuple(size)
        return real_vit(tiny_variant(variant, size), weights=None, image_size=image_size,
                        classes=classes, **kwargs)

    return smoke_vit


def make_smoke_resnet(real_resnet):
    """A `keras_vit.ResNetV2` that builds one unit per stage where the real one loads weights."""

    def smoke_resnet(variant="R50+ViT-B_16", weights=None, image_size=None, **kwargs):
        variant = variants.get_variant(variant)
        if weights is not None:
            checkpoints.find_checkpoint(variant, weights)  # an unknown tag fails as for the user
        return real_resnet(tiny_variant(variant, (224, 224)), weights=None,
                           image_size=image_size, **kwargs)

    return smoke_resnet
