"""The version guard of every work-around that leans on private Keras code.

Each one checks the Keras release it was written against (`KNOWN_KERAS`) and the
private names it uses, and fails with a one-line error naming both instead of
misbehaving on another release. Imports Keras only, so the optimizers (which
`import keras_vit` registers) can use it.
"""

import keras

from keras_vit.errors import KerasVersionError

__all__ = ["KNOWN_KERAS", "check_private_keras"]

# The Keras releases whose private code the work-arounds were checked against.
KNOWN_KERAS = ((3, 10), (3, 15))


def check_private_keras(feature, module, *names):
    """Fails clearly when `module` lacks `names` or Keras is outside `KNOWN_KERAS`."""
    version = tuple(int(part) for part in keras.__version__.split(".")[:2])
    low, high = KNOWN_KERAS
    missing = [name for name in names if not hasattr(module, name)]
    if missing or not low <= version <= high:
        raise KerasVersionError(
            f"{feature} patches private Keras code checked on Keras {low[0]}.{low[1]} to "
            f"{high[0]}.{high[1]}; this is Keras {keras.__version__}"
            + (f", which lacks {', '.join(missing)}" if missing else "")
            + ". Install a Keras in that range (pip install 'keras>=3.10,<3.16').")
