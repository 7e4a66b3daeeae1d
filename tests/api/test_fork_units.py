"""What a fork carries over (shared/jobs/fork.py) and how two jobs compare (api/compare.py): pure functions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.compare import compare_views
from shared.jobs.fork import ForkError, fork_base

PLAN = {
    "steps": [
        {"id": "s1", "kind": "execute_azure_sql", "title": "SQL", "input": {"question": "q1"}, "depends_on": []},
        {"id": "s2", "kind": "consult_rag", "title": "Docs", "input": {"query": "q2"}, "depends_on": []},
        {"id": "s3", "kind": "generate_response", "title": "Answer", "input": {"question": "q"}, "depends_on": []},
    ]
}
SQL_OUT = {"question": "q1", "sql": "SELECT 1", "columns": ["a"], "rows": [[1]], "row_count": 1}


def task(step: str, kind: str, result: dict[str, Any], status: str = "success") -> dict[str, Any]:
    """A finished activity as the Durable HTTP API shows it (its input merged in)."""
    return {
        "EventType": "TaskCompleted",
        "FunctionName": kind,
        "Input": {"task_id": f"job:{step}:1", "executor_type": kind, "task": {}},
        "Result": json.dumps({"status": status, "result": result, "usage": {"total_tokens": 5}}),
    }


def status(states: list[str], *, runtime: str = "Completed", mode: str = "deterministic") -> dict[str, Any]:
    steps = [
        {"id": s["id"], "kind": s["kind"], "title": s["title"], "state": st, "usage": {"total_tokens": 5}}
        for s, st in zip(PLAN["steps"], states, strict=True)
    ]
    history = [
        task("plan", "plan", PLAN),
        task("s1", "execute_azure_sql", {"sql": "SELECT 1", "draft": True}),  # an approval's draft: never carried
        task("s1", "execute_azure_sql", SQL_OUT),
        task("s2", "consult_rag", {"query": "q2", "chunks": []}),
    ]
    job = {"job_id": "job", "request": {"question": "q", "mode": mode}}
    return {
        "instanceId": "job",
        "runtimeStatus": runtime,
        "input": json.dumps(job),
        "customStatus": {"status": "completed", "steps": steps},
        "historyEvents": history,
    }


def test_the_steps_before_the_fork_point_are_carried_with_their_results() -> None:
    base = fork_base(status(["succeeded", "succeeded", "succeeded"]), "s3")
    assert base.index == 2 and base.plan == PLAN | {"rationale": None}
    assert [(c.step.id, c.step.carried_from, c.output) for c in base.carried] == [
        ("s1", "job", SQL_OUT),
        ("s2", "job", {"query": "q2", "chunks": []}),
    ]
    assert base.carried_usage().total_tokens == 10
    assert fork_base(status(["succeeded", "succeeded", "succeeded"]), "s1").carried == []


def test_a_skipped_step_is_carried_as_skipped_without_a_result() -> None:
    base = fork_base(status(["succeeded", "skipped", "failed"]), "s3")
    assert [(c.step.state, c.output is None) for c in base.carried] == [("succeeded", False), ("skipped", True)]


@pytest.mark.parametrize(
    ("job", "from_step", "code", "field"),
    [
        (status(["succeeded", "succeeded", "succeeded"], runtime="Running"), "s2", "JOB_NOT_FINISHED", None),
        (status(["succeeded", "succeeded", "succeeded"]), "s9", "INVALID_FORK_POINT", "from_step"),
        (status(["succeeded", "failed", "pending"]), "s3", "INVALID_FORK_POINT", "from_step"),
    ],
)
def test_a_fork_that_cannot_be_is_refused_with_a_stable_code(
    job: dict[str, Any], from_step: str, code: str, field: str | None
) -> None:
    with pytest.raises(ForkError) as caught:
        fork_base(job, from_step)
    assert (caught.value.code, caught.value.field) == (code, field)


def test_a_workflow_run_forks_only_at_a_node_that_ran() -> None:
    job = status(["succeeded", "succeeded", "succeeded"])
    job["input"] = json.dumps(
        {"job_id": "job", "request": {"question": "q"}, "run": {"kind": "workflow", "id": "w", "version": 1}}
    )
    with pytest.raises(ForkError) as caught:
        fork_base(job, "s2")  # the synthetic steps never started
    assert (caught.value.code, caught.value.field) == ("INVALID_FORK_POINT", "from_step")


def view(
    job_id: str, answer: str, rows: list[list[Any]], cites: list[str], tokens: int, **extra: Any
) -> dict[str, Any]:
    out = {"sql": f"SELECT {len(rows)}", "columns": ["a"], "rows": rows, "row_count": len(rows)}
    return {
        "id": job_id,
        "status": "completed",
        "forked_from": extra.get("forked_from"),
        "answer": {"text": answer, "citations": [{"source_id": c} for c in cites]},
        "steps": [
            {"id": "s1", "state": "succeeded", "output": out, "started_at": "2026-01-01T00:00:00Z",
             "ended_at": "2026-01-01T00:00:01Z", **({"carried_from": "a"} if extra.get("carried") else {})},
            {"id": "s2", "state": "succeeded", "started_at": "2026-01-01T00:00:01Z",
             "ended_at": "2026-01-01T00:00:03Z"},
        ],
        "usage": {"total": {"total_tokens": tokens, "estimated_cost": 0.5}, "carried_over": {"total_tokens": 7}},
    }  # fmt: skip


def test_compare_names_every_difference() -> None:
    a = view("a", "West had 92. Refunds in 30 days.", [[1], [2]], ["sql:s1", "doc#1"], 100)
    b = view(
        "b", "East had 95. Refunds in 30 days.", [[2], [3], [3]], ["sql:s1", "doc#2"], 40, forked_from={"job": "a"}
    )
    diff = compare_views(a, b)
    assert diff["a"] == {"id": "a", "status": "completed", "forked_from": None}
    assert diff["answer"]["same"] is False
    assert diff["answer"]["claims_added"] == ["East had 95."] and diff["answer"]["claims_dropped"] == ["West had 92."]
    assert diff["citations"] == {"added": ["doc#2"], "dropped": ["doc#1"], "kept": ["sql:s1"]}
    (sql,) = diff["sql"]
    assert (sql["a"], sql["b"], sql["same_sql"]) == ("SELECT 2", "SELECT 3", False)
    assert sql["rows"] == {
        "a": 2,
        "b": 3,
        "same_rows": False,
        "added": 2,
        "removed": 1,
        "added_rows": [[3], [3]],
        "removed_rows": [[1]],
        "columns_changed": False,
    }
    assert diff["usage"]["total"]["tokens_delta"] == -60 and diff["usage"]["total"]["cost_delta"] == 0
    assert diff["duration_ms"] == {"a": 3000, "b": 3000, "delta": 0}
    # A carried step is not the fork's own run time.
    carried = compare_views(a, view("b", "x", [[1]], [], 1, carried=True))
    assert carried["duration_ms"]["b"] == 2000 and carried["sql"][0]["carried_over"] is True


def test_a_workflow_node_whose_output_is_recorded_nowhere_is_refused_at_the_edge() -> None:
    job = status(["succeeded", "succeeded", "succeeded"])
    job["input"] = json.dumps(
        {"job_id": "job", "request": {"question": "q"}, "run": {"kind": "workflow", "id": "w", "version": 1}}
    )
    steps = job["customStatus"]["steps"]
    steps[0].update(kind="agent", started_at="2026-01-01T00:00:00", ended_at="2026-01-01T00:00:01")
    steps[1].update(started_at="2026-01-01T00:00:02")
    with pytest.raises(ForkError) as caught:
        fork_base(job, "s2")
    assert caught.value.code == "FORK_NOT_SUPPORTED" and "s1" in caught.value.message
    assert fork_base(job, "s1").carried == []  # at the agent node itself: nothing to carry
