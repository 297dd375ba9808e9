"""`python -m keras_vit.cli ...`, the same as `keras-vit ...`."""

import sys

from keras_vit.cli.main import main

if __name__ == "__main__":  # documentation tools import this module; only running it runs the CLI
    sys.exit(main())
