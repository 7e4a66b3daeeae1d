"""examples/scheduled_tasks.py: a recurring schedule (schedule entities, scheduled signals, entity-started runs)."""

from __future__ import annotations

import time
from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from durabletask import client, task, worker
from durabletask.scheduled import ScheduleCreationOptions, ScheduledTaskClient

pytestmark = pytest.mark.slow


def greet_orchestrator(ctx: task.OrchestrationContext, name: str) -> Generator[task.Task[Any], Any, Any]:
    """The schedule's target: waits a second, greets."""
    yield ctx.create_timer(timedelta(seconds=1))
    return f"Hello, {name}!"


def _greetings(c: client.TaskHubGrpcClient) -> list[client.OrchestrationState]:
    states = c.get_all_orchestration_states(client.OrchestrationQuery(fetch_inputs_and_outputs=True))
    return [s for s in states if s.name == "greet_orchestrator"]


def test_recurring_schedule(address: str) -> None:
    w = worker.TaskHubGrpcWorker(host_address=address)
    w.add_orchestrator(greet_orchestrator)
    w.configure_scheduled_tasks()
    w.start()
    try:
        c = client.TaskHubGrpcClient(host_address=address)
        scheduled_tasks = ScheduledTaskClient(c)
        schedule = scheduled_tasks.create_schedule(
            ScheduleCreationOptions(
                schedule_id="greet-every-2s",
                orchestration_name=task.get_name(greet_orchestrator),
                interval=timedelta(seconds=2),
                orchestration_input="world",
                start_at=datetime.now(UTC),
                start_immediately_if_late=True,
            )
        )
        runs: list[client.OrchestrationState] = []
        for _ in range(1200):  # the schedule's scheduled signals start a run every 2 s
            runs = [s for s in _greetings(c) if s.runtime_status == client.OrchestrationStatus.COMPLETED]
            if len(runs) >= 2:
                break
            time.sleep(0.1)
        assert len(runs) >= 2, _greetings(c)
        assert all(s.serialized_output == '"Hello, world!"' for s in runs)
        starts = sorted(s.created_at for s in runs)
        assert starts[1] - starts[0] >= timedelta(seconds=1.5)  # not before the interval
        assert [s.schedule_id for s in scheduled_tasks.list_schedules()] == ["greet-every-2s"]
        schedule.pause()
        schedule.delete()
    finally:
        w.stop()
