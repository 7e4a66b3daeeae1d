"""Engine fixtures: run an async test body against a started in-process Engine on a real SQLite file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from devhost.durable.engine import Engine
from devhost.functions.loader import load_app

APPS = Path(__file__).resolve().parents[1] / "apps"
BASIC_APP = APPS / "durable_basic"
T = TypeVar("T")
EngineRunner = Callable[..., Any]


def sdk_input(value: Any) -> str:
    """The body ``DurableOrchestrationClient.start_new(client_input=value)`` sends (JSON text of JSON text)."""
    return json.dumps(json.dumps(value))


def event_input(value: Any) -> str:
    """The EventRaised input the extension stores for ``client.raise_event(..., data=value)``."""
    return json.dumps(json.dumps(value))


@pytest.fixture
def run_engine(tmp_path: Path) -> EngineRunner:
    """Call ``run_engine(body)`` with ``async def body(engine)``; returns body's result.

    Keyword arguments: ``app_dir`` (default tests/apps/durable_basic), ``data_dir`` (default a
    fresh tmp dir; pass the same one twice to test restarts), ``grace_s`` for ``stop``.
    """

    def run(
        body: Callable[[Engine], Awaitable[T]],
        *,
        app_dir: Path = BASIC_APP,
        data_dir: Path | None = None,
        grace_s: float = 5.0,
    ) -> T:
        async def main() -> T:
            engine = Engine(load_app(app_dir), data_dir or tmp_path / "data")
            await engine.start()
            try:
                return await body(engine)
            finally:
                await engine.stop(grace_s=grace_s)

        return asyncio.run(main())

    return run


async def complete(engine: Engine, instance_id: str, wait_s: float = 30.0) -> dict[str, Any]:
    """Wait for a terminal status and return it (fails the test if it never arrives)."""
    status = await engine.wait_for_completion(instance_id, wait_s)
    assert status is not None, f"instance {instance_id} vanished"
    assert status["runtimeStatus"] in ("Completed", "Failed", "Terminated"), status
    return status


async def until(engine: Engine, instance_id: str, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll an instance's status (with history) until ``predicate`` holds; gives up after 30 s."""
    for _ in range(3000):
        status = await engine.get_status(instance_id, show_history=True, show_history_output=True)
        if status is not None and predicate(status):
            return status
        await asyncio.sleep(0.01)
    raise AssertionError(f"condition never met for {instance_id}: {status}")
