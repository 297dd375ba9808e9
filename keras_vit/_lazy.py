"""The one way a keras_vit module loads public names on first use.

`attach` turns a table {public name: the module that defines it} into the
module's `__getattr__`, `__dir__` and `__all__`, in the manner of
scientific-python's `lazy_loader.attach`: a name's module is imported the first
time the name is read, and the value is then kept as a plain attribute. A name
that left the module in 0.2 is still found, with a DeprecationWarning
(`moved_name`, below). Used by keras_vit/__init__.py and the packages' own
(training/, data/, export/).
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__all__ = ["attach", "load", "moved_name", "install_renamed", "RENAMED", "MOVED", "RENAMED_NAMES"]


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
        if name in submodules or f"{module_name}.{name}" in sys.modules \
                or f"{module_name}.{name}" in RENAMED:
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


# Names that moved in 0.2, kept importable for one release with a DeprecationWarning.
# Each module in `RENAMED` is a forwarding module object that `import` finds through
# the finder `install_renamed` adds (which `import keras_vit` runs), so
# `import keras_vit.optimizers` gets it; each name read from it is read from the new home, with a
# DeprecationWarning at the line that reads it. A public name that left a module
# still there (`MOVED`) is found by that module's `__getattr__`, which calls
# `moved_name`, and warns likewise. Remove this section, and what uses it, in 0.3.

RENAMED = {
    "keras_vit.optimizers": "keras_vit.training.optimizers",
    "keras_vit.multiworker_fixes": "keras_vit.training.distribute",
    "keras_vit.weight_mapping": "keras_vit.checkpoints",
    "keras_vit.datasets": "keras_vit.data",
    "keras_vit.resnet": "keras_vit.models.resnet",
    "keras_vit.report": "keras_vit.reports",
    "keras_vit.training.report": "keras_vit.reports",
    "keras_vit.execution": "keras_vit.runtime.execution",
    "keras_vit.precision": "keras_vit.runtime.precision",
    "keras_vit.inference": "keras_vit.runtime.inference",
    "keras_vit.evaluation": "keras_vit.runtime.evaluation",
    "keras_vit.export_quantized": "keras_vit.export.quantized",
    "keras_vit.data.augment": "keras_vit.data.augreg",
    "keras_vit.data.files": "keras_vit.data.image_files",
}


# (old module, name) -> the module that now holds the name.
MOVED = {
    ("keras_vit.preprocessing", "decode_predictions"): "keras_vit.labels",
    ("keras_vit.preprocessing", "imagenet_labels"): "keras_vit.labels",
    ("keras_vit.models", "TokenPooling"): "keras_vit.layers",
    ("keras_vit.export", "model_input"): "keras_vit.normalization",
    ("keras_vit.export", "has_softmax_head"): "keras_vit.models.vit",
}

# Old name -> new name, in every module that has the new one and asks `moved_name`.
RENAMED_NAMES = {"ResNetStem": "ResNetTrunk"}


def moved_name(module, name):
    """The value of a name that left `module` (for that module's `__getattr__`)."""
    if name in RENAMED_NAMES:
        warnings.warn(f"{module}.{name} is now {module}.{RENAMED_NAMES[name]}; the old name will "
                      "be removed in keras_vit 0.3.", DeprecationWarning, stacklevel=3)
        return getattr(sys.modules[module], RENAMED_NAMES[name])
    new = MOVED.get((module, name))
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} is now {new}.{name}; the old name will be removed in "
                  "keras_vit 0.3.", DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(new), name)


def _forwarding_module(old, new):
    """A module standing for `old`: each name read from it warns and comes from `new`."""
    module = types.ModuleType(old, f"Now {new}; this name will be removed in keras_vit 0.3.")

    def __getattr__(name):
        if name.startswith("__"):  # what tools ask every module (__file__, __path__): not moved
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old} is now {new}; the old name will be removed in keras_vit 0.3.",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    module.__getattr__ = __getattr__
    return module


class _RenamedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds each renamed module as its forwarding module, when it is first imported."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in RENAMED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return _forwarding_module(spec.name, RENAMED[spec.name])

    def exec_module(self, module):
        pass


def install_renamed():
    """Lets `import` find a forwarding module for each renamed module (once). Nothing is
    placed in `sys.modules` until an old name is imported, so `import keras_vit` loads no
    module, real or forwarding, under a package it loads on first use (keras_vit.training)."""
    if not any(isinstance(finder, _RenamedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RenamedFinder())
