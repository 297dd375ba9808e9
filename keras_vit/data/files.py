"""Image files in tf.data: one element per file, a file that fails flagged instead of raised.

A `tf.data` map that raises stops the whole iteration (a file deleted after
the scan used to end a training run with a NotFoundError traceback), and
`ignore_errors` drops the element without saying which. `load_files` gives
every file an element, `(loaded, ok)`: the file's `load(path)` result and True,
or zeros and False when reading or decoding it failed. Callers drop or report
the failures, by path: `record_failures`.
"""

import tensorflow as tf

__all__ = ["load_files", "record_failures", "skip_failed"]


def load_files(paths, load, deterministic=True):
    """A dataset of paths (or of tuples whose first item is the path) ->
    `(load(path), ok, *the tuple)`, in order, read and decoded in parallel.

    `load(path)` returns a tensor or a nest of tensors; a file for which it raises
    (gone, unreadable, not an image, over the pixel budget) gives zeros of the
    same structure (unknown dimensions 0) and `ok` False.
    """
    def one(*item):
        path = item[0]
        loaded = tf.data.Dataset.from_tensors(path).map(load).ignore_errors()
        zeros = tf.nest.map_structure(
            lambda spec: tf.zeros([d or 0 for d in spec.shape], spec.dtype), loaded.element_spec)
        failed = tf.data.Dataset.from_tensors((zeros, False))
        # One element per file: the loaded one if there is one, else the failure.
        return loaded.map(lambda x: (x, True)).concatenate(failed).take(1).map(
            lambda x, ok: (x, ok, *item))

    # Each inner dataset has one element, so a deterministic interleave keeps the order.
    return paths.interleave(one, cycle_length=tf.data.AUTOTUNE, block_length=1,
                            num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def record_failures(dataset, failed):
    """`(loaded, ok, path, *rest)` elements -> `(loaded, *rest)` of the files that loaded;
    the path of each that did not is added to `failed` (a list; each path once)."""
    def note(path):
        path = path.numpy().decode("utf-8", "backslashreplace")
        if path not in failed:
            failed.append(path)
        return False

    def keep(loaded, ok, path, *rest):
        return tf.cond(ok, lambda: True,
                       lambda: tf.py_function(note, [path], tf.bool))

    return dataset.filter(keep).map(lambda loaded, ok, path, *rest: (loaded, *rest))


def skip_failed(files, failed):
    """`(path, label)` elements less those whose path is in `failed`, the list the pipeline
    fills as files fail (`record_failures`); the dataset carries the list as `failed_files`,
    where `make_pipeline` finds it.

    A file that failed once is then left out everywhere the split is read again, so the
    labels of a held-out split stay aligned with the predictions made without it.
    """
    def not_failed(path, label):
        return tf.py_function(lambda p: p.numpy().decode("utf-8", "backslashreplace") not in failed,
                              [path], tf.bool)

    dataset = files.filter(not_failed)
    dataset.failed_files = failed
    return dataset
