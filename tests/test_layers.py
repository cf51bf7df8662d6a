"""The code's shape: the layers of docs/architecture.md hold, functions stay short, old paths still load.

The layer contracts live in pyproject.toml ([tool.importlinter]); this runs them, so an upward
import, a circle between sibling modules or torch reaching the torch-free packages fails the tests
(every import counts, function-level ones included).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
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


#: the flat 0.1 modules that became layered packages: no shim answers for them, and nothing names them
OLD_MODULES = (
    "calibrate", "checks", "collector", "compat", "config", "cost_model", "default_pair", "device_tree",
    "draft_model", "feature_draft", "history", "linear_kernels", "loading", "masks", "metrics", "models",
    "oracle", "plumbing", "reliability", "sequoia", "session", "sync_audit", "target_cache", "testing",
    "trace", "tree",
)
#: ``dynatree_core.<old>`` as a module path (followed by a dot, a space, a quote, a bracket or the end)
OLD_PATH = re.compile(r"\bdynatree_core\.(" + "|".join(OLD_MODULES) + r")(?=[.\s`'\")\]:,]|$)", re.M)


def test_no_old_module_path_is_importable_or_named_anywhere():
    """No shim: the old paths do not import, and no code, script, notebook or document names one
    (recorded JSON outputs of dated runs are data, left as they were written)."""
    assert importlib.util.find_spec("dynatree_core.moved") is None
    for old in OLD_MODULES:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"dynatree_core.{old}")
    named = []
    for base in ("dynatree_core", "dynatree_viz", "tests", "scripts", "notebooks", "docs"):
        for path in (ROOT / base).rglob("*"):
            if path.suffix not in (".py", ".md", ".sh", ".txt", ".toml") or path == Path(__file__).resolve():
                continue
            named += [f"{path.relative_to(ROOT)}: {m.group(0)}"
                      for m in OLD_PATH.finditer(path.read_text(encoding="utf-8", errors="ignore"))]
    named += [f"README.md: {m.group(0)}" for m in OLD_PATH.finditer((ROOT / "README.md").read_text())]
    assert not named, named


@pytest.mark.parametrize("name", ["generate", "iterate", "ModelPair", "DynaTreeConfig", "Trace", "GenerationResult",
                                  "PromptLookup", "LookupMix", "Eagle2Config", "SequoiaConfig", "grow_tree"])
def test_the_public_api_keeps_its_names(name):
    import dynatree_core

    assert getattr(dynatree_core, name) is not None and name in dir(dynatree_core)
