"""The decoded-history cache gives exactly what decoding the whole context text gives."""

from __future__ import annotations

import json

import pytest

from devhost.durable import accel
from devhost.durable.decoded import DecodedHistories
from devhost.durable.engine import Engine
from tests.devhost.conftest import EngineRunner, complete, sdk_input
from tests.devhost.hostproc import APPS_DIR

TAIL = '],"input":{"n":1},"instanceId":"i1","isReplaying":true,"parentInstanceId":null}'


def _events(start: int, count: int) -> list[str]:
    return [json.dumps({"EventType": 4, "EventId": i, "IsPlayed": True, "Name": f"e{i}"}) for i in range(start, count)]


def _whole(joined: str, fresh: str) -> object:
    history = ",".join(t for t in (joined, fresh) if t)
    return json.loads('{"history":[' + history + TAIL)


def test_context_matches_full_decode_as_history_grows() -> None:
    cache = DecodedHistories(min_events=2, max_events=1000)
    texts: list[str] = []
    for step in range(6):
        joined = ",".join(texts)
        fresh = ",".join(_events(1000 + step, 1002 + step))
        assert cache.context("i1", joined, fresh, TAIL) == _whole(joined, fresh)
        texts.extend(_events(len(texts), len(texts) + 3))
    assert cache.hits >= 3


def test_rewritten_history_is_decoded_afresh() -> None:
    cache = DecodedHistories(min_events=1, max_events=1000)
    first = ",".join(_events(0, 5))
    cache.context("i1", first, "", TAIL)
    rewritten = ",".join(_events(10, 12))  # continue-as-new or rewind: not an extension of the cached text
    assert cache.context("i1", rewritten, "", TAIL) == _whole(rewritten, "")
    # A text that merely starts with the cached characters (no event boundary after them) is not a hit.
    cache.context("i1", '{"a":1}', "", TAIL)
    hits = cache.hits
    assert cache.context("i1", '{"a":12}', "", TAIL) == _whole('{"a":12}', "")
    assert cache.hits == hits


def test_cache_is_bounded_and_returns_fresh_lists() -> None:
    cache = DecodedHistories(min_events=1, max_events=10)
    for key in ("a", "b", "c"):
        cache.context(key, ",".join(_events(0, 6)), "", TAIL)
    assert cache._count <= 10
    one = cache.context("c", ",".join(_events(0, 6)), "", TAIL)
    two = cache.context("c", ",".join(_events(0, 6)), "", TAIL)
    assert one["history"] is not two["history"]
    one["history"].append({})
    assert len(two["history"]) == 6
    cache.forget("c")
    assert cache._count <= 10 and "c" not in cache._entries


def test_from_json_takes_the_predecoded_value_only_for_that_text() -> None:
    accel.install_sdk_accelerations()
    from azure.durable_functions.models.DurableOrchestrationContext import (  # noqa: PLC0415
        DurableOrchestrationContext,
    )

    started = '{"EventType":12,"EventId":-1,"IsPlayed":false,"Timestamp":"2026-01-01T00:00:00.000000Z"}'
    text = '{"history":[' + started + TAIL
    value = json.loads(text)
    value["instanceId"] = "predecoded"  # shows which path produced the context
    other = '{"history":[' + started + TAIL  # equal text, another object: decoded as before
    with accel.predecoded(text, value):
        assert DurableOrchestrationContext.from_json(other).instance_id == "i1"
        assert DurableOrchestrationContext.from_json(text).instance_id == "predecoded"
        assert DurableOrchestrationContext.from_json(text).instance_id == "i1"  # offered once only
    assert DurableOrchestrationContext.from_json(text).instance_id == "i1"


def test_strict_mode_reads_the_live_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    accel.install_sdk_accelerations()
    from azure.functions import _durable_functions as codec  # noqa: PLC0415

    for value, expected in (("", False), (" TRUE ", True), ("yes", True), ("0", False), ("1", True)):
        monkeypatch.setenv("AZURE_FUNCTIONS_DURABLE_STRICT_TYPING", value)
        assert codec._is_strict_mode() is expected
    monkeypatch.delenv("AZURE_FUNCTIONS_DURABLE_STRICT_TYPING")
    assert codec._is_strict_mode() is False


def test_long_chain_runs_on_the_cache_with_the_same_history(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("chain", None, sdk_input({"steps": 40}))
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"]["steps"] == 40
        assert engine.episodes.decoded.hits > 20  # the later episodes took the decoded prefix
        full = await engine.get_status(iid, show_history=True)
        assert full is not None
        kinds = [e["EventType"] for e in full["historyEvents"]]
        assert kinds == ["ExecutionStarted"] + ["TaskCompleted"] * 40 + ["ExecutionCompleted"]
        assert engine.episodes.decoded._count == 0  # forgotten when the instance ended

    run_engine(body, app_dir=APPS_DIR / "bench_noop")
