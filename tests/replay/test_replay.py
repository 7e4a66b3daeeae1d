"""Recorded job histories replay through today's orchestrator: a change that would break jobs in flight fails here.

The fixtures are real devhost histories (``python -m tests.replay.record``): a completed job, one waiting for an
SQL approval, one approved and completed, one aborted at approval, one retried after a rate limit, a
workflow run past a fan-out (its branches as sub-orchestrations, one failed) waiting at a human node, and a
workflow run whose branch asks: the root showing the branch's question, and the branch waiting for its answer. If a
change must break replay, version the orchestrator instead (docs/orchestrator-versioning.md).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devhost.replay import Recorded, judge, load_fixture, recorded_actions, replay

HISTORIES = sorted(Path(__file__).with_name("histories").glob("*.json"))


def load(path: Path) -> Recorded:
    return load_fixture(path)


@pytest.fixture(scope="module")
def handle(orchestrators: dict[str, Callable[[str], str]]) -> Callable[[str], str]:
    return orchestrators["job_orchestrator"]


def test_every_scenario_is_recorded() -> None:
    names = {p.stem for p in HISTORIES}
    assert names == {
        "completed",
        "waiting_for_approval",
        "approved_then_completed",
        "aborted_at_approval",
        "retried_after_rate_limit",
        "python_waiting_for_approval",
        "python_approved_then_completed",
        "workflow_waiting_at_human",
        "workflow_branch_question",
        "workflow_part_waiting",
        "agent_completed",
        "hybrid_completed",
        "team_completed",
        "fork_completed",
        "fork_workflow_completed",
    }


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_a_recorded_job_replays_unchanged(path: Path, orchestrators: dict[str, Callable[[str], str]]) -> None:
    fixture = load(path)
    result = replay(fixture, orchestrators[fixture.orchestrator])
    assert result.mismatch is None, result.mismatch
    assert not result.state.get("error"), result.state.get("error")
    # A finished job finishes again with the same outcome; a waiting one still waits.
    assert result.state.get("isDone") is (fixture.runtime_status != "Running")
    assert len(recorded_actions(fixture.history)) >= 3
    assert judge(fixture, orchestrators[fixture.orchestrator]).ok


def test_a_renamed_activity_in_flight_is_reported_as_non_determinism(handle: Callable[[str], str]) -> None:
    fixture = load(Path(__file__).with_name("histories") / "waiting_for_approval.json")
    changed = copy.deepcopy(fixture)
    first = next(e for e in changed.history if e["EventType"] == 4)  # the first TaskScheduled: the plan
    first["Name"] = "plan_v0"
    mismatch = replay(changed, handle).mismatch
    assert mismatch is not None
    assert mismatch.startswith("Non-deterministic workflow detected: a previous execution of this orchestration")
    assert "CallActivity 'plan_v0' (sequence ID 0, action #0)" in mismatch
    assert "the current replay execution scheduled CallActivity 'plan' there instead" in mismatch


def test_a_changed_orchestrator_is_caught(monkeypatch: pytest.MonkeyPatch, handle: Callable[[str], str]) -> None:
    # A change that would break jobs in flight: the retry backoff no longer waits on a durable timer.
    from orchestrators.job import JobRun

    def no_timer(self: JobRun, step: Any, delay_ms: int, next_attempt: int) -> Any:
        return
        yield

    monkeypatch.setattr(JobRun, "back_off", no_timer)
    fixture = load(Path(__file__).with_name("histories") / "retried_after_rate_limit.json")
    mismatch = replay(fixture, handle).mismatch
    assert mismatch is not None and "CreateTimer" in mismatch and "Non-deterministic workflow detected" in mismatch
