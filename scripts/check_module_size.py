"""Fail when a production module is over the line limit (run by ``make lint``).

Production code is the app's packages and ``function_app.py``; tests, benchmarks and scripts are not. The
modules still over the limit while they are being split are listed in ``KNOWN_EXCEPTIONS``, the one place
that names them: the list only shrinks. An exception that is no longer over the limit (or no longer exists)
fails too, so the list never keeps a stale entry. ``devhost/`` may have none, and no folder under it holds
more than ``FOLDER_LIMIT`` modules.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

LIMIT = 600

PRODUCTION = ("api", "activities", "orchestrators", "shared", "devhost", "function_app.py")

# Over the limit while being split (none now): a module added here must shrink back under it.
KNOWN_EXCEPTIONS: frozenset[str] = frozenset()

# No exception may be granted under these folders, and none of their folders holds over FOLDER_LIMIT modules.
NO_EXCEPTIONS_UNDER = ("devhost/",)
FOLDER_LIMIT = 15


def production_modules(root: Path, roots: Iterable[str] = PRODUCTION) -> list[Path]:
    """Every production Python module under ``root``, as paths relative to it."""
    found: list[Path] = []
    for name in roots:
        path = root / name
        if path.is_file():
            found.append(path.relative_to(root))
        elif path.is_dir():
            found.extend(p.relative_to(root) for p in sorted(path.rglob("*.py")) if "__pycache__" not in p.parts)
    return found


def line_count(path: Path) -> int:
    """Lines in a file, as ``wc -l`` counts them."""
    with path.open("rb") as f:
        return sum(1 for _ in f)


def problems(root: Path, *, limit: int = LIMIT, exceptions: frozenset[str] = KNOWN_EXCEPTIONS) -> list[str]:
    """What breaks the rule: modules over ``limit`` not excepted, and exceptions that no longer apply."""
    found: list[str] = []
    for name in sorted(exceptions):
        if name.startswith(NO_EXCEPTIONS_UNDER):
            found.append(f"{name}: no module under {', '.join(NO_EXCEPTIONS_UNDER)} may be excepted")
    sizes = {p.as_posix(): line_count(root / p) for p in production_modules(root)}
    for name, lines in sorted(sizes.items()):
        if lines > limit and name not in exceptions:
            found.append(f"{name}: {lines} lines, over the limit of {limit}; split it by concern")
    folders: dict[str, int] = {}
    for name in sizes:
        if name.startswith(NO_EXCEPTIONS_UNDER):
            folder = name.rsplit("/", 1)[0]
            folders[folder] = folders.get(folder, 0) + 1
    for folder, count in sorted(folders.items()):
        if count > FOLDER_LIMIT:
            found.append(f"{folder}/: {count} modules, over the limit of {FOLDER_LIMIT}; group them in packages")
    for name in sorted(exceptions):
        size = sizes.get(name)
        if size is None:
            found.append(f"{name}: listed in KNOWN_EXCEPTIONS but not found; remove it from the list")
        elif size <= limit:
            found.append(f"{name}: {size} lines, within the limit now; remove it from KNOWN_EXCEPTIONS")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Print each problem and return 1 if there is any."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--limit", type=int, default=LIMIT)
    args = parser.parse_args(argv)
    found = problems(args.root, limit=args.limit)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
