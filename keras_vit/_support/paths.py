"""Where keras_vit keeps its files on this machine: `$KERAS_HOME/keras_vit` (default
`~/.keras/keras_vit`), as Keras keeps its own under `$KERAS_HOME`."""

import os

__all__ = ["keras_home", "cache_dir"]


def keras_home():
    """`$KERAS_HOME`, or `~/.keras` as Keras itself defaults it."""
    return os.environ.get("KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras"))


def cache_dir():
    """keras_vit's folder under Keras' home: downloaded checkpoints, checksum pins, and the
    execution-mode record."""
    return os.path.join(keras_home(), "keras_vit")
