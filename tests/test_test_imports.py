"""tests/ keeps what its tests share in one place (tests/helpers/): no test file imports another test file,
conftest, or a fixtures module of its own."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(path: Path) -> list[str]:
    mods = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            mods += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            mods.append(node.module)
    return mods


def _forbidden(module: str) -> bool:
    top = module.split(".")[0]
    return top.startswith("test_") or top == "conftest" or top.endswith("_fixtures")


def test_no_test_file_imports_another_test_file_or_conftest():
    files = sorted(TESTS.glob("test_*.py")) + sorted((TESTS / "helpers").glob("*.py"))
    bad = [f"{p.relative_to(TESTS)}: {m}" for p in files for m in _imported_modules(p) if _forbidden(m)]
    assert not bad, bad


def test_the_check_catches_an_import_between_test_files(tmp_path):
    """The rule above can fail: a file importing a test module is reported."""
    f = tmp_path / "test_x.py"
    f.write_text("from test_exactness import ARCHS\nimport conftest\nfrom helpers.bench import row\n")
    assert [m for m in _imported_modules(f) if _forbidden(m)] == ["test_exactness", "conftest"]
