"""Recorded job histories replay through today's orchestrator: a change that would break jobs in flight fails here.

The fixtures are real devhost histories (``python -m tests.replay.record``): a completed job, one waiting for an
SQL approval, one approved and completed, one aborted at approval, one retried after a rate limit, a
workflow run past a fan-out (its branches as sub-orchestrations, one failed) waiting at a human node, and a
workflow run whose branch asks: the root showing the branch's question, and the branch waiting for its answer; and
runs under run limits: one in flight past a fan-out (its branches' shares), one stopped by RUN_LIMIT_EXCEEDED. If a
change must break replay, version the orchestrator instead (docs/orchestrator-versioning.md).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.replay import Recorded, judge, load_fixture, recorded_actions, replay

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
        "workflow_limits_waiting",
        "workflow_run_limit_reached",
        "fork_completed",
        "fork_workflow_completed",
        "fork_agent_completed",
        "fork_team_completed",
        "fork_branch_completed",
        "fork_branch_part_completed",
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
    from orchestrators.run.attempts import Attempts

    def no_timer(self: Attempts, step: Any, delay_ms: int, next_attempt: int) -> Any:
        return
        yield

    monkeypatch.setattr(Attempts, "back_off", no_timer)
    fixture = load(Path(__file__).with_name("histories") / "retried_after_rate_limit.json")
    mismatch = replay(fixture, handle).mismatch
    assert mismatch is not None and "CreateTimer" in mismatch and "Non-deterministic workflow detected" in mismatch


@pytest.mark.parametrize("where", ["same_episode", "later_episode"])
@pytest.mark.parametrize("answer", ["approve", "reject"])
def test_an_answer_delivered_twice_is_taken_once(handle: Callable[[str], str], where: str, answer: str) -> None:
    """A claimed answer raised again (the delivery repair after a crash) is ignored: the question takes one answer.

    Whatever the second event carries (the same answer, or, were the API ever to let one through, another),
    the job replays exactly as it ran with one: same actions, same custom status, same output.
    """
    fixture = load(Path(__file__).with_name("histories") / "approved_then_completed.json")
    history = fixture.history
    first = next(i for i, e in enumerate(history) if e["EventType"] == 15 and e["Name"] == "answer:s1-q1")
    again = {**history[first], "Input": json.dumps({"answer": answer, "question_id": "s1-q1"})}
    # Right after the first (one batch of new events), or in the next episode (after its OrchestratorStarted).
    next_episode = next(i for i in range(first + 1, len(history)) if history[i]["EventType"] == 12)
    at = first + 1 if where == "same_episode" else next_episode + 1
    doubled = dataclasses.replace(fixture, history=[*history[:at], again, *history[at:]])
    once, twice = replay(fixture, handle), replay(doubled, handle)
    assert twice.mismatch is None, twice.mismatch
    assert twice.state.get("isDone") is True and not twice.state.get("error")
    assert twice.state.get("output") == once.state.get("output")
    assert twice.state.get("customStatus") == once.state.get("customStatus")
    output = twice.state["output"]
    assert (json.loads(output) if isinstance(output, str) else output)["status"] == "completed"
