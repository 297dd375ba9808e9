"""A model's preprocessing of record: how an image of any size becomes the model's pixels,
as the weights' source resizes it, carried by the model beside its normalisation.

`Preprocessing` is one frozen record: the resize (`"stretch"`: both sides to the size /
crop_pct, timm's "squash"; `"crop"`: the short side to size / crop_pct, the long side in
proportion, timm's "center", the image processors' `shortest_edge`, open_clip's "shortest";
`"aspect_crop"`: the largest centred crop of the model's aspect ratio, then resized to the
size, Keras' `Resizing(crop_to_aspect_ratio=True)` as keras-hub's `ImageConverter` runs it),
then the centre `size` crop, its interpolation and antialiasing, and how the crop's offset is
rounded (torchvision's `CenterCrop` rounds half to even, transformers' `center_crop` floors).
The official models keep `OFFICIAL_PREPROCESSING`: the whole image stretched, bilinear,
without antialiasing (`keras_vit.preprocessing.resize_image`, the official fine-tuning resize).

timm, transformers and open_clip resize with Pillow or torch (antialiased) and hand the model
uint8 pixels: a "stretch" or "crop" record that antialiases resizes with TensorFlow's
antialiased kernels (Pillow's and torch's: Keys cubic a = -0.5 or the triangle, widened by
the scale when shrinking) and rounds to integers as they do. keras-hub resizes in float with
the same TensorFlow kernels and neither rounds nor clips: an "aspect_crop" record does the
same. The model records the record in its patch embedding's config
(`input_preprocessing`), so a saved `.keras` keeps it.
"""

import dataclasses
import math

from keras_vit.errors import ArgumentError
from keras_vit.layer_names import EMBEDDING

__all__ = ["Preprocessing", "OFFICIAL_PREPROCESSING", "RESIZE_MODES", "INTERPOLATIONS",
           "model_preprocessing", "resized_preprocessing", "scaled_size", "crop_offset",
           "resize_to_model", "stretch_to", "preprocess_for_model", "describe_preprocessing"]

RESIZE_MODES = ("stretch", "crop", "aspect_crop")
INTERPOLATIONS = ("bilinear", "bicubic")
CROP_ROUNDINGS = ("round", "floor")


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How an image is resized to a model's size; mean/std are the normalisation's
    (keras_vit.normalization). Invalid values raise `ArgumentError` in one line."""

    resize: str = "stretch"
    interpolation: str = "bilinear"
    antialias: bool = False
    crop_pct: float = 1.0  # the fraction of the resized image the centre crop keeps
    crop_rounding: str = "round"

    def __post_init__(self):
        for name, value, allowed in (("resize", self.resize, RESIZE_MODES),
                                     ("interpolation", self.interpolation, INTERPOLATIONS),
                                     ("crop_rounding", self.crop_rounding, CROP_ROUNDINGS)):
            if value not in allowed:
                raise ArgumentError(f"preprocessing {name} must be one of {', '.join(allowed)}, "
                                    f"got {str(value)[:40]!r}.")
        if not isinstance(self.antialias, bool):
            raise ArgumentError(f"preprocessing antialias must be true or false, got "
                                f"{str(self.antialias)[:40]!r}.")
        pct = self.crop_pct
        if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0.1 <= pct <= 1.0:
            raise ArgumentError(f"preprocessing crop_pct must be a number from 0.1 to 1, got "
                                f"{str(pct)[:40]!r}.")
        if self.resize == "aspect_crop" and pct != 1.0:
            raise ArgumentError(f"preprocessing crop_pct must be 1 for the aspect_crop resize "
                                f"(it keeps the largest crop of the model's shape), got {pct!r}.")
        object.__setattr__(self, "crop_pct", float(pct))

    def to_config(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, config):
        """The record a config dict holds (a saved model's, a catalogue entry's)."""
        if not isinstance(config, dict):
            raise ArgumentError(f"a preprocessing record is a mapping, got {type(config).__name__}.")
        unknown = sorted(set(config) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ArgumentError(f"a preprocessing record has no field {unknown[0]!r}.")
        return cls(**config)


OFFICIAL_PREPROCESSING = Preprocessing()


def model_preprocessing(model):
    """The record `model` carries (its patch embedding's), else the official one (a BiT, a
    model built before records, or one whose weights' source records none)."""
    try:
        recorded = getattr(model.get_layer(EMBEDDING), "input_preprocessing", None)
    except (ValueError, AttributeError):  # Keras' answer for a missing layer; a stand-in
        recorded = None
    return OFFICIAL_PREPROCESSING if recorded is None else Preprocessing.from_config(recorded)


def resized_preprocessing(record, resize=None):
    """`record` with the resize a caller asks for (`--resize`, `resize=`): "stretch" takes the
    whole image (crop_pct 1), "crop" the short side's centre at the record's crop_pct; the
    interpolation and antialiasing stay the record's. None: the record as it is."""
    if resize is None or resize == record.resize:
        return record
    if resize not in RESIZE_MODES:
        raise ArgumentError(f"resize must be one of {', '.join(RESIZE_MODES)} or None, got "
                            f"{str(resize)[:40]!r}.")
    return dataclasses.replace(record, resize=resize,
                               crop_pct=record.crop_pct if resize == "crop" else 1.0)


def scaled_size(height, width, size, record):
    """(height, width) an image of `height` x `width` is resized to before the centre crop to
    `size` (height, width): timm's `floor(size / crop_pct)`, torchvision's and transformers'
    `int(short_size * long / short)` for the long side. Python ints."""
    # A processor's crop_size / shortest_edge ratio divides back to its integer only up to
    # rounding (224 / (224 / 256) = 255.99999999999997): a millionth decides for it.
    target = [math.floor(s / record.crop_pct + 1e-6) for s in size]
    if record.resize == "stretch" or target[0] != target[1]:
        return tuple(target)
    short = target[0]
    if height <= width:
        return short, int(short * width / height)
    return int(short * height / width), short


def crop_offset(extent, crop, rounding):
    """The first row (column) of a centred `crop` of `extent`: torchvision rounds half to even
    (`int(round(x))`), transformers floors."""
    half = (extent - crop) / 2.0
    return int(round(half)) if rounding == "round" else int(half)


def resize_to_model(image, size, record):
    """`(H, W, C)` pixels in [0, 255] (a TensorFlow tensor or NumPy) -> float32 `(*size, C)` as
    `record` says; works eagerly, in `tf.data` and in an exported graph."""
    import tensorflow as tf

    size = tuple(int(s) for s in size)
    if record == OFFICIAL_PREPROCESSING:
        return tf.image.resize(image, size, method="bilinear", antialias=False)
    image = tf.convert_to_tensor(image)
    if record.resize == "aspect_crop":
        return tf.ensure_shape(_aspect_crop(tf.cast(image, tf.float32), size, record),
                               (*size, None))
    scaled = _scaled_size(tf.shape(image), size, record)
    resized = stretch_to(image, scaled, record)
    offsets = [_crop_offset(scaled[axis], size[axis], record.crop_rounding) for axis in (0, 1)]
    cropped = resized[offsets[0]:offsets[0] + size[0], offsets[1]:offsets[1] + size[1]]
    return tf.ensure_shape(cropped, (*size, None))


def stretch_to(image, size, record):
    """The whole `(H, W, C)` image to `size` (a dynamic size too: NaFlex's grid of each image)
    in the record's interpolation and antialiasing: rounded and clipped to [0, 255] where the
    record's source hands the model uint8 pixels (an antialiasing "stretch" or "crop" record,
    as Pillow and torchvision do), else in float as TensorFlow resizes."""
    import tensorflow as tf

    resized = tf.image.resize(tf.cast(image, tf.float32), size, method=record.interpolation,
                              antialias=record.antialias)
    if record.resize == "aspect_crop":  # Keras' Resizing: float, neither rounded nor clipped
        return resized
    if record.antialias:  # Pillow and torchvision hand the model uint8 pixels
        resized = tf.round(resized)
    return tf.clip_by_value(resized, 0.0, 255.0)


def _aspect_crop(image, size, record):
    """Keras' `Resizing(crop_to_aspect_ratio=True)` on TensorFlow (keras-hub's ImageConverter):
    the crop's sides and offsets truncated from float32 as Keras computes them, then one
    resize in float, neither rounded nor clipped."""
    import tensorflow as tf

    shape = tf.shape(image)
    height, width = shape[0], shape[1]

    def side(extent, other, target, other_target):  # int(other * target / other_target)
        wanted = tf.cast(tf.cast(other * target, tf.float32) / other_target, tf.int32)
        return tf.maximum(tf.minimum(extent, wanted), 1)

    crop_height, crop_width = side(height, width, *size), side(width, height, *size[::-1])
    top = tf.cast(tf.cast(height - crop_height, tf.float32) / 2, tf.int32)
    left = tf.cast(tf.cast(width - crop_width, tf.float32) / 2, tf.int32)
    return stretch_to(image[top:top + crop_height, left:left + crop_width], size, record)


def _scaled_size(shape, size, record):
    """`scaled_size` in TensorFlow ops on an image's dynamic shape: int32 (height, width)."""
    import tensorflow as tf

    target = scaled_size(1, 1, size, dataclasses.replace(record, resize="stretch"))
    if record.resize == "stretch" or target[0] != target[1]:
        return tf.constant(target, tf.int32)
    height, width = tf.cast(shape[0], tf.int64), tf.cast(shape[1], tf.int64)
    short = target[0]

    def long(side, other):  # int(short * side / other): an exact product, one division
        return tf.cast(tf.floor(tf.cast(short * side, tf.float64) / tf.cast(other, tf.float64)),
                       tf.int32)

    return tf.where(height <= width, tf.stack([short, long(width, height)]),
                    tf.stack([long(height, width), short]))


def _crop_offset(extent, crop, rounding):
    """`crop_offset` on a tensor extent: round half to even, or floor."""
    import tensorflow as tf

    half = tf.cast(extent - crop, tf.float64) / 2.0
    return tf.cast(tf.math.round(half) if rounding == "round" else tf.floor(half), tf.int32)


def preprocess_for_model(images, model, resize=None):
    """One image `(H, W, C)` or a batch `(N, H, W, C)` of pixels in [0, 255], any size (NumPy,
    a TensorFlow tensor, or a list of images of different sizes) -> `model`'s input: resized as
    its record says (`resize` overrides: `resized_preprocessing`), then normalised as its
    weights expect (`keras_vit.normalization.model_input`). NumPy in, NumPy out."""
    import numpy as np
    import tensorflow as tf

    from keras_vit.models.image_size import image_size, refuse_naflex
    from keras_vit.normalization import model_input

    refuse_naflex(model, "preprocessing to its input")  # predict_images packs
    record = resized_preprocessing(model_preprocessing(model), resize)
    size = image_size(model)
    as_numpy = not tf.is_tensor(images)
    one = not isinstance(images, (list, tuple)) and len(images.shape) == 3
    batch = [images] if one else images
    pixels = tf.stack([resize_to_model(image, size, record) for image in batch])
    inputs = model_input(model)(pixels[0] if one else pixels)
    return np.asarray(inputs, np.float32) if as_numpy else inputs


def describe_preprocessing(record):
    """One phrase: "short side to 248 / crop 224, bicubic, antialiased" style."""
    smooth = f"{record.interpolation}{', antialiased' if record.antialias else ''}"
    if record.resize == "stretch" and record.crop_pct == 1.0:
        return f"the whole image stretched to the model's size ({smooth})"
    if record.resize == "aspect_crop":
        return f"the largest centred crop of the model's shape, resized to its size ({smooth})"
    what = "both sides" if record.resize == "stretch" else "the short side"
    return (f"{what} resized to the model's size / {record.crop_pct:g}, then its centre "
            f"cropped ({smooth})")
