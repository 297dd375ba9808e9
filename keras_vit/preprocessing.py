"""The one image path: decode, bilinear resize, [-1, 1] scaling.

Every way into a model goes through these functions: `keras-vit predict` and
`analyze` (`load_image`), the SavedModel's `serve_bytes` signature
(`decode_images`), and the image-folder dataset (`decode_image`, then
`resize_image` in its pipeline). So one file gives one array wherever it
enters. TensorFlow (for its image decoders) is imported when an image is
decoded, not with this module.

Every decode first reads the image's declared width and height from its header
(`declared_image_size`, in TensorFlow ops, so it runs inside an exported
SavedModel as well) and refuses an image over `max_pixels` before the decoder
allocates anything: a 400 KB PNG can declare 12000 x 12000 pixels, and decoding
it would take 430 MB.
"""

import os
import re

import numpy as np

from keras_vit.errors import ImageError

__all__ = ["preprocess_input", "IMAGE_EXTENSIONS", "IMAGE_FORMATS", "MAX_PIXELS", "decode_image",
           "declared_image_size", "check_pixel_budget",
           "resize_image", "decode_images", "load_image", "image_paths", "not_an_image",
           "checked_jpeg_shape", "decode_jpeg", "JPEG_EXTENSIONS"]

# What tf.io.decode_image reads; a GIF gives its first frame (an animated WebP is refused).
IMAGE_FORMATS = "JPEG, PNG, GIF, BMP or WebP"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
JPEG_EXTENSIONS = (".jpg", ".jpeg")
# The default pixel budget: width x height of the largest image decoded. Real photos
# (a 24-megapixel camera, a 48-megapixel phone's default 12) fit; decompression bombs do not.
MAX_PIXELS = 40_000_000
_BUDGET_MESSAGE = "over the pixel budget"
_ANIMATED_WEBP = ("the image is an animated WebP, which TensorFlow does not decode safely; "
                 "save one frame as a still image")


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
    # Imported here: the command line reads this module's constants (MAX_PIXELS,
    # IMAGE_FORMATS) while parsing, before Keras or TensorFlow is loaded.
    from keras import ops

    return ops.cast(images, "float32") / 127.5 - 1.0


def decode_image(data, channels=3, max_pixels=MAX_PIXELS):
    """Encoded image bytes (a scalar string tensor) -> uint8 `(H, W, channels)`.

    Grey, palette and RGBA images become `channels` channels (3: RGB, 1: grey);
    alpha is dropped. Raises `tf.errors.InvalidArgumentError` for bytes that are
    not such an image, and, before decoding, for an animated WebP and for an
    image whose header declares more than `max_pixels` pixels (width x height;
    None: no limit).
    """
    import tensorflow as tf

    if max_pixels is not None:
        data = check_pixel_budget(data, max_pixels)
    is_webp, animated = _webp_kind(data)
    # TensorFlow 2.21 decodes an animated WebP into a corrupted heap (the process aborts at a
    # later allocation); refusing it here keeps one request from killing a server.
    check = tf.debugging.Assert(tf.logical_not(animated), [_ANIMATED_WEBP])
    with tf.control_dependencies([check]):
        data = tf.identity(data)
    if channels not in (1, 3):
        return tf.io.decode_image(data, channels=channels, expand_animations=False)
    return tf.cond(is_webp, lambda: _decode_webp(data, channels),
                   lambda: tf.io.decode_image(data, channels=channels, expand_animations=False))


def _decode_webp(data, channels):
    """TensorFlow decodes a WebP with alpha only to 4 channels (it refuses to be asked for 3
    or 1): decode it at its own channels, then drop alpha as TensorFlow's PNG decoder does."""
    import tensorflow as tf

    image = tf.io.decode_image(data, expand_animations=False)[..., :3]
    if channels == 1:
        image = tf.image.rgb_to_grayscale(image)
    return tf.ensure_shape(image, (None, None, channels))


def _head(data, length):
    """The first `length` bytes of `data`, zero-padded: (a string tensor, int64 byte values)."""
    import tensorflow as tf

    head = tf.strings.substr(tf.strings.substr(data, 0, length) + b"\0" * length, 0, length)
    return head, tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)


def _webp_kind(data):
    """(is a WebP, is an animated WebP): RIFF...WEBP, and the animation flag of a VP8X header."""
    import tensorflow as tf

    head, byte = _head(data, 21)
    is_webp = (tf.equal(tf.strings.substr(head, 0, 4), b"RIFF")
               & tf.equal(tf.strings.substr(head, 8, 4), b"WEBP"))
    extended = tf.equal(tf.strings.substr(head, 12, 4), b"VP8X")
    return is_webp, is_webp & extended & tf.equal(byte[20] // 2 % 2, 1)


def declared_image_size(data):
    """The (height, width) an encoded image's header declares, as int64 scalar tensors.

    Reads the header only (TensorFlow ops: it works eagerly, in `tf.data` and in
    an exported graph): JPEG through `tf.io.extract_jpeg_shape`, PNG (IHDR),
    GIF (logical screen), BMP and WebP (VP8, VP8L, VP8X) from their fixed
    offsets; a GIF's is its largest frame or logical screen, the canvas TensorFlow
    decodes to. (0, 0) for bytes of no such format, which the decoder then refuses.
    """
    import tensorflow as tf

    data = tf.convert_to_tensor(data, tf.string)
    head, byte = _head(data, 32)  # every field read below lies in the first 32 bytes

    def little(at, count):
        return sum(byte[at + i] * 256 ** i for i in range(count))

    def big(at, count):
        return sum(byte[at + i] * 256 ** (count - 1 - i) for i in range(count))

    def signed32(value):  # BMP's fields are int32; a negative height means top-down rows
        return tf.abs(tf.where(value >= 2 ** 31, value - 2 ** 32, value))

    def starts(magic, at=0):
        return tf.equal(tf.strings.substr(head, at, len(magic)), magic)

    def jpeg():
        shape = tf.cast(tf.io.extract_jpeg_shape(data), tf.int64)
        return shape[0], shape[1]

    def vp8l():
        bits = little(21, 4)
        return bits // 16384 % 16384 + 1, bits % 16384 + 1

    is_webp = starts(b"RIFF") & starts(b"WEBP", 8)
    return tf.case([
        (starts(b"\xff\xd8\xff"), jpeg),
        (starts(b"\x89PNG\r\n\x1a\n"), lambda: (big(20, 4), big(16, 4))),
        (starts(b"GIF8"), lambda: _gif_frames(data)[:2]),
        (starts(b"BM"), lambda: (signed32(little(22, 4)), signed32(little(18, 4)))),
        (is_webp & starts(b"VP8 ", 12), lambda: (little(28, 2) % 16384, little(26, 2) % 16384)),
        (is_webp & starts(b"VP8L", 12), vp8l),
        (is_webp & starts(b"VP8X", 12), lambda: (little(27, 3) + 1, little(24, 3) + 1)),
    ], default=lambda: (tf.constant(0, tf.int64), tf.constant(0, tf.int64)), exclusive=False)


def _gif_frames(data):
    """(height, width, frames, pixels of all frames) of a GIF, from its block structure.

    The canvas is the largest of the logical screen and every frame (what
    TensorFlow's decoder allocates); a walk over the blocks (image descriptors,
    extensions, and their data sub-blocks, at most 255 bytes each) finds them.
    """
    import tensorflow as tf

    raw = tf.concat([tf.cast(tf.io.decode_raw(data, tf.uint8), tf.int64),
                     tf.zeros(16, tf.int64)], 0)  # zero-padded: reads past the end give 0
    size = tf.cast(tf.strings.length(data), tf.int64)

    def u16(at):
        return raw[at] + 256 * raw[at + 1]

    def table(flags):  # the bytes of the colour table a flags byte announces
        return tf.where(flags >= 128, 3 * 2 ** (flags % 8 + 1), 0)

    def step(pos, in_blocks, height, width, frames, pixels):
        byte = raw[pos]
        if_image = tf.equal(byte, 0x2C) & ~in_blocks
        if_extension = tf.equal(byte, 0x21) & ~in_blocks
        frame_w, frame_h = u16(pos + 5), u16(pos + 7)
        next_pos = tf.where(in_blocks, pos + 1 + byte,  # a sub-block, or the 0 ending them
                            tf.where(if_image, pos + 11 + table(raw[pos + 9]),
                                     tf.where(if_extension, pos + 2, size)))  # else: the end
        next_in_blocks = tf.where(in_blocks, byte > 0, if_image | if_extension)
        return (next_pos, next_in_blocks,
                tf.where(if_image, tf.maximum(height, frame_h), height),
                tf.where(if_image, tf.maximum(width, frame_w), width),
                frames + tf.cast(if_image, tf.int64),
                pixels + tf.where(if_image, frame_w * frame_h, 0))

    start = 13 + table(raw[10])
    _, _, height, width, frames, pixels = tf.while_loop(
        lambda pos, *_: pos < size, step,
        (start, tf.constant(False), u16(8), u16(6), tf.constant(0, tf.int64),
         tf.constant(0, tf.int64)))
    return height, width, frames, pixels


def check_pixel_budget(data, max_pixels=MAX_PIXELS):
    """`data` (encoded image bytes), once its header declares at most `max_pixels` pixels.

    Raises `tf.errors.InvalidArgumentError` otherwise (eagerly, or when the graph
    runs): the decoder that follows never sees the image.
    """
    import tensorflow as tf

    height, width = declared_image_size(data)
    # giflib reads every frame of a GIF into memory (one byte per pixel) before TensorFlow
    # keeps the first: count all of them, so a long animation of small frames is no way round.
    frames, frame_pixels = tf.cond(
        tf.equal(tf.strings.substr(data, 0, 4), b"GIF8"), lambda: _gif_frames(data)[2:],
        lambda: (tf.constant(1, tf.int64), tf.constant(0, tf.int64)))
    fits = tf.maximum(height * width, frame_pixels) <= int(max_pixels)
    frames_text = tf.where(frames > 1, " in " + tf.strings.as_string(frames) + " frames", "")
    check = tf.debugging.Assert(fits, [tf.strings.join([
        "the image is ", tf.strings.as_string(width), " x ", tf.strings.as_string(height),
        " pixels", frames_text, f", {_BUDGET_MESSAGE} of {int(max_pixels)} pixels"])])
    with tf.control_dependencies([check]):
        return tf.identity(data)


def checked_jpeg_shape(data, max_pixels=MAX_PIXELS):
    """(height, width, channels) int32 of JPEG bytes, once within `max_pixels`; raises
    `tf.errors.InvalidArgumentError` for bytes that are not a JPEG, or over the budget.

    The JPEG-only form of `check_pixel_budget`: no tf.case over the other formats' headers
    and no GIF block walk, whose control flow costs more in a `tf.data` map (about a
    millisecond an image) than decoding a small JPEG. A folder of JPEGs (most photo
    datasets) is scanned and read through it.
    """
    import tensorflow as tf

    shape = tf.io.extract_jpeg_shape(data)
    if max_pixels is None:
        return shape
    height, width = tf.cast(shape[0], tf.int64), tf.cast(shape[1], tf.int64)
    check = tf.debugging.Assert(height * width <= int(max_pixels), [tf.strings.join([
        "the image is ", tf.strings.as_string(width), " x ", tf.strings.as_string(height),
        f" pixels, {_BUDGET_MESSAGE} of {int(max_pixels)} pixels"])])
    with tf.control_dependencies([check]):
        return tf.identity(shape)


def decode_jpeg(data, channels=3, max_pixels=MAX_PIXELS, crop_window=None):
    """`decode_image` for bytes that must be a JPEG: the same decoder and pixel budget,
    through `checked_jpeg_shape`. `crop_window(shape) -> (begin, size)` decodes only that
    window (libjpeg skips the blocks outside it; the window's first and last columns may
    differ slightly from a full decode's, their chroma upsampled from the edge). Raises
    `tf.errors.InvalidArgumentError` for bytes that are not a JPEG."""
    import tensorflow as tf

    shape = checked_jpeg_shape(data, max_pixels)
    if crop_window is None:
        with tf.control_dependencies([shape]):
            return tf.io.decode_jpeg(data, channels=channels)
    begin, size = crop_window(shape)
    window = tf.stack([begin[0], begin[1], size[0], size[1]])
    return tf.image.decode_and_crop_jpeg(data, window, channels=channels)


def resize_image(image, size):
    """`(H, W, C)` or `(batch, H, W, C)` pixels -> float32 at `size` (height, width).

    Bilinear, without antialiasing, as the official ViT input pipeline does.
    """
    import tensorflow as tf

    return tf.image.resize(image, tuple(size), method="bilinear", antialias=False)


def decode_images(image_bytes, image_size, channels=3, max_pixels=MAX_PIXELS):
    """A string tensor `(batch,)` of encoded images -> float32 `(batch, H, W, channels)` pixels
    in [0, 255] at `image_size`; images of any size up to `max_pixels` pixels."""
    import tensorflow as tf

    image_size = tuple(image_size)
    return tf.map_fn(lambda data: resize_image(decode_image(data, channels, max_pixels),
                                               image_size),
                     image_bytes,
                     fn_output_signature=tf.TensorSpec((*image_size, channels), tf.float32))


def load_image(path, image_size, channels=3, max_pixels=MAX_PIXELS):
    """An image file -> float32 `(H, W, channels)` NumPy pixels in [0, 255] at `image_size`.

    Raises `ImageError` naming the file when it is missing, not an image, or
    larger than `max_pixels` pixels.
    """
    import tensorflow as tf

    if not os.path.isfile(path):
        raise ImageError(f"No image file at {path}.")
    with open(path, "rb") as f:
        data = f.read()
    try:
        image = decode_image(tf.constant(data), channels, max_pixels)
    except tf.errors.InvalidArgumentError as error:
        raise not_an_image(path, error) from error
    return resize_image(image, image_size).numpy()


def not_an_image(path, error):
    """The `ImageError` for a file TensorFlow failed to decode, with its one useful line."""
    reason = _reason(error.message)
    if _BUDGET_MESSAGE in reason:
        return ImageError(f"{path} is too large to decode: {reason}.")
    if reason == _ANIMATED_WEBP:
        return ImageError(f"{path} cannot be decoded: {reason}.")
    return ImageError(f"{path} is not a {IMAGE_FORMATS} image ({reason}).")


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
            raise ImageError(f"No such image file or folder: {entry}")
    if not paths:
        raise ImageError(f"No {IMAGE_FORMATS} images found in {', '.join(entries)}.")
    return paths


def _reason(message):
    """TensorFlow's one useful line, without the graph-execution context around it."""
    budget = re.search(r"the image is \d+ x \d+ pixels(?: in \d+ frames)?, " + _BUDGET_MESSAGE
                       + r" of \d+ pixels", message)
    if budget:  # from tf.debugging.Assert, whose wording differs eagerly and in a graph
        return budget.group(0)
    if _ANIMATED_WEBP in message:
        return _ANIMATED_WEBP
    for line in reversed(message.splitlines()):
        line = re.sub(r"\{\{.*?\}\}|\[\[.*?\]\]|\[Op:.*", "", line).strip()
        if line and not line.startswith(("Graph execution", "Detected at", "<stack", "in user code",
                                         "File ")):
            return line.removeprefix("InvalidArgumentError:").strip()
    return message.strip()


def __getattr__(name):  # names that moved in 0.2 (keras_vit/_renamed.py)
    from keras_vit._renamed import moved_name

    return moved_name(__name__, name)
