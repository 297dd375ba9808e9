"""Names that moved in 0.2, kept importable for one release with a DeprecationWarning.

`import keras_vit.optimizers` (or any module in `RENAMED`) gives the module's
new home; a public name that left a module still there (`MOVED`) is found by
that module's `__getattr__`, which calls `moved_name`. Both warn. Remove this
file, and what uses it, in 0.3.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

RENAMED = {
    "keras_vit.optimizers": "keras_vit.training.distribute",
    "keras_vit.multiworker_fixes": "keras_vit.training.distribute",
    "keras_vit.weight_mapping": "keras_vit.checkpoints",
    "keras_vit.datasets": "keras_vit.data",
    "keras_vit.resnet": "keras_vit.models.resnet",
    "keras_vit.report": "keras_vit.training.report",
}


# (old module, name) -> the module that now holds the name.
MOVED = {
    ("keras_vit.preprocessing", "decode_predictions"): "keras_vit.labels",
    ("keras_vit.preprocessing", "imagenet_labels"): "keras_vit.labels",
    ("keras_vit.models", "TokenPooling"): "keras_vit.layers",
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


class _RenamedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in RENAMED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = RENAMED[spec.name]
        warnings.warn(f"{spec.name} is now {new}; the old name will be removed in keras_vit 0.3.",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass  # the module returned by create_module is already executed


def install():
    if not any(isinstance(finder, _RenamedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_RenamedModuleFinder())
