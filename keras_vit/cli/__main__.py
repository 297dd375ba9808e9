"""`python -m keras_vit.cli ...`, the same as `keras-vit ...`."""

import sys

from keras_vit.cli.main import main

sys.exit(main())
