"""Instance management: terminate, suspend/resume, rewind, restart, purge, query paging, restart after stop."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.engine import Engine
from devhost.functions.model import (
    InstanceAlreadyExists,
    InstanceGone,
    InstanceNotFound,
    InvalidRequest,
    PreconditionFailed,
)
from tests.devhost.conftest import EngineRunner, complete, sdk_input, until


def types_of(status: dict[str, Any]) -> list[str]:
    return [e["EventType"] for e in status["historyEvents"]]


def waiting(status: dict[str, Any]) -> bool:
    return "TaskCompleted" in types_of(status)


def test_terminate(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("wait_orch", None, None)
        await until(engine, iid, waiting)
        await engine.terminate(iid, "enough")
        status = await engine.get_status(iid, show_history=True, show_history_output=True)
        assert status is not None
        assert status["runtimeStatus"] == "Terminated" and status["output"] == "enough"
        assert types_of(status)[-2:] == ["ExecutionTerminated", "ExecutionCompleted"]
        assert status["historyEvents"][-1]["OrchestrationStatus"] == "Terminated"
        with pytest.raises(InstanceGone):
            await engine.terminate(iid, "again")
        with pytest.raises(InstanceGone):
            await engine.raise_event(iid, "go", "1")
        with pytest.raises(InstanceNotFound):
            await engine.terminate("missing", None)
        pending = await engine.start_instance("forever_orch", None, None)
        await engine.terminate(pending, None)
        assert (await complete(engine, pending))["runtimeStatus"] == "Terminated"

    run_engine(body)


def test_late_activity_result_after_terminate_is_discarded(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("any_orch", None, None)
        await until(engine, iid, lambda s: s["runtimeStatus"] == "Running")
        await engine.terminate(iid, "stop")
        await engine.wait_for_idle()
        status = await engine.get_status(iid, show_history=True)
        assert status is not None and status["runtimeStatus"] == "Terminated"
        # The slow activity finished after the terminate: its result was discarded.
        assert all(e.get("FunctionName") != "sleepy" for e in status["historyEvents"])
        assert engine.core.store.activities() == []

    run_engine(body)


def test_suspend_and_resume_hold_events(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("wait_orch", None, None)
        await until(engine, iid, waiting)
        await engine.suspend(iid, "pause")
        assert (await engine.get_status(iid) or {})["runtimeStatus"] == "Suspended"
        with pytest.raises(PreconditionFailed):
            await engine.suspend(iid, "twice")
        await engine.raise_event(iid, "go", '"held"')
        await engine.wait_for_idle()
        status = await engine.get_status(iid, show_history=True)
        assert status is not None and status["runtimeStatus"] == "Suspended"
        assert "EventRaised" not in types_of(status)
        await engine.resume(iid, "continue")
        with pytest.raises(PreconditionFailed):
            await engine.resume(iid, "not suspended")
        status = await complete(engine, iid)
        assert status["output"] == ["Hello one!", "Hello held!"]
        full = await engine.get_status(iid, show_history=True)
        assert full is not None
        kinds = types_of(full)
        assert kinds.index("ExecutionSuspended") < kinds.index("ExecutionResumed") < kinds.index("EventRaised")
        with pytest.raises(InstanceGone):
            await engine.suspend(iid, None)

    run_engine(body)


def test_rewind_reruns_failed_activity(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("rewind_orch", None, sdk_input({"key": "rw", "fail_times": 1}))
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        await engine.rewind(iid, "fixed it")
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == ["Hello pre!", "rw ok after 2"]
        full = await engine.get_status(iid, show_history=True)
        assert full is not None and "TaskFailed" not in types_of(full)
        with pytest.raises(PreconditionFailed):
            await engine.rewind(iid, "not failed")
        with pytest.raises(InstanceNotFound):
            await engine.rewind("missing", None)

    run_engine(body)


def test_rewind_failed_sub_orchestration(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("rewind_parent", "rp", sdk_input({"key": "rws", "fail_times": 1}))
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        assert "Orchestrator function 'flaky_child' failed" in status["output"]
        assert (await engine.get_status("rp-child") or {})["runtimeStatus"] == "Failed"
        await engine.rewind(iid, "retry the child")
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == ["Hello parent!", "rws ok after 2"]
        assert (await engine.get_status("rp-child") or {})["runtimeStatus"] == "Completed"

    run_engine(body)


def test_restart(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("chain_fn", "orig", sdk_input("Rex"))
        await complete(engine, iid)
        new_id = await engine.restart(iid)
        assert new_id != iid and len(new_id) == 32
        assert (await complete(engine, new_id))["output"][0] == "Hello Rex!"
        same = await engine.restart(iid, new_instance_id=False)
        assert same == iid
        assert (await complete(engine, same))["output"] == ["Hello Rex!", 42, "orig"]
        running = await engine.start_instance("forever_orch", "busy", None)
        with pytest.raises(InstanceAlreadyExists):
            await engine.restart(running, new_instance_id=False)
        with pytest.raises(InstanceNotFound):
            await engine.restart("missing")

    run_engine(body)


def test_purge(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await complete_id(engine, "chain")
        running = await engine.start_instance("forever_orch", None, None)
        assert await engine.purge(running) == 0  # an instance in flight is kept
        assert await engine.purge(iid) == 1
        assert await engine.get_status(iid) is None
        with pytest.raises(InstanceNotFound):
            await engine.purge(iid)
        done = [await complete_id(engine, "chain") for _ in range(3)]
        failed = await complete_id(engine, "raise_orch")
        start = datetime.now(UTC) - timedelta(minutes=1)
        assert await engine.purge_by(start, None, ["Failed"]) == 1
        assert await engine.get_status(failed) is None
        assert await engine.purge_by(start, None, ["Running"]) == 0  # running instances are never purged
        assert await engine.purge_by(start, None, None) == 3
        assert all([await engine.get_status(i) is None for i in done])
        assert (await engine.get_status(running) or {})["runtimeStatus"] == "Running"

    run_engine(body)


async def complete_id(engine: Engine, name: str) -> str:
    iid = await engine.start_instance(name, None, None)
    await complete(engine, iid)
    return iid


def test_query_filters_and_paging(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        before = datetime.now(UTC) - timedelta(seconds=5)
        for i in range(5):
            await complete(engine, await engine.start_instance("chain_fn", f"job-{i}", sdk_input(f"n{i}")))
        await engine.start_instance("forever_orch", "wait-1", None)
        await complete(engine, await engine.start_instance("raise_orch", "bad-1", None))
        everything, token = await engine.query()
        assert token is None and [s["instanceId"] for s in everything][:5] == [f"job-{i}" for i in range(5)]
        page, token = await engine.query(prefix="job-", top=2)
        seen = [s["instanceId"] for s in page]
        while token:
            page, token = await engine.query(prefix="job-", top=2, continuation=token)
            seen.extend(s["instanceId"] for s in page)
        assert seen == [f"job-{i}" for i in range(5)]
        running, _ = await engine.query(statuses=["Running", "Pending"])
        assert [s["instanceId"] for s in running] == ["wait-1"]
        failed, _ = await engine.query(statuses=["failed"])
        assert [s["instanceId"] for s in failed] == ["bad-1"]
        assert (await engine.query(created_to=before))[0] == []
        assert len((await engine.query(created_from=before))[0]) == 7
        no_input, _ = await engine.query(prefix="job-0", show_input=False)
        assert no_input[0]["input"] is None and no_input[0]["output"][0] == "Hello n0!"
        with pytest.raises(InvalidRequest):
            await engine.query(statuses=["Sleeping"])
        with pytest.raises(InvalidRequest):
            await engine.query(continuation="!!!")

    run_engine(body)


def test_status_history_presentation_flags(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("chain_fn", None, sdk_input("Zed"))
        await complete(engine, iid)
        plain = await engine.get_status(iid)
        assert plain is not None and "historyEvents" not in plain
        assert set(plain) == {
            "name",
            "instanceId",
            "runtimeStatus",
            "input",
            "customStatus",
            "output",
            "createdTime",
            "lastUpdatedTime",
        }
        assert len(plain["createdTime"]) == 20 and plain["createdTime"].endswith("Z")
        hidden = await engine.get_status(iid, show_history=True, show_input=False)
        assert hidden is not None and hidden["input"] is None
        for event in hidden["historyEvents"]:
            assert "Input" not in event and "Result" not in event
            assert "EventId" not in event and "IsPlayed" not in event and "TaskScheduledId" not in event
        started = hidden["historyEvents"][0]
        assert started["FunctionName"] == "chain_fn" and "OrchestrationInstance" not in started
        full = await engine.get_status(iid, show_history=True, show_history_output=True)
        assert full is not None
        completed = full["historyEvents"][1]
        assert completed["EventType"] == "TaskCompleted" and completed["Result"] == "Hello Zed!"
        assert completed["Input"] == "Zed" and completed["ScheduledTime"] <= completed["Timestamp"]
        assert full["historyEvents"][-1]["Result"] == ["Hello Zed!", 42, iid]

    run_engine(body)


def test_restart_after_stop_mid_wait(run_engine: EngineRunner, tmp_path: Path) -> None:
    data = tmp_path / "shared-data"

    async def first(engine: Engine) -> tuple[str, str, str]:
        waiter = await engine.start_instance("wait_orch", "survivor", None)
        timer = await engine.start_instance("timer_orch", "sleeper", sdk_input(0.5))
        slow = await engine.start_instance("any_orch", "slowpoke", None)
        await until(engine, waiter, waiting)
        await until(engine, timer, lambda s: "TimerCreated" in types_of(s))
        return waiter, timer, slow

    waiter, timer, slow = run_engine(first, data_dir=data, grace_s=0.0)

    async def second(engine: Engine) -> None:
        before = await engine.get_status(waiter, show_history=True)
        assert before is not None and before["runtimeStatus"] == "Running"
        await engine.raise_event(waiter, "go", '"after restart"')
        status = await complete(engine, waiter)
        assert status["output"] == ["Hello one!", "Hello after restart!"]
        full = await engine.get_status(waiter, show_history=True)
        assert full is not None
        assert types_of(full) == [
            "ExecutionStarted",
            "TaskCompleted",
            "EventRaised",
            "TaskCompleted",
            "ExecutionCompleted",
        ]
        assert (await complete(engine, timer))["output"] >= 0.5
        assert (await complete(engine, slow))["output"] == "Hello fast!"

    run_engine(second, data_dir=data)


def test_stop_persists_finished_activity_results(run_engine: EngineRunner, tmp_path: Path) -> None:
    data = tmp_path / "data-stop"

    async def first(engine: Engine) -> str:
        iid = await engine.start_instance("sleepy_then_wait", "sleeper", sdk_input(0.3))
        for _ in range(3000):
            if engine.activity_runner.active:
                break
            await asyncio.sleep(0.01)
        return iid  # stop() now waits for the running activity and persists its result

    iid = run_engine(first, data_dir=data, grace_s=10.0)

    async def second(engine: Engine) -> None:
        status = await engine.get_status(iid, show_history=True)
        assert status is not None and "TaskCompleted" in [e["EventType"] for e in status["historyEvents"]]
        await engine.raise_event(iid, "go", "1")
        status = await complete(engine, iid)
        assert status["output"] == [0.3, 1]
        assert engine.activities_run == 0  # the activity did not run again after the restart

    run_engine(second, data_dir=data)


def test_counters_count_episodes_and_activity_runs(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        before_episodes, before_runs = engine.episodes_run, engine.activities_run
        await complete(engine, await engine.start_instance("chain", None, None))
        assert engine.activities_run - before_runs == 3
        assert engine.episodes_run - before_episodes == 4

    run_engine(body)


def test_rewind_reruns_last_attempt_of_exhausted_retry(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        args = {"key": "rwr", "fail_times": 2, "attempts": 2}
        iid = await engine.start_instance("retry_orch", None, sdk_input(args))
        assert (await complete(engine, iid))["runtimeStatus"] == "Failed"
        await engine.rewind(iid, "flaky recovered")
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == ["rwr ok after 3", "Hello retry!"]
        events = [json.loads(t) for t in engine.core.store.history(iid)]
        ids = [e["EventId"] for e in events if e["EventType"] in (4, 10)]
        assert ids == list(range(len(ids)))  # attempt 0, timer 1, attempt 2 (re-run), then say_hello 3

    run_engine(body)


def test_second_engine_on_the_same_store_is_refused(run_engine: EngineRunner, tmp_path: Path) -> None:
    data = tmp_path / "locked"

    async def body(engine: Engine) -> None:
        other = Engine(engine.app, data)
        with pytest.raises(RuntimeError, match="in use by another devhost engine"):
            await other.start()

    run_engine(body, data_dir=data)
    # The lock is released on stop: a new engine can open the store.
    run_engine(lambda engine: engine.query(), data_dir=data)
