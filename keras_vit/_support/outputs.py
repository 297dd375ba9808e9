"""Text that keras_vit writes for people and other programs to open: file names as the platform
round-trips them, and CSV cells that spreadsheets show instead of running.

File names. A POSIX file name is bytes; Python gives the bytes that are not UTF-8 as lone
surrogates (U+DC80 to U+DCFF, the "surrogateescape" of `os.fsdecode`). Written through
`NAME_ERRORS`, those characters become their bytes again, so a path in preds.csv or on stdout
is the file's name byte for byte, as `ls` prints it (read it back with
`errors="surrogateescape"`, then `os.fsencode`); any other character the output's encoding
lacks becomes a backslash escape (`\\u00e9`). Encoding a row never fails, so one name cannot
end a run.

CSV cells. A spreadsheet runs a cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage
return as a formula (CSV injection). Such a text cell, and one that already begins with `'`,
is written with a `'` in front, as OWASP advises: reading back, a text cell that begins with
`'` had one added, and dropping its first character gives the original. Numbers are written
as numbers.
"""

import codecs
import contextlib
import csv

__all__ = ["NAME_ERRORS", "write_line", "spreadsheet_cell", "csv_file"]

NAME_ERRORS = "keras_vit.names"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"


def _escape_names(error):
    """The codec error handler NAME_ERRORS: a file name's undecodable byte (a lone surrogate
    U+DC80..U+DCFF) as that byte, any other character the encoding lacks as `\\x..`/`\\u....`."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = bytearray()
    for char in error.object[error.start:error.end]:
        code = ord(char)
        out += bytes([code - 0xDC00]) if 0xDC80 <= code <= 0xDCFF \
            else char.encode("ascii", "backslashreplace")
    return bytes(out), error.end


codecs.register_error(NAME_ERRORS, _escape_names)


def write_line(text, stream):
    """Writes `text` and a newline to the text stream `stream` (stdout, stderr): as the stream
    encodes it, or, where that fails on a character (a non-UTF-8 file name), through
    NAME_ERRORS onto the stream's bytes."""
    line = f"{text}\n"
    try:
        stream.write(line)  # a text stream encodes the whole string before writing any of it
        return
    except UnicodeEncodeError:
        pass
    encoding = getattr(stream, "encoding", None) or "utf-8"
    data = line.encode(encoding, NAME_ERRORS)
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a stream of text alone (io.StringIO): the escapes as text
        stream.write(data.decode(encoding, "backslashreplace"))
        return
    stream.flush()  # what the text layer holds goes first
    buffer.write(data)
    buffer.flush()


def spreadsheet_cell(value):
    """A CSV cell for `value`: text prefixed with `'` when a spreadsheet would run it (or when
    it begins with `'` already, so that reading back is exact); a float with 6 significant
    digits; None empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return QUOTE + value if value.startswith((*FORMULA_STARTS, QUOTE)) else value
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) or hasattr(value, "dtype") and value.dtype.kind == "f":
        return f"{float(value):.6g}"
    if isinstance(value, int) or hasattr(value, "dtype") and value.dtype.kind in "iu":
        return str(int(value))
    return spreadsheet_cell(str(value))


@contextlib.contextmanager
def csv_file(path, header):
    """Writes the CSV file `path` whole or not at all (keras_vit.atomic): UTF-8, `header`
    first; yields `write_row(values)`, each value through `spreadsheet_cell`."""
    from keras_vit.atomic import atomic_open

    with atomic_open(path, "w", newline="", encoding="utf-8", errors=NAME_ERRORS) as f:
        rows = csv.writer(f)

        def write_row(values):
            rows.writerow([spreadsheet_cell(value) for value in values])

        write_row(header)
        yield write_row
