"""Imports keras_vit's weights-cache code in a child process without starting TensorFlow.

`import keras_vit` loads the core (Keras and TensorFlow: about 7 CPU-seconds a process), and
so does `keras_vit.checkpoints`' __init__ (its loader builds models). The catalogue, the cache,
the download and the file formats import neither (tests/checkpoints/test_cache.py checks it).
A test's child that only fetches or checks a file runs PRELUDE first: it registers the two
packages bare (their own module objects, their __init__ not run), so that importing a module
under them runs that module's code alone. Every module the child then uses is the product's
own; only the packages' eager imports are skipped.
"""

PRELUDE = """
import importlib.util, sys
for _name in ("keras_vit", "keras_vit.checkpoints"):
    sys.modules[_name] = importlib.util.module_from_spec(importlib.util.find_spec(_name))
"""

# Printed by a child after its work: the heavy frameworks it imported (none, for the checks).
FRAMEWORKS = """
print("FRAMEWORKS", sorted({m.split(".")[0] for m in sys.modules} & {"tensorflow", "keras", "jax", "torch"}))
"""
