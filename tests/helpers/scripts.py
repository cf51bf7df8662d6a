"""The project's scripts (``scripts/*.py``) as modules, for the tests that call into them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: where the scripts live
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str, register: bool = False) -> ModuleType:
    """``scripts/<name>.py`` loaded as a fresh module named ``name``; ``register``: also put it in
    ``sys.modules`` first (a script whose dataclasses look their module up there needs it)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
