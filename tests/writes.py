"""For tests that kill a writer mid-write: hold every keras_vit write open, in the child.

A child process calls `hold_writes_open` before it writes: each write through
keras_vit.atomic then waits between flushing its temporary file and renaming
it, the moment a kill must never tear the target.
"""

import os
import time

import keras_vit.atomic


def hold_writes_open(seconds, announce=None):
    """Makes each write wait `seconds` once its temporary is on disk; `announce(path)` first."""
    flush = keras_vit.atomic._fsync

    def flush_and_wait(path):
        flush(path)
        if announce is not None:
            announce(path)
        time.sleep(seconds)

    keras_vit.atomic._fsync = flush_and_wait


def temporary_name(target, pid):
    """The name keras_vit.atomic gives a temporary of `target` that process `pid` writes."""
    with keras_vit.atomic.temporary_folder(target) as tmp:  # a name only: nothing is made
        name = os.path.basename(tmp)
    return name.replace(f"-{os.getpid()}-", f"-{pid}-", 1)
