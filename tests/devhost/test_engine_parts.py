"""The engine's composed parts, each tested on its own: durable timers, the retry policy, endings, activities."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from devhost.durable import history as h
from devhost.durable.engine.activities import ActivityRunner
from devhost.durable.engine.core import FunctionTable
from devhost.durable.engine.endings import Endings
from devhost.durable.engine.episodes.retries import add_retry_root, retry_step
from devhost.durable.engine.state import Decisions, Instance, Message, ParentRef, Work
from devhost.durable.engine.timers import DurableTimers
from devhost.durable.store import Store
from devhost.functions.model import FunctionInfo, HostConfig, LoadedApp

TS = "2026-01-01T00:00:00.000000Z"


def _instance() -> Instance:
    return Instance("i1", "orch", None, None, 0.0)


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _timers(live: set[str], delivered: list[tuple[str, Message]], clock: _Clock) -> DurableTimers:
    return DurableTimers(
        is_live=lambda inst: inst.id in live,
        deliver=lambda instance_id, message: delivered.append((instance_id, message)),
        clock=clock,
    )


def test_timer_fires_as_a_timer_fired_message_for_its_execution() -> None:
    async def run() -> list[tuple[str, Message]]:
        delivered: list[tuple[str, Message]] = []
        timers = _timers({"i1"}, delivered, _Clock(1000.0))
        timers.bind(asyncio.get_running_loop())
        inst = _instance()
        inst.open[3] = "t"
        timers.arm(inst, inst.execution_id, 3, 77, 1000.0, "fire-text")
        assert 3 in inst.timer_handles
        for _ in range(100):
            if delivered:
                break
            await asyncio.sleep(0)
        assert 3 not in inst.timer_handles
        return delivered

    delivered = asyncio.run(run())
    assert len(delivered) == 1
    instance_id, message = delivered[0]
    assert instance_id == "i1"
    assert message.event["EventType"] == h.TIMER_FIRED
    assert message.event["TimerId"] == 3
    assert message.event["FireAt"] == "fire-text"
    assert (message.timer_id, message.fire_at) == (77, 1000.0)


def test_timer_is_not_armed_for_a_gone_instance_an_old_execution_or_a_closed_task() -> None:
    async def run() -> tuple[Instance, list[tuple[str, Message]]]:
        delivered: list[tuple[str, Message]] = []
        timers = _timers({"i1"}, delivered, _Clock(1000.0))
        inst = _instance()
        inst.open[1] = "t"
        timers.arm(inst, inst.execution_id, 1, 1, 1000.0, "x")  # not bound to a loop yet
        timers.bind(asyncio.get_running_loop())
        timers.arm(inst, "another-execution", 1, 1, 1000.0, "x")
        timers.arm(inst, inst.execution_id, 2, 2, 1000.0, "x")  # seq 2 is no open timer
        gone = Instance("gone", "orch", None, None, 0.0)
        gone.open[1] = "t"
        timers.arm(gone, gone.execution_id, 1, 3, 1000.0, "x")
        await asyncio.sleep(0)
        return inst, delivered

    inst, delivered = asyncio.run(run())
    assert inst.timer_handles == {}
    assert delivered == []


def test_timer_whose_task_closed_before_it_fired_delivers_nothing() -> None:
    async def run() -> list[tuple[str, Message]]:
        delivered: list[tuple[str, Message]] = []
        timers = _timers({"i1"}, delivered, _Clock(1000.0))
        timers.bind(asyncio.get_running_loop())
        inst = _instance()
        inst.open[4] = "t"
        timers.arm(inst, inst.execution_id, 4, 9, 1000.0, "x")
        del inst.open[4]  # cancelled by the episode that ran in between
        for _ in range(5):
            await asyncio.sleep(0)
        return delivered

    assert asyncio.run(run()) == []


def test_timer_early_by_the_wall_clock_is_armed_again_not_delivered() -> None:
    async def run() -> tuple[Instance, list[tuple[str, Message]], _Clock]:
        delivered: list[tuple[str, Message]] = []
        clock = _Clock(1000.0)
        timers = _timers({"i1"}, delivered, clock)
        timers.bind(asyncio.get_running_loop())
        inst = _instance()
        inst.open[5] = "t"
        timers.arm(inst, inst.execution_id, 5, 1, 1000.0, "x")
        clock.now = 999.0  # the loop's clock fired it, the wall clock says it is not yet due
        for _ in range(5):
            await asyncio.sleep(0)
        return inst, delivered, clock

    inst, delivered, _clock = asyncio.run(run())
    assert delivered == []
    assert 5 in inst.timer_handles  # armed again for the remainder
    inst.timer_handles[5].cancel()


def _failed(seq: int) -> dict[str, Any]:
    return h.event(h.TASK_FAILED, TS, TaskScheduledId=seq, Reason="boom")


def _fired(seq: int) -> dict[str, Any]:
    return h.event(h.TIMER_FIRED, TS, TimerId=seq)


def test_retry_failed_attempt_arms_the_first_interval_then_schedules_the_next_attempt() -> None:
    inst = _instance()
    retry = {"retryOptions": {"firstRetryIntervalInMilliseconds": 2500, "maxNumberOfAttempts": 2}}
    add_retry_root(inst, 0, "a", "work", '"in"', retry, None, None)
    inst.open[0] = "a"
    inst.next_seq = 1

    d = Decisions()
    retry_step(inst, _failed(0), TS, 100.0, d)
    assert [(e["EventType"], e["EventId"]) for e in d.events] == [(h.TIMER_CREATED, 1)]
    assert d.timers and d.timers[0][0] == 1 and d.timers[0][1] == 102.5
    assert inst.open[1] == "t"

    d = Decisions()
    retry_step(inst, _fired(1), TS, 102.5, d)
    assert [(e["EventType"], e["EventId"], e["Name"]) for e in d.events] == [(h.TASK_SCHEDULED, 2, "work")]
    assert d.work == [(2, "work", '"in"')]
    assert inst.roots[0]["att"] == 2 and inst.roots[0]["s"] == [0, 2]


def test_retry_exhausted_schedules_nothing_more() -> None:
    inst = _instance()
    add_retry_root(inst, 0, "a", "work", None, {"retryOptions": {"maxNumberOfAttempts": 1}}, None, None)
    inst.next_seq = 1
    retry_step(inst, _failed(0), TS, 0.0, Decisions())
    d = Decisions()
    retry_step(inst, _fired(1), TS, 0.0, d)
    assert d.events == [] and d.work == [] and d.children == []


def test_retry_of_a_sub_orchestration_keeps_its_explicit_instance_id() -> None:
    inst = _instance()
    retry = {"retryOptions": {"maxNumberOfAttempts": 3}}
    add_retry_root(inst, 0, "o", "child", None, retry, "child-id", "v2")
    inst.next_seq = 1
    retry_step(inst, h.event(h.SUB_ORCHESTRATION_FAILED, TS, TaskScheduledId=0), TS, 0.0, Decisions())
    d = Decisions()
    retry_step(inst, _fired(1), TS, 0.0, d)
    assert d.children == [(2, "child", "child-id", None, "v2")]
    assert inst.open[2] == "o"


class _FakeStore:
    """The store calls an ending makes, recorded."""

    def __init__(self) -> None:
        self.inbox: list[tuple[str, str | None, str]] = []
        self.cleared: list[str] = []

    def delete_instance_work(self, instance_id: str, *, inbox: bool = True) -> None:
        self.cleared.append(instance_id)

    def insert_inbox(self, instance_id: str, execution_id: str | None, body: str) -> int:
        self.inbox.append((instance_id, execution_id, body))
        return len(self.inbox)

    def replace_history(self, instance_id: str, bodies: list[str]) -> None:
        self.cleared.append(instance_id)


class _FakeSite:
    """The engine primitives ``Endings`` names in ``EndingsSite``, recorded instead of persisted."""

    def __init__(self) -> None:
        self.store = cast(Store, _FakeStore())
        self.instances: dict[str, Instance] = {}
        self.after: list[Callable[[], None]] = []
        self.scheduled: list[str] = []
        self.saved: list[tuple[str, str]] = []
        self.woken: list[str] = []
        self.appended: list[list[dict[str, Any]]] = []

    def untrack(self, instance_id: str) -> None:
        self.instances.pop(instance_id, None)

    def defer(self, callback: Callable[[], None]) -> None:
        self.after.append(callback)

    def schedule(self, inst: Instance) -> None:
        self.scheduled.append(inst.id)

    def save(self, inst: Instance) -> None:
        self.saved.append((inst.id, inst.status))

    def wake_waiters(self, instance_id: str) -> None:
        self.woken.append(instance_id)

    def send_inbox(self, target: Instance, ev: dict[str, Any], execution_id: str | None) -> None:
        target.inbox.append(Message(ev, execution_id, inbox_id=self.store.insert_inbox(target.id, execution_id, "")))
        self.schedule(target)

    def append(
        self, inst: Instance, new_events: Sequence[dict[str, Any] | str], decided: list[dict[str, Any]], ts: str
    ) -> None:
        self.appended.append(decided)


def _parent_and_child(site: _FakeSite) -> tuple[Instance, Instance]:
    parent = Instance("parent", "orch", None, None, 0.0)
    parent.open[2] = "o"
    child = Instance("child", "sub", None, None, 0.0)
    child.status = "Running"
    child.parent = ParentRef(parent.id, parent.execution_id, 2, parent.name)
    site.instances.update({parent.id: parent, child.id: child})
    return parent, child


def test_a_completed_child_tells_its_parent_and_wakes_its_waiters_after_commit() -> None:
    site = _FakeSite()
    parent, child = _parent_and_child(site)
    Endings(site).finish(child, [], [], "Completed", {"n": 1}, TS)
    assert child.status == "Completed" and child.output_text == '{"n":1}'
    assert "child" not in site.instances
    assert site.appended[0][-1]["EventType"] == h.EXECUTION_COMPLETED
    [message] = list(parent.inbox)
    assert message.event["EventType"] == h.SUB_ORCHESTRATION_COMPLETED and message.event["TaskScheduledId"] == 2
    assert site.scheduled == ["parent"]
    assert site.woken == []  # only once the transaction commits
    for after in site.after:
        after()
    assert site.woken == ["child"]


def test_a_terminated_child_fails_the_parents_task_saying_so() -> None:
    site = _FakeSite()
    parent, child = _parent_and_child(site)
    Endings(site).finish(child, [], [], "Terminated", "stop", TS)
    [message] = list(parent.inbox)
    assert message.event["EventType"] == h.SUB_ORCHESTRATION_FAILED
    assert message.event["Reason"] == "Sub-orchestration 'child' was terminated: stop"


def test_fail_now_leaves_a_finished_instance_alone() -> None:
    site = _FakeSite()
    _parent, child = _parent_and_child(site)
    child.status = "Completed"
    Endings(site).fail_now(child, "late")
    assert site.saved == [] and site.appended == []


class _ActivitySite:
    """The engine primitives ``ActivityRunner`` names in ``ActivitySite``: real values, delivery recorded."""

    def __init__(self, functions: list[FunctionInfo]) -> None:
        self.app = LoadedApp(root=Path("."), host=HostConfig(), functions=functions)
        self.functions = FunctionTable(self.app)
        self.timeout: float | None = None
        self.fault: str | None = None
        self.instances: dict[str, Instance] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.delivered: list[tuple[str, Message]] = []
        self.offered: list[Work] = []

    def deliver(self, instance_id: str, message: Message) -> None:
        self.delivered.append((instance_id, message))

    def offer_activity(self, work: Work) -> None:
        self.offered.append(work)


async def _double(n: int) -> int:
    return n * 2


def _run_work(
    site: _ActivitySite, names: list[str], *, open_tasks: bool = True, remote: bool = False
) -> ActivityRunner:
    inst = _instance()
    inst.remote = remote
    site.instances[inst.id] = inst
    work = [Work(i, inst.id, inst.execution_id, i, name, "21") for i, name in enumerate(names)]
    for item in work if open_tasks else []:
        inst.open[item.seq] = "a"
    runner = ActivityRunner(site, site)

    async def run() -> None:
        site.loop = asyncio.get_running_loop()
        runner.open()
        worker = asyncio.create_task(runner.worker())
        for item in work:
            runner.enqueue(item)
        for _ in range(10_000):  # until the worker ran what was queued
            if runner.idle():
                break
            await asyncio.sleep(0.001)
        runner.stop_workers(1)
        await worker
        runner.close()

    asyncio.run(run())
    return runner


def test_activity_runner_delivers_a_result_and_names_an_unknown_activity() -> None:
    fn = FunctionInfo("double", "activity", {"name": "n"}, [], _double, durable_name="double", is_async=True)
    site = _ActivitySite([fn])
    runner = _run_work(site, ["double", "missing"])
    done, unknown = (message.event for _id, message in site.delivered)
    assert (done["EventType"], done["TaskScheduledId"], done["Result"]) == (h.TASK_COMPLETED, 0, "42")
    assert (unknown["EventType"], unknown["Reason"]) == (h.TASK_FAILED, site.functions.unknown("missing", "activity"))
    assert runner.activities_run == 1 and runner.idle()


def test_activity_runner_skips_work_of_a_closed_task_and_runs_nothing_while_the_store_fails() -> None:
    fn = FunctionInfo("double", "activity", {"name": "n"}, [], _double, durable_name="double", is_async=True)
    site = _ActivitySite([fn])
    runner = _run_work(site, ["double"], open_tasks=False)  # e.g. the instance was terminated meanwhile
    assert site.delivered == [] and runner.activities_run == 0
    site.fault = "disk full"
    runner = _run_work(site, ["double"])  # stays in the store: the reload after the fault queues it again
    assert site.delivered == [] and runner.activities_run == 0


def test_activity_runner_hands_a_remote_instances_work_to_the_workers() -> None:
    site = _ActivitySite([])
    runner = _run_work(site, ["anything"], remote=True)
    assert [w.name for w in site.offered] == ["anything"] and site.delivered == [] and runner.activities_run == 0
