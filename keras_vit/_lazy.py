"""The one way a keras_vit module loads public names on first use.

`attach` turns a table {public name: the module that defines it} into the
module's `__getattr__`, `__dir__` and `__all__`, in the manner of
scientific-python's `lazy_loader.attach`: a name's module is imported the first
time the name is read, and the value is then kept as a plain attribute. A name
that left the module in 0.2 is still found, with a DeprecationWarning
(keras_vit/_renamed.py). Used by keras_vit/__init__.py and
keras_vit/training/__init__.py.
"""

import importlib
import sys

from keras_vit._renamed import moved_name

__all__ = ["attach", "load"]


def attach(module_name, names, submodules=()):
    """`(__getattr__, __dir__, __all__)` for `module_name`, whose `names` ({name: module})
    and `submodules` (its own, by short name) load on first use."""
    public = list(names)

    def __getattr__(name):
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            setattr(sys.modules[module_name], name, value)  # later reads skip this function
            return value
        # A submodule, or a module a forwarding entry in sys.modules stands for (an old name,
        # found as `import` finds it).
        if name in submodules or f"{module_name}.{name}" in sys.modules:
            return importlib.import_module(f"{module_name}.{name}")
        return moved_name(module_name, name)  # raises AttributeError for names never there

    def __dir__():
        return sorted({*public, *submodules})

    return __getattr__, __dir__, public


def load(module_name, names):
    """Imports now what `names` ({name: module}) would load on first use."""
    module = sys.modules[module_name]
    for name, source in names.items():
        setattr(module, name, getattr(importlib.import_module(source), name))
