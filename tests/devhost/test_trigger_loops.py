"""The loops timers and storage listeners share (devhost/triggers.py), in process with a fake host: a poll keeps
going through errors and ends at stop, a stop cancels a run that outlasts its grace, and each invocation is
logged and counted whether it succeeds or fails."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from devhost.functions.invocation import InvocationContext
from devhost.functions.model import FunctionInfo, HostConfig, LoadedApp
from devhost.functions.triggers import TriggerLoops


def tick() -> None:
    """Stands for the app's function; the fake host below runs it."""


FN = FunctionInfo(name="tick", kind="timer", trigger={"type": "timerTrigger"}, bindings=[], user_function=tick)


class FakeHost:
    """The part of DevHost the loops use: records each call, fails when told to, or waits until released."""

    def __init__(self, *, fail: bool = False) -> None:
        self.app = LoadedApp(root=Path("."), host=HostConfig(raw={}), functions=[FN])
        self.public_origin = "http://127.0.0.1:1"
        self.fail = fail
        self.calls: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.block = False

    def build_kwargs(
        self, fn: FunctionInfo, trigger_value: Any, *, origin: str, context: InvocationContext
    ) -> dict[str, Any]:
        return {"value": trigger_value, "id": context.invocation_id}

    async def call_function(self, fn: FunctionInfo, kwargs: dict[str, Any]) -> Any:
        self.calls.append((kwargs["value"], kwargs["id"]))
        self.entered.set()
        if self.block:
            await self.release.wait()
        if self.fail:
            raise RuntimeError("boom")


LOG = logging.getLogger("devhost.test-loops")


def test_an_invocation_is_logged_and_counted_and_a_failure_is_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)

    async def run(fail: bool) -> tuple[bool, TriggerLoops]:
        loops = TriggerLoops(FakeHost(fail=fail), LOG)
        return await loops.invoke(FN, "v", "Because"), loops

    ok, loops = asyncio.run(run(fail=False))
    assert ok and loops.runs == {"tick": 1}
    failed, loops = asyncio.run(run(fail=True))
    assert not failed and loops.runs == {"tick": 1}
    text = caplog.text
    assert "Executing 'Functions.tick' (Reason='Because', Id=" in text
    assert "Executed 'Functions.tick' (Succeeded, Id=" in text and "Executed 'Functions.tick' (Failed, Id=" in text
    assert "Exception while executing function: Functions.tick" in text and "RuntimeError: boom" in text


def test_a_poll_goes_on_through_errors_and_ends_at_stop(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> int:
        loops = TriggerLoops(FakeHost(), LOG)
        calls = 0
        third = asyncio.Event()

        async def step() -> bool:
            nonlocal calls
            calls += 1
            if calls >= 3:
                third.set()
            raise ConnectionError("storage away")

        task = loops.spawn(loops.poll(step, 0.2, "tick"), "poll")
        await asyncio.wait_for(third.wait(), 30)
        await loops.stop(grace_s=60)
        # The poll saw the stop in its pause and returned by itself (no cancel needed).
        assert task.done() and not task.cancelled()
        return calls

    assert asyncio.run(run()) >= 3
    assert "Listener for 'tick' failed (ConnectionError: storage away); retrying" in caplog.text


def test_pause_wakes_at_stop_and_says_so() -> None:
    async def run() -> tuple[bool, bool]:
        loops = TriggerLoops(FakeHost(), LOG)
        early = await loops.pause(0)
        waiting = asyncio.create_task(loops.pause(600))
        await asyncio.sleep(0)
        await loops.stop()
        return early, await asyncio.wait_for(waiting, 30)

    assert asyncio.run(run()) == (False, True)


@pytest.mark.parametrize("grace_s", [0.0, 0.05])
def test_a_stop_cancels_a_run_that_outlasts_its_grace(grace_s: float) -> None:
    async def run() -> tuple[bool, TriggerLoops]:
        host = FakeHost()
        host.block = True
        loops = TriggerLoops(host, LOG)
        loops.spawn(loops.invoke(FN, "v", "Because"), "run")
        await asyncio.wait_for(host.entered.wait(), 30)
        await loops.stop(grace_s)
        return host.release.is_set(), loops

    released, loops = asyncio.run(run())
    # Cancelled inside the function: never released, never counted as a completed run.
    assert not released and loops.runs == {}
