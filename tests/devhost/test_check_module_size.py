"""The module-size lint: a production module over the limit fails unless listed; devhost/ may have none."""

from __future__ import annotations

from pathlib import Path

from scripts.check_module_size import main, problems


def _tree(root: Path, sizes: dict[str, int]) -> Path:
    for name, lines in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines)
    return root


def test_a_module_over_the_limit_fails_and_names_itself(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"api/big.py": 11, "api/small.py": 10, "tests/huge.py": 50})
    found = problems(root, limit=10, exceptions=frozenset())
    assert found == ["api/big.py: 11 lines, over the limit of 10; split it by concern"]


def test_a_listed_exception_passes_and_a_stale_one_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"shared/big.py": 11, "shared/split.py": 5})
    assert problems(root, limit=10, exceptions=frozenset({"shared/big.py"})) == []
    stale = problems(root, limit=10, exceptions=frozenset({"shared/big.py", "shared/split.py", "shared/gone.py"}))
    assert any("shared/split.py: 5 lines, within the limit now" in p for p in stale)
    assert any("shared/gone.py: listed in KNOWN_EXCEPTIONS but not found" in p for p in stale)


def test_devhost_may_have_no_exception(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"devhost/durable/big.py": 11})
    found = problems(root, limit=10, exceptions=frozenset({"devhost/durable/big.py"}))
    assert found[0].startswith("devhost/durable/big.py: no module under devhost/ may be excepted")


def test_a_devhost_folder_over_fifteen_modules_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {f"devhost/flat/m{i}.py": 1 for i in range(16)} | {"shared/wide/m.py": 1})
    assert problems(root, exceptions=frozenset()) == [
        "devhost/flat/: 16 modules, over the limit of 15; group them in packages"
    ]


def test_function_app_counts_as_production(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"function_app.py": 11})
    assert main(["--root", str(root), "--limit", "10"]) == 1


def test_the_repository_passes_with_its_exceptions() -> None:
    assert problems(Path(__file__).resolve().parents[2]) == []
