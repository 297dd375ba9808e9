"""The one JSON reader of the package: every JSON keras_vit reads goes through `parse_json`
(a file through `read_json`), bounded in size and in nesting depth.

Python's json parser recurses once per level of nesting, so a file of 100,000 `[` raises a
`RecursionError` traceback instead of a message. The depth is counted first, without
recursing: strings are blanked out, then the brackets left are summed as +1/-1 with numpy, and
a text nested deeper than `MAX_JSON_DEPTH` never reaches the parser. A file is read through
`files.read_file`, which refuses it past its size cap before reading it whole. Every refusal is
one line, raised as the caller's `error` class, naming where the JSON came from.
"""

import json
import re

import numpy as np

from keras_vit._support.files import MAX_TEXT_BYTES, read_text

__all__ = ["MAX_JSON_DEPTH", "json_depth", "parse_json", "read_json"]

# The deepest JSON keras_vit reads or writes nests about 6 levels (a keras-hub task.json: task,
# config, backbone, config, image_shape); a run.json or report.json 4. 64 leaves ten times that,
# far below the parser's recursion (about 1,000 levels).
MAX_JSON_DEPTH = 64

# A JSON string: a quote, then characters other than quote and backslash, or escapes, then a
# quote (written unrolled, so a long string is one linear scan).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STEP = np.zeros(256, np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


def json_depth(text):
    """How deep `text` (str or UTF-8 bytes) nests arrays and objects, brackets inside strings
    aside; an unterminated string's brackets count, which only overstates the depth of text
    that is not JSON anyway."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    # A UTF-8 continuation byte is >= 0x80: never a quote, a backslash or a bracket.
    brackets = _STRING.sub(b"", data)
    if not brackets:
        return 0
    steps = _STEP[np.frombuffer(brackets, np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def parse_json(text, origin, error, max_depth=MAX_JSON_DEPTH, object_pairs_hook=None):
    """The value of the JSON `text` (str or bytes), or `error` in one line naming `origin`
    (a path, or "the TF_CONFIG variable") and what is wrong."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as decode_error:
            raise error(f"{origin} is not UTF-8 text ({decode_error}).") from None
    depth = json_depth(text)
    if depth > max_depth:
        raise error(f"{origin} nests too deeply: {depth} levels, where keras_vit reads JSON "
                    f"nested at most {max_depth} deep.")
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except (ValueError, RecursionError) as parse_error:  # a hook's ValueError too
        raise error(f"{origin} is not valid JSON ({_one_line(parse_error)}).") from None


def read_json(path, what, error, max_bytes=MAX_TEXT_BYTES, max_depth=MAX_JSON_DEPTH):
    """The JSON value in the regular file `path` (`what` it should be: "a safetensors index"),
    refused with `error` past `max_bytes` (before reading it whole), past `max_depth`, or when
    it is not JSON. OSError (a missing file) is the caller's to word."""
    return parse_json(read_text(path, what, error, max_bytes), path, error, max_depth)


def _one_line(exception):
    return " ".join(str(exception).split())[:200]
