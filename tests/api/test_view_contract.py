"""The job view's JSON holds to views recorded from real jobs of every mode (tests/api/record_views.py).

Each fixture keeps what ``build_view`` was given (the Durable status, its history, a run's part histories) and the
JSON it answered when recorded. Building it again must give the same JSON, key for key, ``null`` for ``null``:
a client of the HTTP API sees no difference when the view's code changes shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.api.record_views import VIEWS, view_of

FIXTURES = sorted(VIEWS.glob("*.json"))
# Every kind of job the recorder drives: the test is worth little if a mode is missing.
MODES = {"deterministic", "hybrid", "agent", "workflow", "team", "fork"}


def _load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def _differences(old: Any, new: Any, where: str = "$") -> list[str]:
    """Where two JSON values differ (paths), for a readable failure."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = [f"{where}.{k}: missing" for k in old if k not in new]
        found += [f"{where}.{k}: added" for k in new if k not in old]
        for key in old.keys() & new.keys():
            found += _differences(old[key], new[key], f"{where}.{key}")
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _differences(a, b, f"{where}[{i}]")]
    return [] if old == new and type(old) is type(new) else [f"{where}: {old!r} != {new!r}"[:300]]


def test_the_fixtures_cover_every_mode() -> None:
    modes = set()
    for path in FIXTURES:
        view = _load(path)["view"]
        modes.add(view["run"]["kind"] if view["run"] else "fork" if view["forked_from"] else view["mode"])
    assert modes >= MODES, f"no recorded view of {MODES - modes}"


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_the_view_is_the_recorded_json(path: Path) -> None:
    recorded = _load(path)
    assert _differences(recorded["view"], view_of(recorded)) == []


@pytest.mark.parametrize("path", FIXTURES[:3], ids=[p.stem for p in FIXTURES[:3]])
def test_a_log_page_is_the_recorded_page_too(path: Path) -> None:
    # A later page of the log: the cursor and the limit reach the view the same way.
    recorded = _load(path) | {"log_cursor": 3, "log_limit": 2}
    view = view_of(recorded)
    assert [e["seq"] for e in view["log"]["entries"]] == [
        e["seq"] for e in recorded["view"]["log"]["entries"] if e["seq"] >= 3
    ][:2]
