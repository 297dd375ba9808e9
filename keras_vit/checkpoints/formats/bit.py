"""BiT's `.npz` release files (big_transfer: `BiT-M-R50x1.npz`, `BiT-S-R50x1.npz`, ...).

The same container as the official ViT files (`npz.py` reads it), with the
big_transfer layout: `resnet/root_block/standardized_conv2d/kernel`,
`resnet/block{s}/unit{uu}/{a,b,c}/...`, `resnet/group_norm/*`,
`resnet/head/conv2d/*` (`keras_vit.checkpoints.layout.bit_rows` spells it).
Recognised by its root kernel's member name, so a BiT file given to a ViT (or
a ViT file to a BiT) is refused naming what it is, before anything is read.
"""

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import OFFICIAL_NORMALIZATION, CheckpointFormat, CheckpointInfo
from keras_vit.checkpoints.formats.npz import FORMAT as NPZ
from keras_vit.checkpoints.formats.npz import NpzFile, NpzReader
from keras_vit.checkpoints.layout import BIT_ROOT_KEY

__all__ = ["FORMAT"]

_ROOT_BLOCK = BIT_ROOT_KEY.rsplit("/", 2)[0]  # resnet/root_block


class BiTReader(NpzReader):
    """An `NpzReader` whose keys are big_transfer's, as stored."""

    def __init__(self, source):
        super().__init__(source)
        self.format = FORMAT

    def info(self):
        # The release files are fed [-1, 1], as the ViT files (big_transfer's mean = std = 0.5).
        return CheckpointInfo({k: h.shape for k, h in self.headers().items()}, format="bit",
                              normalization=OFFICIAL_NORMALIZATION)


def _recognises(source):
    if not NPZ.recognises(source):
        return False
    try:  # opened once: the reader reads the same open file
        npz = source.once("npz", lambda: NpzFile(source.path))
    except CheckpointError:
        return False  # not a readable npz: the npz format says why
    return BIT_ROOT_KEY in npz.headers


FORMAT = CheckpointFormat(
    name="bit", description=f"BiT .npz (big_transfer's release: {_ROOT_BLOCK}/...)",
    recognises=_recognises, open=BiTReader,
    numerics=(None, None))  # no GELU, no LayerNorm: BiT's numbers are fixed (layers/resnet.py)
