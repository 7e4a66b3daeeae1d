"""Definitions: how long validation of the largest workflow takes, and save / get / list on Azurite.

``python -m bench definitions`` prints the figures (no asserts: speed targets are read, not tested).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

N = 30


def _workflow(nodes: int) -> dict[str, Any]:
    """A chain of agent nodes, each reading the one before: the most mappings to check."""
    chain = [
        {
            "id": f"n{i}",
            "kind": "agent",
            "agent": "writer",
            "after": [f"n{i - 1}"] if i else [],
            "input": {"prompt": {"template": f"Go on from {{n{i - 1}.text}}" if i else "Start with {input.q}"}},
        }
        for i in range(nodes)
    ]
    return {"id": "chain", "name": "Chain", "inputs": {"q": {"type": "string"}}, "nodes": chain}


def _timed(fn: Callable[[], object], runs: int = N) -> tuple[float, float]:
    """Median and p95 in milliseconds."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def main(argv: list[str]) -> int:
    """Print the figures."""
    from azure.data.tables import TableServiceClient

    from devhost.storage.azurite import Azurite
    from shared.definitions.catalog import app_catalog
    from shared.definitions.store import DefinitionStore
    from shared.definitions.validate import check, parse
    from shared.runtime.settings import Settings

    catalog = app_catalog(Settings())
    writer = parse("agent", {"id": "writer", "name": "Writer", "instructions": "Write."})

    class One:
        def find(self, kind: str, def_id: str, version: int | None) -> Any:
            return writer if (kind, def_id) == ("agent", "writer") else None

    flow = _workflow(64)
    median, p95 = _timed(lambda: check("workflow", flow, One(), catalog))
    print(f"validate a 64-node workflow: median {median:.1f} ms, p95 {p95:.1f} ms")
    with tempfile.TemporaryDirectory() as tmp, Azurite(Path(tmp)) as azurite:
        service = TableServiceClient.from_connection_string(azurite.connection_string)
        store = DefinitionStore(service.get_table_client("bench" + uuid.uuid4().hex[:8]))
        store.save(writer, owner=None, create=True)  # creates the table
        counter = iter(range(10_000))

        def save() -> None:
            store.save(parse("agent", {"id": "writer", "name": "W", "instructions": f"v{next(counter)}"}),
                       owner=None, create=False)  # fmt: skip

        for label, fn in (
            ("save a new version", save),
            ("get the latest", lambda: store.get("agent", "writer")),
            ("list versions", lambda: store.versions("agent", "writer")),
            ("list agents", lambda: store.heads("agent")),
        ):
            median, p95 = _timed(fn)
            print(f"Azurite: {label}: median {median:.1f} ms, p95 {p95:.1f} ms")
    return 0
