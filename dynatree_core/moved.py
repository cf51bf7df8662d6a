"""Old import paths of the modules that moved into layered packages (0.1's flat ``dynatree_core``).

``import dynatree_core.config`` and ``from dynatree_core.models import ModelPair`` still work: a
meta-path finder answers each old name with the module at its new home, with a
:class:`DeprecationWarning` naming the new path (``dynatree_core.engine`` and ``.drafters``, now
packages, re-export what the old modules had). Nothing in this project imports
the old paths (``tests/test_layers.py`` checks it); they exist for users' scripts and notebooks.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module -> its home now
MOVED: dict[str, str] = {
    "dynatree_core.checks": "dynatree_core.policy.checks",
    "dynatree_core.config": "dynatree_core.policy.config",
    "dynatree_core.cost_model": "dynatree_core.policy.cost_model",
    "dynatree_core.history": "dynatree_core.policy.history",
    "dynatree_core.sequoia": "dynatree_core.policy.sequoia",
    "dynatree_core.masks": "dynatree_core.policy.masks",
    "dynatree_core.tree": "dynatree_core.policy.tree",
    "dynatree_core.trace": "dynatree_core.records.trace",
    "dynatree_core.metrics": "dynatree_core.records.metrics",
    "dynatree_core.oracle": "dynatree_core.records.oracle",
    "dynatree_core.reliability": "dynatree_core.records.reliability",
    "dynatree_core.compat": "dynatree_core.runtime.compat",
    "dynatree_core.plumbing": "dynatree_core.runtime.plumbing",
    "dynatree_core.target_cache": "dynatree_core.runtime.target_cache",
    "dynatree_core.device_tree": "dynatree_core.runtime.device_tree",
    "dynatree_core.linear_kernels": "dynatree_core.runtime.linear_kernels",
    "dynatree_core.draft_model": "dynatree_core.drafters.draft_model",
    "dynatree_core.feature_draft": "dynatree_core.drafters.feature_draft",
    "dynatree_core.models": "dynatree_core.pairs.pair",
    "dynatree_core.loading": "dynatree_core.pairs.loading",
    "dynatree_core.default_pair": "dynatree_core.pairs.default_pair",
    "dynatree_core.testing": "dynatree_core.pairs.tiny",
    "dynatree_core.collector": "dynatree_core.engine.collector",
    "dynatree_core.session": "dynatree_core.engine.session",
    "dynatree_core.calibrate": "dynatree_core.engine.calibrate",
    "dynatree_core.sync_audit": "dynatree_core.engine.sync_audit",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):  # the new module itself stands in for the old name
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:  # already executed under its new name
        pass


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old flat module names and hands out the modules at their new homes."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} moved to {new}; import it from there (the old path will be removed)",
                      DeprecationWarning, stacklevel=3)
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
