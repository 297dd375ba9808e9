"""The one image path: decode, bilinear resize, [-1, 1] scaling.

Every way into a model goes through these functions: `keras-vit predict` and
`analyze` (`load_image`), the SavedModel's `serve_bytes` signature
(`decode_images`), and the image-folder dataset (`decode_image`, then
`resize_image` in its pipeline). So one file gives one array wherever it
enters. TensorFlow (for its image decoders) is imported when an image is
decoded, not with this module.
"""

import os
import re

import numpy as np
from keras import ops

__all__ = ["preprocess_input", "IMAGE_EXTENSIONS", "IMAGE_FORMATS", "decode_image",
           "resize_image", "decode_images", "load_image", "image_paths", "not_an_image"]

# What tf.io.decode_image reads; GIFs give their first frame.
IMAGE_FORMATS = "JPEG, PNG, GIF, BMP or WebP"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")


def preprocess_input(images):
    """Maps pixel values in [0, 255] to [-1, 1], as the official models expect.

    Accepts NumPy arrays or tensors of any shape (channels last); returns
    float32 (a NumPy array for NumPy input). TensorFlow tensors stay TensorFlow
    tensors whatever the Keras backend, so this works inside a `tf.data` map.
    """
    if isinstance(images, (np.ndarray, list, tuple, int, float)):
        return np.asarray(images, dtype=np.float32) / 127.5 - 1.0
    if type(images).__module__.startswith("tensorflow"):
        import tensorflow as tf

        return tf.cast(images, tf.float32) / 127.5 - 1.0
    return ops.cast(images, "float32") / 127.5 - 1.0


def decode_image(data, channels=3):
    """Encoded image bytes (a scalar string tensor) -> uint8 `(H, W, channels)`.

    Grey, palette and RGBA images become `channels` channels (3: RGB, 1: grey).
    Raises `tf.errors.InvalidArgumentError` for bytes that are not such an image.
    """
    import tensorflow as tf

    return tf.io.decode_image(data, channels=channels, expand_animations=False)


def resize_image(image, size):
    """`(H, W, C)` or `(batch, H, W, C)` pixels -> float32 at `size` (height, width).

    Bilinear, without antialiasing, as the official ViT input pipeline does.
    """
    import tensorflow as tf

    return tf.image.resize(image, tuple(size), method="bilinear", antialias=False)


def decode_images(image_bytes, image_size, channels=3):
    """A string tensor `(batch,)` of encoded images -> float32 `(batch, H, W, channels)` pixels
    in [0, 255] at `image_size`; images of any size."""
    import tensorflow as tf

    image_size = tuple(image_size)
    return tf.map_fn(lambda data: resize_image(decode_image(data, channels), image_size),
                     image_bytes,
                     fn_output_signature=tf.TensorSpec((*image_size, channels), tf.float32))


def load_image(path, image_size, channels=3):
    """An image file -> float32 `(H, W, channels)` NumPy pixels in [0, 255] at `image_size`.

    Raises `ValueError` naming the file when it is missing or not an image.
    """
    import tensorflow as tf

    if not os.path.isfile(path):
        raise ValueError(f"No image file at {path}.")
    with open(path, "rb") as f:
        data = f.read()
    try:
        image = decode_image(tf.constant(data), channels)
    except tf.errors.InvalidArgumentError as error:
        raise not_an_image(path, error) from None
    return resize_image(image, image_size).numpy()


def not_an_image(path, error):
    """The `ValueError` for a file TensorFlow failed to decode, with its one useful line."""
    return ValueError(f"{path} is not a {IMAGE_FORMATS} image ({_reason(error.message)}).")


def image_paths(entries):
    """Image files named by `entries`: files as given, folders by their image files, sorted."""
    paths = []
    for entry in entries:
        if os.path.isdir(entry):
            paths += sorted(os.path.join(entry, name) for name in os.listdir(entry)
                            if name.lower().endswith(IMAGE_EXTENSIONS))
        elif os.path.isfile(entry):
            paths.append(entry)
        else:
            raise ValueError(f"No such image file or folder: {entry}")
    if not paths:
        raise ValueError(f"No {IMAGE_FORMATS} images found in {', '.join(entries)}.")
    return paths


def _reason(message):
    """TensorFlow's one useful line, without the graph-execution context around it."""
    for line in reversed(message.splitlines()):
        line = re.sub(r"\{\{.*?\}\}|\[\[.*?\]\]|\[Op:.*", "", line).strip()
        if line and not line.startswith(("Graph execution", "Detected at", "<stack", "in user code",
                                         "File ")):
            return line.removeprefix("InvalidArgumentError:").strip()
    return message.strip()


def __getattr__(name):  # names that moved in 0.2 (keras_vit/_renamed.py)
    from keras_vit._renamed import moved_name

    return moved_name(__name__, name)
