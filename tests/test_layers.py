"""The code's shape: the layers of docs/architecture.md hold, functions stay short, no old path survives.

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
    assert "4 kept, 0 broken" in run.stdout


@pytest.mark.parametrize("where, upward", [
    ("policy/tree.py", "dynatree_core.engine import loop"),  # a layer of the packages
    ("runtime/cache/rows.py", "dynatree_core.runtime.tree import tree"),  # a room of the runtime
])
def test_the_layer_contracts_catch_an_upward_import(tmp_path, where, upward):
    """The contracts have teeth: a copy of the packages with one upward import (inside a function) fails."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("assets", "__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / "dynatree_core" / where
    module.write_text(module.read_text() + f"\n\ndef _upward():\n    from {upward}  # noqa\n")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    run = subprocess.run([exe, "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)})
    assert run.returncode != 0
    source = "dynatree_core." + where.removesuffix(".py").replace("/", ".")
    assert f"{source} -> {upward.split(' import ')[0]}" in run.stdout


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
#: the flat files of ``runtime/`` that moved into its rooms (tree, static, cache, model): no shim either
OLD_RUNTIME_MODULES = (
    "batch_cache", "compat", "compile_cache", "device_cost", "device_rerank", "device_tables", "device_tail",
    "device_tree", "draft_phase", "entry_book", "fast_path", "fused", "host_tree", "level_step", "linear_kernels",
    "plumbing", "static_cache", "static_draft", "target_cache",
)
_OLD = "|".join(OLD_MODULES + ("moved",))  # moved.py: the shim itself
_OLD_RUNTIME = "|".join(OLD_RUNTIME_MODULES)
#: ``dynatree_core.<old>`` as a module path (followed by a dot, a space, a quote, a bracket or the end),
#: or ``dynatree_core/<old>.py`` as a file; ``runtime.<old>`` or ``runtime/<old>`` for a runtime file
#: that moved into a room (with or without ``dynatree_core`` before it)
OLD_PATH = re.compile(r"\bdynatree_core(\.(" + _OLD + r")(?=[.\s`'\")\]:,]|$)|/(" + _OLD + r")\.py\b)"
                      r"|\bruntime[./](" + _OLD_RUNTIME + r")\b", re.M)
#: where names are written down: code, scripts, notebooks (prose included), documents, dated records'
#: scripts and notes (their JSON outputs and logs are data, left as they were written)
SCANNED = ("dynatree_core", "dynatree_viz", "tests", "scripts", "notebooks", "docs")
TEXT_SUFFIXES = (".py", ".md", ".sh", ".txt", ".toml", ".cfg", ".ipynb")


def _texts():
    for base in SCANNED:
        for path in sorted((ROOT / base).rglob("*")):
            if path.suffix in TEXT_SUFFIXES and path != Path(__file__).resolve() and path.is_file():
                yield path.relative_to(ROOT), path.read_text(encoding="utf-8", errors="ignore")
    yield Path("README.md"), (ROOT / "README.md").read_text(encoding="utf-8")
    yield Path("pyproject.toml"), (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_no_old_module_path_is_importable_or_named_anywhere():
    """No shim: the old paths do not import, and no code, script, notebook or document names one,
    as a module or as a file (``dynatree_core.moved`` included)."""
    assert importlib.util.find_spec("dynatree_core.moved") is None
    for old in OLD_MODULES + tuple(f"runtime.{m}" for m in OLD_RUNTIME_MODULES):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"dynatree_core.{old}")
    named = [f"{path}: {m.group(0)}" for path, text in _texts() for m in OLD_PATH.finditer(text)]
    assert not named, named


def test_the_old_path_scan_catches_each_form():
    """The scan has teeth: a module path, a file path and the shim's name are each found; new paths are not."""
    for text in ("from dynatree_core.config import X", "see `dynatree_core.tree`.", "dynatree_core/models.py",
                 "import dynatree_core.moved", "(dynatree_core/calibrate.py)",
                 "from dynatree_core.runtime.device_tree import DeviceTree", "dynatree_core/runtime/plumbing.py",
                 "(`runtime/fused.py`)", "`runtime.target_cache.TargetCache`", "runtime/device_tree*.py"):
        assert OLD_PATH.search(text), text
    for text in ("dynatree_core.policy.config", "dynatree_core/policy/tree.py", "dynatree_core.engine.calibrate",
                 "dynatree_core.trace_io", "dynatree_core/treeview.py", "dynatree_core.runtime.tree.tree.DeviceTree",
                 "dynatree_core/runtime/static/regions.py", "runtime.model.compat", "dynatree_core.runtime.backend",
                 "dynatree_core.distill.runtime", 'runtime="compiled"', "runtime/cache/dynamic.py"):
        assert not OLD_PATH.search(text), text


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_dotted_dynatree_name_written_down_resolves():
    """A name such as ``dynatree_core.policy.growth.grow_tree`` in a docstring, a document or a script
    imports (the module) and exists (the attribute): references follow the code when it moves."""
    names = {m.group(0).rstrip(".") for _, text in _texts()
             for m in re.finditer(r"\bdynatree_(?:core|viz)(?:\.[A-Za-z_]\w*)+", text)}
    assert len(names) > 100
    assert _resolves("dynatree_core.policy.growth.grow_tree") and not _resolves("dynatree_core.policy.tree.grow_tree")
    unresolved = sorted(n for n in names if not _resolves(n))
    assert not unresolved, unresolved


@pytest.mark.parametrize("name", ["generate", "iterate", "ModelPair", "DynaTreeConfig", "Trace", "GenerationResult",
                                  "PromptLookup", "LookupMix", "Eagle2Config", "SequoiaConfig", "grow_tree"])
def test_the_public_api_keeps_its_names(name):
    import dynatree_core

    assert getattr(dynatree_core, name) is not None and name in dir(dynatree_core)
