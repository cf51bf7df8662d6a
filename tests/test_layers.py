"""The code's shape: the layers of docs/architecture.md hold, functions stay short, old paths still load.

The layer contracts live in pyproject.toml ([tool.importlinter]); this runs them, so an upward
import, a circle between sibling modules or torch reaching the torch-free packages fails the tests
(every import counts, function-level ones included).
"""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dynatree_core", "dynatree_viz")
#: the longest a function may be (issue 31); exceptions need a reason here, at most two
MAX_FUNCTION_LINES = 60
LONG_FUNCTION_EXCEPTIONS: dict[str, str] = {}


def _lint_imports() -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "lint-imports (import-linter) is not installed: pip install -e '.[test]'"
    return subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold():
    run = _lint_imports()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "3 kept, 0 broken" in run.stdout


def test_the_layer_contract_catches_an_upward_import(tmp_path):
    """The contract has teeth: a copy of the packages with one upward import (the policy importing
    the engine, inside a function) fails it."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("assets", "__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    tree = tmp_path / "dynatree_core" / "policy" / "tree.py"
    tree.write_text(tree.read_text() + "\n\ndef _upward():\n    from dynatree_core.engine import loop  # noqa\n")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    run = subprocess.run([exe, "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)})
    assert run.returncode != 0
    assert "dynatree_core.policy.tree -> dynatree_core.engine" in run.stdout


def _functions():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{path.relative_to(ROOT)}:{node.name}", node.end_lineno - node.lineno + 1


def test_functions_are_at_most_60_lines():
    assert len(LONG_FUNCTION_EXCEPTIONS) <= 2
    long = {name: n for name, n in _functions() if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTION_EXCEPTIONS}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_old_flat_module_paths_still_import_with_a_deprecation_warning():
    from dynatree_core.moved import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mod = importlib.import_module(old)
        assert mod is importlib.import_module(new)
        assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught), old
    from dynatree_core.config import DynaTreeConfig  # noqa: F401  (a 0.1 script's import)
    from dynatree_core.models import ModelPair  # noqa: F401


def test_nothing_in_the_project_imports_an_old_path():
    from dynatree_core.moved import MOVED

    used = []
    for base in ("dynatree_core", "dynatree_viz", "tests", "scripts", "notebooks"):
        for path in (ROOT / base).rglob("*.py"):
            if path == Path(__file__).resolve():  # this file imports them on purpose
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                used += [f"{path.relative_to(ROOT)}: {n}" for n in names if n in MOVED]
    assert not used


@pytest.mark.parametrize("name", ["generate", "iterate", "ModelPair", "DynaTreeConfig", "Trace", "GenerationResult",
                                  "PromptLookup", "LookupMix", "Eagle2Config", "SequoiaConfig", "grow_tree"])
def test_the_public_api_keeps_its_names(name):
    import dynatree_core

    assert getattr(dynatree_core, name) is not None and name in dir(dynatree_core)
