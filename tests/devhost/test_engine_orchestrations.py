"""Orchestration behaviour through the real SDK: chaining, fan-out, retries, sub-orchestrations, timers, events."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from devhost.durable.engine import Engine
from tests.devhost.conftest import EngineRunner, complete, event_input, sdk_input, until


def seq_of(event: dict[str, Any]) -> int | None:
    if event["EventType"] in (4, 10):
        return event.get("EventId")
    return event.get("TaskScheduledId", event.get("TimerId"))


def history_types(status: dict[str, Any]) -> list[str]:
    return [e["EventType"] for e in status["historyEvents"]]


def test_chaining_by_name(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("chain", None, None)
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed"
        assert status["output"] == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
        assert status["input"] is None
        full = await engine.get_status(iid, show_history=True, show_history_output=True)
        assert full is not None
        assert history_types(full) == [
            "ExecutionStarted",
            "TaskCompleted",
            "TaskCompleted",
            "TaskCompleted",
            "ExecutionCompleted",
        ]
        first = full["historyEvents"][1]
        assert first["FunctionName"] == "say_hello" and first["Result"] == "Hello Tokyo!" and first["Input"] == "Tokyo"
        assert full["historyEvents"][-1]["OrchestrationStatus"] == "Completed"

    run_engine(body)


def test_chaining_by_function_object_and_input(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("chain_fn", "my-chain", sdk_input("Ada"))
        assert iid == "my-chain"
        status = await complete(engine, iid)
        assert status["output"] == ["Hello Ada!", 42, "my-chain"]
        assert status["input"] == json.dumps("Ada")  # status input is the stored text parsed once, as on Azure

    run_engine(body)


def test_fan_out_fan_in_100(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("fan_out", None, sdk_input(100))
        status = await complete(engine, iid)
        assert status["output"] == sum(2 * i for i in range(100))
        full = await engine.get_status(iid, show_history=True)
        assert full is not None
        assert history_types(full).count("TaskCompleted") == 100
        assert "Result" not in full["historyEvents"][1]  # only with showHistoryOutput

    run_engine(body)


def test_retry_fails_twice_then_succeeds(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        args = {"key": "r1", "fail_times": 2, "attempts": 3}
        iid = await engine.start_instance("retry_orch", None, sdk_input(args))
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == ["r1 ok after 3", "Hello retry!"]
        raw = engine.core.store.history(iid)  # the stored DTFx events, retry ids as DTFx numbers them
        events = [json.loads(t) for t in raw]
        shaped = [
            (
                e["EventType"],
                e.get("EventId") if e["EventType"] in (4, 10) else e.get("TaskScheduledId", e.get("TimerId")),
            )
            for e in events
            if e["EventType"] in (4, 5, 6, 10, 11)
        ]
        assert shaped == [
            (4, 0),
            (6, 0),
            (10, 1),
            (11, 1),
            (4, 2),
            (6, 2),
            (10, 3),
            (11, 3),
            (4, 4),
            (5, 4),
            (4, 5),
            (5, 5),
        ]

    run_engine(body)


def test_retry_exhausts_attempts(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        args = {"key": "r2", "fail_times": 5, "attempts": 2}
        iid = await engine.start_instance("retry_orch", None, sdk_input(args))
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        assert status["output"].startswith(
            "Orchestrator function 'retry_orch' failed: Activity function 'flaky' failed:"
        )
        assert "attempt 2 of r2 failed" in status["output"]
        caught = await engine.start_instance("retry_orch", None, sdk_input({**args, "key": "r3", "catch": True}))
        status = await complete(engine, caught)
        assert status["runtimeStatus"] == "Completed"
        assert status["output"].startswith("caught: Activity function 'flaky' failed: ValueError: attempt 2 of r3")

    run_engine(body)


def test_sub_orchestrations_with_and_without_retry(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        args = {"key": "sub1", "fail_times": 1, "attempts": 3}
        iid = await engine.start_instance("parent_orch", "parent-1", sdk_input(args))
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed", status
        first, second, third = status["output"]
        assert first["greeting"] == "Hello Paris!" and first["parent"] == "parent-1"
        assert first["id"].endswith(":0")  # default child id "{parentExecutionId}:{seq}"
        assert second == {"greeting": "Hello Oslo!", "parent": "parent-1", "id": "parent-1-kid"}
        assert third == "sub1 ok after 2"
        child = await engine.get_status("parent-1-kid")
        assert child is not None and child["runtimeStatus"] == "Completed" and child["input"] == json.dumps("Oslo")
        failed_children, _ = await engine.query(statuses=["Failed"])
        assert [c["name"] for c in failed_children] == ["flaky_child"]

    run_engine(body)


def test_durable_timer(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("timer_orch", None, sdk_input(0.2))
        status = await complete(engine, iid)
        assert status["output"] >= 0.2
        full = await engine.get_status(iid, show_history=True)
        assert full is not None
        assert history_types(full) == ["ExecutionStarted", "TimerCreated", "TimerFired", "ExecutionCompleted"]

    run_engine(body)


def test_timer_event_race_event_wins_and_cancels_timer(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("race_orch", None, sdk_input(30))
        await until(engine, iid, lambda s: "TimerCreated" in history_types(s))
        await engine.raise_event(iid, "Approval", event_input(True))
        status = await complete(engine, iid)
        assert status["output"] == {"approved": "true"}  # client-raised data arrives as JSON text
        assert engine.core.store.timers() == []  # cancelled timer is gone
        full = await engine.get_status(iid, show_history=True)
        assert full is not None and "TimerFired" not in history_types(full)

    run_engine(body)


def test_timer_event_race_timer_wins(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("race_orch", None, sdk_input(0.2))
        status = await complete(engine, iid)
        assert status["output"] == "timed out"
        with pytest.raises(Exception) as info:
            await engine.raise_event(iid, "Approval", "true")
        assert type(info.value).__name__ == "InstanceGone"

    run_engine(body)


def test_external_events_buffered_and_during_wait(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("event_orch", None, None)
        # "second" is raised before anyone waits for it: the SDK buffers it from history.
        await engine.raise_event(iid, "second", '"two"')
        await until(engine, iid, lambda s: "EventRaised" in history_types(s))
        status = await engine.get_status(iid)
        assert status is not None and status["runtimeStatus"] == "Running"
        await engine.raise_event(iid, "first", '"one"')
        status = await complete(engine, iid)
        assert status["output"] == ["one", "two"]

    run_engine(body)


def test_raise_event_unknown_instance(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        with pytest.raises(Exception) as info:
            await engine.raise_event("nobody-home", "x", "1")
        assert type(info.value).__name__ == "InstanceNotFound"

    run_engine(body)


def test_task_any_first_wins_and_waits_for_loser(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("any_orch", None, None)
        status = await complete(engine, iid)
        assert status["output"] == "Hello fast!"
        full = await engine.get_status(iid, show_history=True)
        assert full is not None
        # DTFx keeps the instance open until the losing activity finished.
        assert history_types(full).count("TaskCompleted") == 2

    run_engine(body)


def test_continue_as_new_generations_keep_custom_status_and_events(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("counter_orch", None, sdk_input({"n": 0, "limit": 3}))
        status = await complete(engine, iid)
        assert status["output"] == {"n": 3, "limit": 3}
        assert status["customStatus"] == {"generation": 0}  # carried over until overwritten
        full = await engine.get_status(iid, show_history=True)
        assert full is not None and history_types(full)[0] == "ExecutionStarted"
        assert full["historyEvents"][0]["Generation"] == 3
        # Events sent in one burst are delivered one generation at a time (carry-over).
        waiter = await engine.start_instance("counter_orch", None, sdk_input({"n": 0, "limit": 2, "wait": True}))
        for i in range(3):
            await engine.raise_event(waiter, "bump", str(i))
        status = await complete(engine, waiter)
        assert status["output"]["got"] == [0, 1, 2]

    run_engine(body)


def test_custom_status_and_limit(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("status_orch", None, sdk_input("abc"))
        status = await until(engine, iid, lambda s: s["customStatus"] is not None)
        assert status["customStatus"] == {"stage": "waiting", "size": 3}
        await engine.raise_event(iid, "go", '"went"')
        status = await complete(engine, iid)
        assert status["customStatus"] == {"stage": "done"} and status["output"] == "went"
        small = await engine.start_instance("big_status_orch", None, sdk_input(8000))
        assert (await complete(engine, small))["runtimeStatus"] == "Completed"
        big = await engine.start_instance("big_status_orch", None, sdk_input(9000))
        status = await complete(engine, big)
        assert status["runtimeStatus"] == "Failed"
        assert "must not exceed 16 KB" in status["output"]

    run_engine(body)


def test_orchestrator_exception_fails_instance(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("raise_orch", None, None)
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        assert status["output"] == "Orchestrator function 'raise_orch' failed: kaboom in orchestrator"

    run_engine(body)


def test_activity_exception_surfaces(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("activity_fail_orch", None, None)
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        assert status["output"].startswith(
            "Orchestrator function 'activity_fail_orch' failed: "
            "Activity function 'boom' failed: RuntimeError: bad thing happened"
        )
        caught = await engine.start_instance("activity_catch_orch", None, None)
        status = await complete(engine, caught)
        assert status["output"].startswith("Activity function 'boom' failed: RuntimeError: caught me \n ")
        assert "Traceback" in status["output"]

    run_engine(body)


def test_non_determinism_detected(run_engine: EngineRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVHOST_NONDET", "0")

    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("nondet_orch", None, None)
        await until(engine, iid, lambda s: "TaskCompleted" in history_types(s))
        os.environ["DEVHOST_NONDET"] = "1"
        await engine.raise_event(iid, "go", "1")
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        assert "Non-deterministic workflow detected" in status["output"]
        assert "CallActivity 'double' (sequence ID 0" in status["output"]
        assert "CallActivity 'say_hello'" in status["output"]

    run_engine(body)


def test_unknown_activity_and_sub_orchestrator(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("unknown_activity_orch", None, None)
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        assert (
            "The function 'does_not_exist' doesn't exist, is disabled, or is not an activity function. "
            "Additional info: The following are the known activity functions: 'Renamed', 'say_hello'"
        ) in status["output"]
        sub = await engine.start_instance("unknown_sub_orch", None, None)
        status = await complete(engine, sub)
        assert (
            "'no_such_orchestrator' doesn't exist, is disabled, or is not an orchestrator function" in status["output"]
        )

    run_engine(body)


def test_call_to_an_entity_no_function_implements_fails_clearly(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("entity_orch", None, None)
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        assert "The function 'counter' doesn't exist, is disabled, or is not an entity function" in status["output"]

    run_engine(body)


def test_start_errors(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        for bad_id in ("@x", "a/b", "a#b", "q?", "tab\there", "x" * 257, ""):
            with pytest.raises(Exception) as info:
                await engine.start_instance("chain", bad_id, None)
            assert type(info.value).__name__ == "InvalidRequest", bad_id
        with pytest.raises(Exception) as info:
            await engine.start_instance("nope", None, None)
        assert type(info.value).__name__ == "InvalidRequest"
        assert "known orchestrator functions" in str(info.value)
        with pytest.raises(Exception) as info:
            await engine.start_instance("chain", None, "{not json")
        assert type(info.value).__name__ == "InvalidRequest"
        await engine.start_instance("forever_orch", "dup", None)
        with pytest.raises(Exception) as info:
            await engine.start_instance("chain", "dup", None)
        assert type(info.value).__name__ == "InstanceAlreadyExists"

    run_engine(body)


def test_terminal_id_is_replaced_and_name_is_case_insensitive(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        await complete(engine, await engine.start_instance("chain", "again", None))
        iid = await engine.start_instance("CHAIN_FN", "again", sdk_input("Bo"))
        status = await complete(engine, iid)
        assert status["output"][0] == "Hello Bo!" and status["name"] == "CHAIN_FN"

    run_engine(body)


def test_activity_context_renamed_activity_and_logging(
    run_engine: EngineRunner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")

    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("context_orch", None, None)
        status = await complete(engine, iid)
        info, renamed = status["output"]
        assert info["function"] == "who_am_i" and info["text"] == "hi" and len(info["invocation"]) == 36
        assert renamed == "renamed:x"
        records = [r for r in caplog.records if r.getMessage() == "who_am_i says hi"]
        assert len(records) == 1
        assert records[0].function_name == "who_am_i"  # type: ignore[attr-defined]
        assert records[0].invocation_id == info["invocation"]  # type: ignore[attr-defined]
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("devhost")]
        assert f"Executing 'Functions.who_am_i' (Reason='(null)', Id={info['invocation']})" in lines
        assert any(
            line.startswith(f"Executed 'Functions.who_am_i' (Succeeded, Id={info['invocation']}") for line in lines
        )
        assert f"{iid}: orchestration 'context_orch' scheduled." in lines
        assert f"{iid}: orchestration 'context_orch' started." in lines
        assert f"{iid}: orchestration 'context_orch' completed." in lines

    run_engine(body)


def test_is_replaying_boundary(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("replay_probe", None, None)
        await complete(engine, iid)
        fn = engine.app.find("orchestrator", "replay_probe")
        assert fn is not None
        log = getattr(fn.user_function, "orchestrator_function").__globals__["replay_log"][iid]  # noqa: B009
        assert log == [
            ("start", False),
            ("start", True),
            ("after1", False),
            ("start", True),
            ("after1", True),
            ("after2", False),
        ]

    run_engine(body)


def test_parallel_retries_keep_ids_aligned(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("retry_fan", None, sdk_input({"key": "fan", "width": 6}))
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed", status
        expected = []
        for i in range(6):
            expected += [f"fan-{i} ok after {i % 3 + 1}", f"Hello {i}!"]
        assert status["output"] == expected
        events = [json.loads(t) for t in engine.core.store.history(iid)]
        scheduled = [e["EventId"] for e in events if e["EventType"] in (4, 10)]
        assert sorted(scheduled) == list(range(len(scheduled)))  # every id allocated once, none skipped

    run_engine(body)
