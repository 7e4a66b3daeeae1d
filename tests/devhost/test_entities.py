"""Durable Entities in the devhost engine (in process, real SQLite): operations, state, calls, signals, order.

The app is tests/apps/entity_counter (a counter entity plus orchestrations that call and signal it).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from devhost.durable import history as h
from devhost.durable.engine import Engine, StoreUnavailable
from devhost.durable.engine.entities import ENTITY_BATCH
from devhost.durable.store import Store
from devhost.durable.store_schema import SCHEMA_VERSION
from tests.devhost.conftest import APPS, EngineRunner, complete, sdk_input

COUNTER_APP = APPS / "entity_counter"


def _run(run_engine: EngineRunner, body: Any, **kwargs: Any) -> Any:
    return run_engine(body, app_dir=COUNTER_APP, **kwargs)


async def _orchestrate(engine: Engine, name: str, args: Any) -> dict[str, Any]:
    instance_id = await engine.start_instance(name, None, sdk_input(args) if args is not None else None)
    return await complete(engine, instance_id)


async def _state(engine: Engine, key: str) -> tuple[bool, Any]:
    await engine.wait_for_idle()
    exists, text = await engine.read_entity_state("counter", key)
    return exists, None if text is None else json.loads(text)


def test_call_entity_returns_each_operations_result_in_order(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        status = await _orchestrate(engine, "count_up", {"key": "a", "numbers": [1, 2, 3, 4]})
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == [1, 3, 6, 10]
        assert await _state(engine, "a") == (True, 10)

    _run(run_engine, body)


def test_call_entity_history_has_event_sent_and_the_response_event(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        instance_id = await engine.start_instance("count_up", None, sdk_input({"key": "h", "numbers": [7]}))
        await complete(engine, instance_id)
        events = [json.loads(t) for t in engine.core.store.history(instance_id)]
        sent = [e for e in events if e["EventType"] == h.EVENT_SENT]
        raised = [e for e in events if e["EventType"] == h.EVENT_RAISED]
        assert [e["EventId"] for e in sent] == [0, 1]  # one sequence id per call, as the SDK counts
        assert {e["InstanceId"] for e in sent} == {"@counter@h"} and {e["Name"] for e in sent} == {"op"}
        requests = [json.loads(e["Input"]) for e in sent]
        assert [r["op"] for r in requests] == ["add", "get"]
        assert requests[0]["input"] == json.dumps("7")  # the SDK's JSON text, sent on as a JSON string
        assert all(r["parent"] == instance_id and "signal" not in r for r in requests)
        assert [e["Name"] for e in raised] == [r["id"] for r in requests]
        assert [json.loads(e["Input"]) for e in raised] == [{"result": "null"}, {"result": "7"}]

    _run(run_engine, body)


def test_an_operation_that_raises_fails_the_call_and_try_except_catches_it(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        status = await _orchestrate(engine, "catch_failure", {"key": "b"})
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == {"caught": "counter cannot divide by zero", "total": 5}

    _run(run_engine, body)


def test_an_uncaught_operation_error_fails_the_orchestration_with_its_message(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        status = await _orchestrate(engine, "fail_uncaught", {"key": "u"})
        assert status["runtimeStatus"] == "Failed"
        assert status["output"] == "Orchestrator function 'fail_uncaught' failed: counter cannot carry on"
        assert await _state(engine, "u") == (False, None)  # an initializer alone does not create the entity

    _run(run_engine, body)


def test_signals_run_in_order_before_a_later_call_and_the_last_episodes_signal_is_sent(
    run_engine: EngineRunner,
) -> None:
    async def body(engine: Engine) -> None:
        status = await _orchestrate(engine, "signal_then_read", {"key": "c"})
        assert status["output"] == 30
        # The orchestration's last episode signalled "delete": it ran although the orchestration had ended.
        assert await _state(engine, "c") == (False, None)

    _run(run_engine, body)


def test_destruct_on_exit_deletes_the_state_and_the_entity_leaves_the_listing(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        await engine.signal_entity("counter", "gone", "add", json.dumps("4"))
        await engine.signal_entity("Counter", "kept", "add", json.dumps("1"))
        assert await _state(engine, "gone") == (True, 4)
        await engine.signal_entity("counter", "gone", "delete", None)
        assert await _state(engine, "gone") == (False, None)
        items, token = await engine.list_entities(
            name="counter", op_from=None, op_to=None, top=10, continuation=None, fetch_state=True
        )
        assert [(i["entityId"], i["state"]) for i in items] == [({"name": "counter", "key": "kept"}, 1)]
        assert token is None
        await engine.signal_entity("counter", "gone", "add", json.dumps("2"))  # a deleted entity starts over
        assert await _state(engine, "gone") == (True, 2)

    _run(run_engine, body)


def test_parallel_calls_to_one_entity_run_one_at_a_time(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        count = ENTITY_BATCH + 20  # more than one batch holds
        status = await _orchestrate(engine, "fan_out_adds", {"key": "d", "count": count})
        assert status["output"] == count
        assert engine.entity_batches_run >= 2

    _run(run_engine, body)


def test_client_signals_run_in_the_order_they_were_sent(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        for op, value in [("add", 5), ("reset", None), ("add", 3), ("add", 4)]:
            await engine.signal_entity("counter", "o", op, json.dumps(json.dumps(value)) if value else None)
        assert await _state(engine, "o") == (True, 7)

    _run(run_engine, body)


def test_a_batch_that_breaks_fails_each_call_and_keeps_the_state(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        await engine.signal_entity("counter", "p", "add", json.dumps("9"))
        assert await _state(engine, "p") == (True, 9)
        await engine.signal_entity("counter", "p", "poison", None)
        assert await _state(engine, "p") == (True, 9)
        status = await _orchestrate(engine, "count_up", {"key": "p", "numbers": [1]})
        assert status["output"] == [10]

    _run(run_engine, body)


def test_calling_or_signalling_an_unknown_entity_is_refused_with_the_known_names(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        status = await _orchestrate(engine, "call_unknown_entity", None)
        assert status["runtimeStatus"] == "Failed"
        assert "The function 'nosuch' doesn't exist, is disabled, or is not an entity function" in status["output"]
        assert "known entity functions: 'counter'" in status["output"]
        with pytest.raises(Exception, match="not an entity function") as info:
            await engine.signal_entity("nosuch", "k", "add", None)
        assert type(info.value).__name__ == "InvalidRequest"
        with pytest.raises(Exception, match="entity name must not be"):
            await engine.signal_entity("", "k", "add", None)

    _run(run_engine, body)


def test_listing_pages_with_a_continuation_token_and_filters_by_name(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        for key in ("k1", "k2", "k3", "k4", "k5"):
            await engine.signal_entity("counter", key, "add", json.dumps("1"))
        await engine.wait_for_idle()
        seen: list[str] = []
        token: str | None = None
        pages = 0
        while True:
            items, token = await engine.list_entities(
                name="counter", op_from=None, op_to=None, top=2, continuation=token, fetch_state=False
            )
            pages += 1
            seen.extend(i["entityId"]["key"] for i in items)
            assert all(i["state"] is None for i in items)
            if token is None:
                break
        assert seen == ["k1", "k2", "k3", "k4", "k5"] and pages == 3
        items, _ = await engine.list_entities(
            name="other", op_from=None, op_to=None, top=10, continuation=None, fetch_state=False
        )
        assert items == []
        with pytest.raises(Exception, match="continuation token"):
            await engine.list_entities(
                name=None, op_from=None, op_to=None, top=1, continuation="%%%", fetch_state=False
            )

    _run(run_engine, body)


def test_pending_operations_survive_a_stop_and_run_after_the_next_start(
    run_engine: EngineRunner, tmp_path: Path
) -> None:
    data = tmp_path / "entity-data"

    async def send(engine: Engine) -> None:
        engine.core.begin_stopping()  # nothing is dispatched: the operations stay in the store
        for _ in range(3):
            await engine.signal_entity("counter", "s", "add", json.dumps("2"))
        assert engine.core.store.pending_entity_ops("@counter@s") == 3

    async def check(engine: Engine) -> None:
        assert await _state(engine, "s") == (True, 6)
        assert engine.core.store.pending_entity_ops("@counter@s") == 0

    _run(run_engine, send, data_dir=data)
    _run(run_engine, check, data_dir=data)


def test_a_signal_the_store_cannot_write_is_refused_whole_and_the_entity_heals(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        await engine.signal_entity("counter", "f", "add", json.dumps("1"))
        assert await _state(engine, "f") == (True, 1)
        db = engine.core.store.db
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
        db.execute(f"PRAGMA max_page_count={pages}")  # the disk is full
        big = json.dumps(json.dumps("x" * 200_000))  # needs new pages
        with pytest.raises(StoreUnavailable):
            await engine.signal_entity("counter", "f", "add", big)
        with pytest.raises(StoreUnavailable):  # refused before anything changes while the store is faulty
            await engine.signal_entity("counter", "f", "add", json.dumps("5"))
        db.execute("PRAGMA max_page_count=1073741823")
        for _ in range(3000):
            if engine.store_fault is None:
                break
            await asyncio.sleep(0.01)
        assert engine.store_fault is None
        assert engine.core.store.pending_entity_ops("@counter@f") == 0  # nothing of the refused signals
        await engine.signal_entity("counter", "f", "add", json.dumps("2"))
        assert await _state(engine, "f") == (True, 3)

    _run(run_engine, body)


def test_a_version_1_store_is_migrated_to_hold_entities(tmp_path: Path) -> None:
    path = tmp_path / "durable-Hub.sqlite3"
    store = Store(path)
    store.open("Hub")
    store.close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TABLE entities; DROP TABLE entity_ops; UPDATE meta SET value='1' WHERE key='schema_version';"
    )
    db.commit()
    db.close()
    again = Store(path)
    again.open("Hub")
    try:
        version = again.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        assert version == str(SCHEMA_VERSION) == "2"
        again.begin()
        again.put_entity("@counter@x", "1", 0.0)
        again.insert_entity_op("@counter@x", "{}")
        again.commit()
        assert again.get_entity("@counter@x") == ("1", 0.0)
        assert again.pending_entity_ops("@counter@x") == 1
    finally:
        again.close()
