"""Host-level pieces: the fast timestamp parser, history rendering and the invocation log context."""

from __future__ import annotations

import contextvars
import importlib
import json
import logging
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from dateutil.parser import parse as dateutil_parse

from devhost.durable import history as h
from devhost.durable.timeutil import (
    epoch_to_history,
    install_fast_timestamp_parser,
    make_fast_parser,
    parse_history_time,
)
from devhost.functions.logs import install_log_context, invocation_scope


@pytest.mark.parametrize("cache_size", [65536, 16])
def test_fast_parser_matches_dateutil_on_host_timestamps(cache_size: int) -> None:
    fast = make_fast_parser(dateutil_parse, cache_size=cache_size)
    rng = random.Random(7)
    samples = [epoch_to_history(rng.uniform(0, 4_000_000_000)) for _ in range(500)]
    samples += ["2024-05-01T10:00:00Z", "2024-02-29T23:59:59.999999Z"]
    for text in samples * 2:  # the second pass is served (partly) from the memo cache
        ours, theirs = fast(text), dateutil_parse(text)
        assert ours == theirs
        assert ours.utcoffset() == theirs.utcoffset()
        assert ours.isoformat() == theirs.isoformat()
        assert ours.strftime("%Y-%m-%dT%H:%M:%S.%fZ") == theirs.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    "text",
    ["2024-05-01T10:00:00.1234567Z", "2024-05-01T10:00:00+02:00", "2024-05-01 10:00:00", "2024-05-01T10:00:00.123Z"],
)
def test_fast_parser_falls_back_for_other_formats(text: str) -> None:
    fast = make_fast_parser(dateutil_parse)
    assert fast(text) == dateutil_parse(text)
    assert fast(text).tzinfo == dateutil_parse(text).tzinfo


def test_install_patches_the_sdk_module_once() -> None:
    assert install_fast_timestamp_parser()
    module = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")
    patched = getattr(module, "dt_parse")  # noqa: B009
    assert getattr(patched, "devhost_fast", False)
    assert install_fast_timestamp_parser()
    assert getattr(module, "dt_parse") is patched  # noqa: B009


def _replay_state(history: list[dict[str, Any]], parser: Any) -> str:
    """Run an SDK orchestrator handle over a history with the given timestamp parser."""
    import azure.durable_functions as df

    module = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")
    saved = getattr(module, "dt_parse")  # noqa: B009 - module attribute patched by the host
    setattr(module, "dt_parse", parser)  # noqa: B010
    try:

        def orchestrator(context: df.DurableOrchestrationContext):
            from datetime import timedelta

            yield context.call_activity("a", str(context.new_uuid()))
            yield context.create_timer(context.current_utc_datetime + timedelta(seconds=3))
            return [context.current_utc_datetime.isoformat(), context.new_uuid()]

        handle = df.Orchestrator.create(orchestrator)
        context = {
            "history": history,
            "input": None,
            "instanceId": "x",
            "isReplaying": True,
            "parentInstanceId": None,
            "upperSchemaVersion": 1,
            "upperSchemaVersionNew": 2,
        }
        return str(handle(json.dumps(context)))
    finally:
        setattr(module, "dt_parse", saved)  # noqa: B010


def test_replay_output_identical_with_fast_parser() -> None:
    t0, t1, t2 = epoch_to_history(1.7e9), epoch_to_history(1.7e9 + 1.25), epoch_to_history(1.7e9 + 5.5)
    fire = epoch_to_history(1.7e9 + 1.25 + 3)
    history = [
        h.event(12, t0),
        h.event(0, t0, Name="o", Version="", Input=None, OrchestrationInstance={"InstanceId": "x", "ExecutionId": "e"}),
        h.event(4, t0, 0, Name="a", Input='"u"'),
        h.event(13, t0),
        h.event(12, t1),
        h.event(5, t1, TaskScheduledId=0, Result='"r"'),
        h.event(10, t1, 1, FireAt=fire),
        h.event(13, t1),
        h.event(12, t2),
        h.event(11, t2, TimerId=1, FireAt=fire),
    ]
    fast = _replay_state(history, make_fast_parser(dateutil_parse))
    slow = _replay_state(history, dateutil_parse)
    assert fast == slow
    assert json.loads(fast)["isDone"] is True


def test_render_and_unplayed() -> None:
    ev = h.event(h.EVENT_RAISED, "2024-05-01T10:00:00.000000Z", Name="n", Input='"IsPlayed":true')
    text = h.render(ev)
    assert json.loads(text)["IsPlayed"] is True
    fresh = json.loads(h.unplayed(text))
    assert fresh["IsPlayed"] is False and fresh["Input"] == '"IsPlayed":true'


def test_parse_history_time_accepts_sdk_and_dotnet_formats() -> None:
    assert parse_history_time("2024-05-01T10:00:00.1234567Z") == pytest.approx(1714557600.123456)
    assert parse_history_time("2024-05-01T10:00:00Z") == 1714557600.0
    assert parse_history_time(epoch_to_history(1714557600.5)) == 1714557600.5


def test_log_records_carry_invocation_across_threads(caplog: pytest.LogCaptureFixture) -> None:
    install_log_context()
    caplog.set_level(logging.INFO)
    logger = logging.getLogger("tests.invocation")

    def work() -> None:
        logger.info("in thread")

    with invocation_scope("fn_a", "inv-1"):
        logger.info("inline")
        ctx = contextvars.copy_context()
        with ThreadPoolExecutor(1) as pool:
            pool.submit(ctx.run, work).result()
    logger.info("outside")
    found = {r.getMessage(): (r.function_name, r.invocation_id) for r in caplog.records}  # type: ignore[attr-defined]
    assert found["inline"] == ("fn_a", "inv-1")
    assert found["in thread"] == ("fn_a", "inv-1")
    assert found["outside"] == ("", "")


def test_cached_namedtuple_behaves_like_namedtuple() -> None:
    from collections import namedtuple

    from devhost.durable.accel import cached_namedtuple, install_sdk_accelerations

    first = cached_namedtuple("Payload", ("is_success", "task_id_key"))
    assert first is cached_namedtuple("Payload", ["is_success", "task_id_key"])
    assert first is cached_namedtuple("Payload", "is_success task_id_key")
    Payload = namedtuple("Payload", ("is_success", "task_id_key"))  # noqa: PYI024
    assert first(True, "x") == Payload(True, "x") and first(True, "x").task_id_key == "x"
    install_sdk_accelerations()
    module = importlib.import_module("azure.durable_functions.models.TaskOrchestrationExecutor")
    assert getattr(module, "namedtuple") is cached_namedtuple  # noqa: B009
