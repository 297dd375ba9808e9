"""Image files in tf.data: read and decoded in parallel, a file that fails skipped and named
instead of stopping the iteration.

A `tf.data` map that raises ends the whole iteration (a file deleted after the
scan used to end a training run with a NotFoundError traceback), and
`ignore_errors` drops the element without saying which. Three ways round it,
by what the consumer needs:

- `load_batches` (a Python consumer: predict, evaluate, the folder scan): each
  element carries its file's index; the indices missing after `ignore_errors`
  are the failures. Costs nothing per image.
- `load_files` + `record_failures` (a split read by Keras: training, and a
  held-out split whose labels must stay aligned): a one-element dataset per file,
  the failure a flagged element of its own, its path recorded. About a
  millisecond an image, spread over the parallel calls.

The functions handed to tf.data are named, not lambdas: AutoGraph cannot read the
source of two lambdas on one line, and warned about each (about 54 lines a run).
"""

import numpy as np
import tensorflow as tf

__all__ = ["load_batches", "load_files", "record_failures", "skip_failed", "graph_function"]


def graph_function(function):
    """`function` for a `tf.data` map as it is written: TensorFlow ops and their own `tf.cond`
    and `tf.case`, no Python control flow on tensors, so nothing for AutoGraph to convert. A
    map converts its function and every function it calls (reading, parsing and rewriting
    their source): for the image decoders, about 1.5 CPU-seconds each time a pipeline is
    built, which `predict`, `evaluate` and `train` on a folder paid before their first image."""
    return tf.autograph.experimental.do_not_convert(function)


def load_batches(paths, load, batch_size):
    """Yields `(index, loaded)` for every path in order, `loaded` a NumPy value (a nest, as
    `load(path)` returns) or None for a file that failed; read and decoded in parallel,
    `batch_size` files at a time, prefetched."""
    indices = np.arange(len(paths), dtype=np.int64)
    names = [_file_name(p) for p in paths]
    batches = tf.data.Dataset.from_tensor_slices((indices, names)) \
        .map(graph_function(lambda i, p: (i, load(p))), num_parallel_calls=tf.data.AUTOTUNE) \
        .ignore_errors().batch(batch_size).prefetch(tf.data.AUTOTUNE)
    expected = 0
    for index, loaded in batches.as_numpy_iterator():
        for row, i in enumerate(index):
            for failed in range(expected, int(i)):
                yield failed, None
            yield int(i), tf.nest.map_structure(lambda x, row=row: x[row], loaded)
            expected = int(i) + 1
    for failed in range(expected, len(paths)):
        yield failed, None


def _file_name(path):
    """`path` as the bytes TensorFlow opens. One no file name can hold (a NUL, which the C
    library would cut the name at; a lone surrogate that is not an undecodable byte) as "",
    which fails to read like a missing file."""
    try:
        name = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return b""
    return b"" if b"\0" in name else name


def load_files(paths, load):
    """A dataset of paths (or of tuples whose first item is the path) ->
    `(load(*the tuple), ok, *the tuple)`, in order, read and decoded in parallel (the rest
    of the tuple, such as a training example's seed, reaches `load` too).

    A file for which `load` raises (gone, unreadable, not an image, over the pixel
    budget) gives zeros of the same structure (unknown dimensions 0) and `ok` False.
    """
    def one(*item):
        loaded = tf.data.Dataset.from_tensors(item).map(graph_function(load)).ignore_errors()
        zeros = tf.nest.map_structure(
            lambda spec: tf.zeros([d or 0 for d in spec.shape], spec.dtype), loaded.element_spec)
        failed = tf.data.Dataset.from_tensors((zeros, False))

        def flagged(x):
            return x, True

        def with_item(x, ok):
            return (x, ok, *item)

        # One element per file: the loaded one if there is one, else the failure.
        return loaded.map(flagged).concatenate(failed).take(1).map(with_item)

    # Each inner dataset has one element, so a deterministic interleave keeps the order.
    return paths.interleave(one, cycle_length=tf.data.AUTOTUNE, block_length=1,
                            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _note(failed):
    def note(path):
        path = path.numpy().decode("utf-8", "backslashreplace")
        if path not in failed:
            failed.append(path)
        return False
    return note


def record_failures(dataset, failed):
    """`(loaded, ok, path, *rest)` elements (`load_files`) -> `(loaded, *rest)` of the files
    that loaded; the path of each that did not is added to `failed` (a list; each once)."""
    def flag_first(loaded, ok, path, *rest):
        return (ok, path, loaded, *rest)

    return _drop_noted(dataset.map(flag_first), failed)


def _drop_noted(flagged, failed):
    """`(ok, path, *rest)` -> `rest` where ok; each path where not is noted in `failed`. The
    note (Python) is called for failures alone, in a parallel map, not in the filter."""
    note = _note(failed)

    def noted(ok, path, *rest):
        ok = tf.cond(ok, lambda: True, lambda: tf.py_function(note, [path], tf.bool))
        return (ok, *rest)

    def kept(ok, *rest):
        return ok

    def unflagged(ok, *rest):
        return tuple(rest)

    return flagged.map(noted, num_parallel_calls=tf.data.AUTOTUNE).filter(kept).map(unflagged)


def skip_failed(files, failed):
    """`(path, label)` elements less those whose path is in `failed`, the list the pipeline
    fills as files fail; the dataset carries the list as `failed_files`, where
    `make_pipeline` finds it.

    A file that failed once is then left out everywhere the split is read again, so the
    labels of a held-out split stay aligned with the predictions made without it.
    """
    def not_failed(path, label):
        return tf.py_function(lambda p: p.numpy().decode("utf-8", "backslashreplace") not in failed,
                              [path], tf.bool)

    dataset = files.filter(not_failed)
    dataset.failed_files = failed
    return dataset
