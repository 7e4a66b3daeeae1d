"""The api/ handlers share helpers through api/common.py, never each other's private names."""

from __future__ import annotations

import ast
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "api"


def _private_imports(path: Path) -> list[str]:
    """Every ``from api.X import _name`` and ``api.X._name`` in one module of the api package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("api."):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "api":
                found.append(f"api.{base.attr}.{node.attr}")
    return found


def test_no_api_module_imports_another_ones_private_names() -> None:
    offenders = {p.name: names for p in sorted(API.glob("*.py")) if (names := _private_imports(p))}
    assert offenders == {}


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    module = tmp_path / "handler.py"
    module.write_text("from api.jobs import _status, request_caller\nimport api.view\nx = api.view._line\n")
    assert _private_imports(module) == ["api.jobs._status", "api.view._line"]
