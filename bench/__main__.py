"""``python -m bench [name ...]``: run the benchmarks and print their figures.

Each module in this package with a ``main(argv) -> int`` is a benchmark; with no names, all run.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import bench


def main(argv: list[str]) -> int:
    """Run the named benchmarks (default: all) in name order."""
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_"))
    benchmarks = [n for n in names if hasattr(importlib.import_module(f"bench.{n}"), "main")]
    chosen = argv or benchmarks
    unknown = [n for n in chosen if n not in benchmarks]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {benchmarks}", file=sys.stderr)
        return 2
    status = 0
    for name in chosen:
        print(f"\n=== bench.{name} ===", flush=True)
        status |= importlib.import_module(f"bench.{name}").main([])
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
