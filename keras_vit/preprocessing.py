"""The one image path: decode, resize (bilinear, or a model's preprocessing of record),
[-1, 1] scaling. Every way into a model goes through these functions: `keras-vit predict`
and `analyze` (`load_image`), the SavedModel's `serve_bytes` signature (`decode_images`),
and the image-folder dataset (`decode_image`, then `resize_image` in its pipeline). So one
file gives one array wherever it enters. TensorFlow (for its image decoders) is imported
when an image is decoded, not with this module.

Every decode first reads the image's declared width and height from its header
(`declared_image_size`, in TensorFlow ops, so it runs inside an exported
SavedModel as well) and refuses an image over `max_pixels` before the decoder
allocates anything: a 400 KB PNG can declare 12000 x 12000 pixels, and decoding
it would take 430 MB.
"""

import functools
import os
import re

from keras_vit._support.files import MAX_IMAGE_BYTES, read_file, refuse_special_file
from keras_vit._support.tf_log import without_libjpeg_lines
from keras_vit.errors import ImageError
from keras_vit.normalization import official_input
from keras_vit.preprocessing_record import preprocess_for_model, resize_to_model

__all__ = ["preprocess_input", "IMAGE_EXTENSIONS", "IMAGE_FORMATS", "MAX_PIXELS", "decode_image",
           "declared_image_size", "check_pixel_budget",
           "resize_image", "decode_images", "load_image", "read_image_file", "image_paths",
           "not_an_image", "checked_jpeg_shape", "decode_jpeg", "JPEG_EXTENSIONS"]

# What tf.io.decode_image reads; a GIF gives its first frame (an animated WebP is refused).
IMAGE_FORMATS = "JPEG, PNG, GIF, BMP or WebP"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
JPEG_EXTENSIONS = (".jpg", ".jpeg")
# The default pixel budget: width x height of the largest image decoded. Real photos
# (a 24-megapixel camera, a 48-megapixel phone's default 12) fit; decompression bombs do not.
MAX_PIXELS = 40_000_000
_BUDGET_MESSAGE = "over the pixel budget"
_PALETTE_BMP = ("the image is a compressed or truncated palette BMP, which keras_vit does not "
                "decode; save it as PNG")
_ANIMATED_WEBP = ("the image is an animated WebP, which TensorFlow does not decode safely; "
                 "save one frame as a still image")


def preprocess_input(images, model=None, resize=None):
    """Maps pixel values in [0, 255] to [-1, 1], as the official models expect.

    Accepts NumPy arrays or tensors of any shape (channels last); returns
    float32 (a NumPy array for NumPy input). TensorFlow tensors stay TensorFlow
    tensors whatever the Keras backend, so this works inside a `tf.data` map.
    With `model`: images of any size -> `model`'s input, resized as its preprocessing of record
    says (`resize`: "stretch" or "crop" overrides it) and normalised as its weights expect.
    """
    if model is not None:
        return preprocess_for_model(images, model, resize)
    return official_input(images)


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
    return tf.case([(is_webp, lambda: _decode_webp(data, channels)),
                    (tf.equal(tf.strings.substr(data, 0, 2), b"BM"),
                     lambda: _decode_bmp(data, channels)),
                    (tf.equal(tf.strings.substr(data, 0, 4), b"GIF8"),
                     lambda: _decode_as_rgb(data, channels))],
                   default=lambda: tf.io.decode_image(data, channels=channels,
                                                      expand_animations=False))


def _decode_webp(data, channels):
    """TensorFlow decodes a WebP with alpha only to 4 channels (it refuses to be asked for 3
    or 1): decode it at its own channels, then drop alpha as TensorFlow's PNG decoder does."""
    import tensorflow as tf

    image = tf.io.decode_image(data, expand_animations=False)[..., :3]
    if channels == 1:
        image = tf.image.rgb_to_grayscale(image)
    return tf.ensure_shape(image, (None, None, channels))


def _decode_as_rgb(data, channels):
    """TensorFlow decodes a GIF or a BMP only to RGB (or RGBA): grey is made from RGB here."""
    import tensorflow as tf

    image = tf.io.decode_image(data, channels=3, expand_animations=False)
    return tf.image.rgb_to_grayscale(image) if channels == 1 else image


def _decode_bmp(data, channels):
    """Palette BMPs are decoded here, others by TensorFlow (`_decode_as_rgb`)."""
    import tensorflow as tf

    return tf.ensure_shape(tf.cond(_is_palette_bmp(data), lambda: _decode_palette_bmp(data, channels),
                                   lambda: _decode_as_rgb(data, channels)), (None, None, channels))


def _is_palette_bmp(data):
    """A BMP of 1, 2, 4 or 8 bits a pixel: indices into a colour table."""
    import tensorflow as tf

    head, byte = _head(data, 30)
    bits = byte[28] + 256 * byte[29]
    return (tf.equal(tf.strings.substr(head, 0, 2), b"BM") & (byte[14] >= 40)
            & tf.reduce_any(tf.equal(bits, [1, 2, 4, 8])))


def _decode_palette_bmp(data, channels):
    """A palette BMP as a viewer shows it: each index looked up in the colour table.

    TensorFlow's BMP decoder returns an 8-bit BMP's indices as grey levels and refuses
    fewer bits. Rows are padded to 4 bytes and stored bottom-up unless the height is
    negative; the table's entries are blue, green, red, unused.
    """
    import tensorflow as tf

    _, byte = _head(data, 54)

    def little(at, count):
        return sum(byte[at + i] * 256 ** i for i in range(count))

    bits, compression, offset = byte[28], little(30, 4), little(10, 4)
    width, height = little(18, 4), little(22, 4)
    top_down = height >= 2 ** 31
    height = tf.where(top_down, 2 ** 32 - height, height)
    stride = (bits * width + 31) // 32 * 4
    colours = tf.where(tf.equal(little(46, 4), 0), 2 ** bits, little(46, 4))
    pixels_end = offset + stride * height
    check = tf.debugging.Assert(
        tf.equal(compression, 0) & (pixels_end <= tf.cast(tf.strings.length(data), tf.int64))
        & (colours <= 256), [_PALETTE_BMP])
    with tf.control_dependencies([check]):
        rows = tf.io.decode_raw(tf.strings.substr(data, offset, stride * height), tf.uint8)
    rows = tf.reshape(rows, tf.stack([height, stride]))
    # Each byte holds 8 // bits pixels, the first in its highest bits.
    per_byte = 8 // bits
    shifts = tf.cast(8 - bits * tf.range(1, per_byte + 1), tf.uint8)
    mask = tf.cast(2 ** bits - 1, tf.uint8)
    indices = tf.bitwise.bitwise_and(tf.bitwise.right_shift(rows[:, :, None], shifts), mask)
    indices = tf.reshape(indices, tf.stack([height, stride * per_byte]))[:, :width]
    table = tf.io.decode_raw(tf.strings.substr(data, 14 + little(14, 4), 4 * colours), tf.uint8)
    table = tf.reshape(table, (-1, 4))[:, 2::-1]
    image = tf.gather(table, tf.minimum(tf.cast(indices, tf.int32), tf.shape(table)[0] - 1))
    image = tf.cond(top_down, lambda: image, lambda: image[::-1])
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


_GIF_CHUNK = 1 << 16  # bytes walked at once: bounds the walk's memory whatever the file's size
_GIF_REACH = 800  # the furthest one step jumps: an image descriptor, its colour table, LZW byte


def _gif_frames(data):
    """(height, width, frames, pixels of all frames) of a GIF: `_walk_gif` as one graph, so
    that decoding eagerly (`load_image`) runs its loops at graph speed too."""
    return _gif_walk()(data)


@functools.cache
def _gif_walk():
    import tensorflow as tf

    return tf.function(_walk_gif, input_signature=[tf.TensorSpec((), tf.string)],
                       autograph=False)


def _walk_gif(data):
    """(height, width, frames, pixels of all frames) of a GIF, from its block structure.

    The canvas is the largest of the logical screen and every frame (what TensorFlow's
    decoder allocates). After the header, a GIF is a chain: each data sub-block (at most
    255 bytes) starts with its length, a 0 ends a block's sub-blocks, and the introducer
    after it (an image descriptor, an extension, the trailer) says where the next
    sub-blocks start. The chain is followed one chunk of the file at a time by pointer
    doubling: every position points to where the chain goes next if it is a length
    byte, and log2(chunk) gathers resolve the chunk, so a million one-byte sub-blocks
    cost a few vectorised passes, not a million loop steps, and only a chunk of the file
    is ever widened to integers.
    """
    import tensorflow as tf

    size = tf.strings.length(data)
    length = _GIF_CHUNK + _GIF_REACH

    def table(flags):  # the bytes of the colour table a flags byte announces
        return tf.where(flags >= 128, 3 * 2 ** (flags % 8 + 1), 0)

    def chunk_walk(begin, first):
        """From the length byte at `begin` (`first`: read it as 0, the chain's start) to where
        the chain leaves this chunk: (that position, whether the chain ended, frame totals)."""
        own = tf.minimum(size - begin, _GIF_CHUNK)  # positions this chunk resolves
        raw = tf.io.decode_raw(tf.strings.substr(data, begin, length), tf.uint8)
        byte = tf.cast(tf.concat([raw, tf.zeros(length - tf.size(raw), tf.uint8)], 0), tf.int32)
        at = tf.range(length)
        byte = tf.where(first & tf.equal(at, 0), 0, byte)

        def after(offset):  # per position, the byte `offset` into the introducer after it
            return tf.concat([byte[offset + 1:], tf.zeros(offset + 1, tf.int32)], 0)

        ended = length  # the node past a trailer or a byte that starts no block
        image, extension = tf.equal(after(0), 0x2C), tf.equal(after(0), 0x21)
        next_block = tf.where(image, at + 12 + table(after(9)),
                              tf.where(extension, at + 3, ended))
        step = tf.where(tf.equal(byte, 0), next_block, at + 1 + byte)
        pointers = tf.concat([tf.where(at < own, step, at), [ended]], 0)  # beyond: fixed

        def unresolved(pointers, levels):
            return tf.not_equal(pointers[pointers[0]], pointers[0])

        def double(pointers, levels):
            return tf.gather(pointers, pointers), levels.write(levels.size(), pointers)

        pointers, levels = tf.while_loop(unresolved, double, (pointers, tf.TensorArray(
            tf.int32, size=0, dynamic_size=True, clear_after_read=False)))
        # The chain's positions: position 0, then, level by level down, where each leads.
        on_chain = tf.foldl(
            lambda seen, k: tf.maximum(seen, tf.math.unsorted_segment_max(
                seen, levels.read(k), length + 1)),
            tf.range(levels.size() - 1, -1, -1), tf.one_hot(0, length + 1, dtype=tf.int32))
        framed = (on_chain[:-1] > 0) & tf.equal(byte, 0) & image & (at < own)
        width = tf.where(framed, after(5) + 256 * after(6), 0)
        height = tf.where(framed, after(7) + 256 * after(8), 0)
        return (begin + pointers[0], tf.equal(pointers[0], ended), tf.reduce_max(height),
                tf.reduce_max(width), tf.reduce_sum(tf.cast(framed, tf.int32)),
                tf.reduce_sum(tf.cast(width, tf.int64) * tf.cast(height, tf.int64)))

    def step(begin, ended, height, width, frames, pixels):
        begin, ended, frame_h, frame_w, more, more_pixels = chunk_walk(
            begin, tf.equal(frames, -1))
        return (begin, ended, tf.maximum(height, frame_h), tf.maximum(width, frame_w),
                tf.maximum(frames, 0) + more, pixels + more_pixels)

    head = tf.cast(tf.io.decode_raw(tf.strings.substr(data + b"\0" * 13, 0, 13), tf.uint8),
                   tf.int32)
    # The chain starts as if a 0 ended the header and the global colour table; frames -1
    # until the first chunk has read that.
    _, _, height, width, frames, pixels = tf.while_loop(
        lambda begin, ended, *_: ~ended & (begin < size), step,
        (12 + table(head[10]), tf.constant(False), head[8] + 256 * head[9],
         head[6] + 256 * head[7], tf.constant(-1), tf.constant(0, tf.int64)))
    return (tf.cast(height, tf.int64), tf.cast(width, tf.int64),
            tf.cast(tf.maximum(frames, 0), tf.int64), pixels)


def check_pixel_budget(data, max_pixels=MAX_PIXELS):
    """`data` (encoded image bytes), once its header declares at most `max_pixels` pixels.

    Raises `tf.errors.InvalidArgumentError` otherwise (eagerly, or when the graph
    runs): the decoder that follows never sees the image.
    """
    import tensorflow as tf

    # giflib reads every frame of a GIF into memory (one byte per pixel) before TensorFlow
    # keeps the first: count all of them, so a long animation of small frames is no way round.
    height, width, frames, frame_pixels = tf.cond(
        tf.equal(tf.strings.substr(data, 0, 4), b"GIF8"), lambda: _gif_frames(data),
        lambda: (*declared_image_size(data), tf.constant(1, tf.int64), tf.constant(0, tf.int64)))
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


def resize_image(image, size, preprocessing=None):
    """`(H, W, C)` or `(batch, H, W, C)` pixels -> float32 at `size` (height, width).

    Bilinear, without antialiasing, as the official ViT input pipeline does; or, one image,
    as a `preprocessing` record says (keras_vit.preprocessing_record)."""
    import tensorflow as tf

    if preprocessing is not None:
        return resize_to_model(image, size, preprocessing)
    return tf.image.resize(image, tuple(size), method="bilinear", antialias=False)


def decode_images(image_bytes, image_size, channels=3, max_pixels=MAX_PIXELS,
                  preprocessing=None):
    """A string tensor `(batch,)` of encoded images -> float32 `(batch, H, W, channels)` pixels
    in [0, 255] at `image_size` (as `resize_image`); images of any size to `max_pixels`."""
    import tensorflow as tf

    image_size = tuple(image_size)
    return tf.map_fn(lambda data: resize_image(decode_image(data, channels, max_pixels),
                                               image_size, preprocessing),
                     image_bytes,
                     fn_output_signature=tf.TensorSpec((*image_size, channels), tf.float32))


def load_image(path, image_size, channels=3, max_pixels=MAX_PIXELS, preprocessing=None):
    """An image file -> float32 `(H, W, channels)` NumPy pixels in [0, 255] at `image_size`.

    Raises `ImageError` naming the file when it is missing, not a regular file (a
    FIFO, a device), over `MAX_IMAGE_BYTES`, not an image, or larger than
    `max_pixels` pixels.
    """
    import tensorflow as tf

    data = read_image_file(path)
    try:
        with without_libjpeg_lines():
            image = decode_image(tf.constant(data), channels, max_pixels)
    except tf.errors.InvalidArgumentError as error:
        raise not_an_image(path, error) from error
    return resize_image(image, image_size, preprocessing).numpy()


def read_image_file(path):
    """The bytes of the image file `path`: a regular file of at most `MAX_IMAGE_BYTES`, else
    `ImageError` naming it (a FIFO or a device is refused before it is opened)."""
    try:
        return read_file(path, "an image", ImageError, MAX_IMAGE_BYTES)
    except OSError as error:
        raise ImageError(f"No image file at {path} ({error.strerror or error}).") from None


def not_an_image(path, error):
    """The `ImageError` for a file TensorFlow failed to decode, with its one useful line."""
    reason = _reason(error.message)
    if _BUDGET_MESSAGE in reason:
        return ImageError(f"{path} is too large to decode: {reason}.")
    if reason in (_ANIMATED_WEBP, _PALETTE_BMP):
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
            refuse_special_file(entry, "an image", ImageError)
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
    for known in (_ANIMATED_WEBP, _PALETTE_BMP):
        if known in message:
            return known
    for line in reversed(message.splitlines()):
        line = re.sub(r"\{\{.*?\}\}|\[\[.*?\]\]|\[Op:.*", "", line).strip()
        if line and not line.startswith(("Graph execution", "Detected at", "<stack", "in user code",
                                         "File ")):
            return line.removeprefix("InvalidArgumentError:").strip()
    return message.strip()


def __getattr__(name):  # names that moved in 0.2 (keras_vit/_lazy.py)
    from keras_vit._lazy import moved_name

    return moved_name(__name__, name)
