"""The `keras-vit` command: one module per sub-command, one error policy (`common`)."""

from keras_vit.cli.main import build_parser, main

__all__ = ["main", "build_parser"]
