"""Module paths that moved in 0.2, kept importable for one release with a DeprecationWarning.

`import keras_vit.optimizers` (or any name below) gives the module's new home
and warns once; remove this file, and its line in `keras_vit/__init__.py`, in 0.3.
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
