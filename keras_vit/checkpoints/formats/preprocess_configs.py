"""Each library's record of how it preprocesses an image, read into a `Preprocessing` record
(keras_vit.preprocessing_record): timm's pretrained_cfg, a transformers image processor's
preprocessor_config.json, open_clip's preprocess_cfg, a keras-hub preset's image converter.
Every value is checked; a value keras_vit cannot compute is refused in one line naming the
file and the field.

timm, transformers and open_clip resize with Pillow or torch, antialiased; torchvision's
`CenterCrop` (timm, open_clip) rounds the crop's offset half to even, transformers'
`center_crop` floors it. keras-hub resizes with Keras' `Resizing` layer, in float.
"""

import numbers

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.errors import ArgumentError

__all__ = ["timm_preprocessing", "processor_preprocessing", "open_clip_preprocessing",
           "keras_hub_preprocessing", "PIL_RESAMPLE"]

# timm's resolve_data_config defaults for what a pretrained_cfg leaves out.
TIMM_CROP_PCT, TIMM_INTERPOLATION = 0.875, "bicubic"
_TIMM_CROP_MODES = {"center": "crop", "squash": "stretch"}
# PIL's resampling filters by number, as a processor saves `resample`: 2 bilinear, 3 bicubic.
PIL_RESAMPLE = {2: "bilinear", 3: "bicubic"}
_OPEN_CLIP_RESIZE_MODES = {"shortest": "crop", "squash": "stretch"}


def _record(path, antialias=True, **fields):
    from keras_vit.preprocessing_record import Preprocessing

    try:
        return Preprocessing(antialias=antialias, **fields)
    except ArgumentError as error:
        raise CheckpointError(f"{path}: {error}") from None


def _choice(path, field, value, table):
    if not isinstance(value, (str, int)) or isinstance(value, bool) or value not in table:
        known = ", ".join(key if isinstance(key, str) else f"{key} ({name})"
                          for key, name in table.items())
        shown = value if isinstance(value, int) and not isinstance(value, bool) else \
            repr(str(value)[:40])
        raise CheckpointError(f"{path}: {field} {shown} is not one keras_vit computes ({known}).")
    return table[value]


def _number(path, field, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise CheckpointError(f"{path}: {field} {str(value)[:40]!r} is not a number.")
    return float(value)


def timm_preprocessing(path, pretrained_cfg):
    """The record of timm's eval transform (`resolve_data_config` + `create_transform`) for a
    config.json's pretrained_cfg (timm's defaults for the fields it leaves out)."""
    cfg = pretrained_cfg or {}
    crop_pct = cfg.get("crop_pct")
    crop_pct = TIMM_CROP_PCT if crop_pct is None else _number(path, "crop_pct", crop_pct)
    interpolation = cfg.get("interpolation") or TIMM_INTERPOLATION
    return _record(path, resize=_choice(path, "crop_mode", cfg.get("crop_mode") or "center",
                                        _TIMM_CROP_MODES),
                   crop_pct=crop_pct,
                   interpolation=_choice(path, "interpolation", interpolation,
                                         {i: i for i in ("bilinear", "bicubic")}))


def processor_preprocessing(path, config):
    """The record of a transformers image processor's saved preprocessor_config.json: `size`
    {height, width} (stretched, DeiT's 256 x 256) or {shortest_edge} (the short side), then
    the centre `crop_size` when `do_center_crop`; `resample` as PIL numbers it (bilinear by
    default)."""
    interpolation = _choice(path, "resample", config.get("resample", 2), PIL_RESAMPLE)
    size = config.get("size") or {}
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = {"height": size, "width": size}  # the older processors' one number
    if not isinstance(size, dict):
        raise CheckpointError(f"{path}: size {str(size)[:40]!r} is not an object.")
    short = size.get("shortest_edge")
    resize = "stretch" if short is None else "crop"
    if short is None and size.get("height") != size.get("width") and size.get("width") is not None:
        raise CheckpointError(f"{path}: size {size} is not square; keras_vit stretches to a "
                              "square model size.")
    resized = _number(path, "size", short if short is not None else size.get("height", 224))
    crop = config.get("crop_size") if config.get("do_center_crop", False) else None
    crop = resized if crop is None else _number(
        path, "crop_size", crop.get("height") if isinstance(crop, dict) else crop)
    if not 0 < crop <= resized:
        raise CheckpointError(f"{path}: crop_size {crop:g} is not a crop of the {resized:g} "
                              "pixels it resizes to.")
    # The crop keeps crop / resized of the resized image, whatever the model's size.
    return _record(path, resize=resize, crop_pct=crop / resized, interpolation=interpolation,
                   crop_rounding="floor")


def open_clip_preprocessing(path, preprocess_cfg):
    """The record of open_clip's `image_transform(..., is_train=False)` for a config's
    preprocess_cfg: "shortest" resizes the short side and crops the centre, "squash"
    stretches; bicubic unless it says otherwise."""
    cfg = preprocess_cfg or {}
    return _record(path, resize=_choice(path, "resize_mode", cfg.get("resize_mode") or "shortest",
                                        _OPEN_CLIP_RESIZE_MODES),
                   interpolation=_choice(path, "interpolation",
                                         cfg.get("interpolation") or "bicubic",
                                         {i: i for i in ("bilinear", "bicubic")}))


def keras_hub_preprocessing(path, converter):
    """The record of a keras-hub `ImageConverter`'s saved config (preprocessor.json's
    "image_converter"): `crop_to_aspect_ratio` (keras-hub's default, True) crops the largest
    centred region of the model's shape, else the image is stretched; `interpolation` and
    `antialias` as Keras' `Resizing` takes them. Padding to the aspect ratio is refused."""
    if converter.get("pad_to_aspect_ratio"):
        raise CheckpointError(f"{path}: pad_to_aspect_ratio is not a resize keras_vit computes "
                              "(it crops to the aspect ratio or stretches).")
    crop = converter.get("crop_to_aspect_ratio", True)
    antialias = converter.get("antialias", False)
    for field, value in (("crop_to_aspect_ratio", crop), ("antialias", antialias)):
        if not isinstance(value, bool):
            raise CheckpointError(f"{path}: {field} {str(value)[:40]!r} is not true or false.")
    if antialias and not crop:  # keras_vit rounds a stretch that antialiases, as Pillow does
        raise CheckpointError(f"{path}: an antialiased stretch without rounding is not a resize "
                              "keras_vit computes (crop_to_aspect_ratio false, antialias true).")
    interpolation = _choice(path, "interpolation", converter.get("interpolation", "bilinear"),
                            {i: i for i in ("bilinear", "bicubic")})
    return _record(path, antialias=antialias, interpolation=interpolation,
                   resize="aspect_crop" if crop else "stretch")
