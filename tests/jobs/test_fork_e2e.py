"""Forks of a job over HTTP on a devhost process running the app (issue 30), on embedded defaults.

What ran is read from each fork's own Durable history: only the steps from the fork point on run (one
``load_fork_base`` activity carries the rest over, no planning call), and the model calls are counted there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.e2e import sse
from tests.jobs.jobclient import JobClient

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
SQL_Q = "Which region had the most returns in Q3?"
EDITED_SQL = "SELECT name FROM regions ORDER BY name"
CONTACTS = "SELECT email FROM customer_contacts"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data = tmp_path_factory.mktemp("fork-host")
    proc = DevHostProcess(REPO_ROOT, data, env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"})
    proc.start(timeout_s=120)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


@pytest.fixture(scope="module")
def origin(jobs: JobClient) -> dict[str, Any]:
    """The main job: a SQL step, a document lookup, the answer."""
    view = jobs.wait(jobs.submit(MIXED_Q), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert [s["kind"] for s in view["steps"]] == ["execute_azure_sql", "consult_rag", "generate_response"]
    return view


def history(host: DevHostProcess, job_id: str) -> list[dict[str, Any]]:
    params = {**host.system_code, "showHistory": "true", "showHistoryOutput": "true", "showInput": "true"}
    resp = host.client.get(host.webhook(f"instances/{job_id}"), params=params)
    assert resp.status_code in (200, 202), resp.text  # 202 while the instance runs
    return list(resp.json()["historyEvents"])


def activities_run(host: DevHostProcess, job_id: str) -> list[tuple[str, str]]:
    """(activity, step id) of every activity the job ran, in order, from its own Durable history."""
    ran = []
    for event in history(host, job_id):
        if event["EventType"] in ("TaskCompleted", "TaskFailed"):
            task = event.get("Input") or {}
            step = str(task.get("task_id", "")).split(":")[1] if isinstance(task, dict) and "task_id" in task else ""
            ran.append((str(event["FunctionName"]), step))
    return ran


def model_calls(host: DevHostProcess, job_id: str) -> int:
    """How many activities of the job used the model (their results report tokens)."""
    calls = 0
    for event in history(host, job_id):
        result = event.get("Result") if event["EventType"] == "TaskCompleted" else None
        if isinstance(result, dict) and (result.get("usage") or {}).get("total_tokens", 0) > 0:
            calls += 1
    return calls


def fork(jobs: JobClient, job_id: str, from_step: str, **changes: Any) -> httpx.Response:
    return jobs.http.post(f"/api/jobs/{job_id}/fork", json={"from_step": from_step, "changes": changes})


def started(resp: httpx.Response) -> str:
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


# The edit of each fork point: the SQL at the SQL step, the search query at the lookup, the model's limit at the answer.
EDITS: dict[str, dict[str, Any]] = {
    "s1": {"sql": EDITED_SQL},
    "s2": {"query": "refunds after 30 days store credit"},
    "s3": {"constraints": {"max_tokens": 900}},
}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_fork_runs_only_the_steps_from_its_fork_point(
    host: DevHostProcess, jobs: JobClient, origin: dict[str, Any], index: int
) -> None:
    step_ids = [s["id"] for s in origin["steps"]]
    from_step = step_ids[index]
    resp = fork(jobs, origin["id"], from_step, **EDITS[from_step])
    fork_id = started(resp)
    assert resp.json()["forked_from"] == {"job": origin["id"], "step": from_step}
    assert resp.json()["carried_over"] == step_ids[:index]
    view = jobs.wait(fork_id, timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert view["forked_from"]["job"] == origin["id"] and view["forked_from"]["step"] == from_step
    # Only load_fork_base and the steps from the fork point ran: no planning, nothing carried over ran again.
    ran = activities_run(host, fork_id)
    assert ran[0] == ("load_fork_base", "")
    assert [step for _, step in ran[1:]] == step_ids[index:]
    assert all(name != "plan" for name, _ in ran)
    carried_line = (
        f"forked from job {origin['id']} at {from_step}; carried over: {', '.join(step_ids[:index]) or 'nothing'}"
    )
    assert any(e["message"].startswith(carried_line) for e in view["log"]["entries"]), view["log"]["entries"]
    # Model calls: only the answer writes with the model here (the edited SQL is given, the lookup is a search).
    assert model_calls(host, fork_id) == 1
    by_id = {s["id"]: s for s in origin["steps"]}
    for step in view["steps"]:
        before = by_id[step["id"]]
        if step["id"] in step_ids[:index]:
            # Carried over: the origin's result, timings and usage, marked so.
            assert step["carried_over"] is True and step["carried_from"] == origin["id"]
            assert step["output"] == before["output"]
            assert (step["started_at"], step["ended_at"]) == (before["started_at"], before["ended_at"])
            assert view["usage"]["by_step"][step["id"]] == origin["usage"]["by_step"][step["id"]]
        else:
            assert "carried_over" not in step and step["started_at"] > origin["steps"][-1]["ended_at"]
    # The fork's cost is only what it ran; what it carried over is counted apart.
    own = sum(view["usage"]["by_step"][s]["total_tokens"] for s in step_ids[index:])
    carried = sum(origin["usage"]["by_step"][s]["total_tokens"] for s in step_ids[:index])
    assert view["usage"]["total"]["total_tokens"] == own > 0
    assert view["usage"]["carried_over"]["total_tokens"] == carried
    assert view["usage"]["planning"]["total_tokens"] == 0
    if from_step == "s1":
        assert view["steps"][0]["output"]["sql"].startswith(EDITED_SQL)
        assert view["answer"]["text"] != origin["answer"]["text"]
    assert {"job": fork_id, "step": from_step} in jobs.view(origin["id"])["forks"]


def test_a_fork_of_a_fork_carries_what_its_origin_carried(host: DevHostProcess, jobs: JobClient) -> None:
    first = jobs.wait(jobs.submit(MIXED_Q), timeout_s=180)
    middle = jobs.wait(started(fork(jobs, first["id"], "s2", query="store credit")), timeout_s=180)
    last = jobs.wait(started(fork(jobs, middle["id"], "s3")), timeout_s=180)
    assert last["status"] == "completed", last.get("error")
    assert [name for name, _ in activities_run(host, last["id"])] == ["load_fork_base", "generate_response"]
    # s1 ran in the first job; s2 (with the edited query) in the middle one: each is carried from where it ran.
    assert [s.get("carried_from") for s in last["steps"]] == [first["id"], middle["id"], None]
    assert last["steps"][0]["output"] == first["steps"][0]["output"]
    assert last["steps"][1]["output"] == middle["steps"][1]["output"] != first["steps"][1]["output"]


def test_an_edited_sensitive_read_waits_for_a_new_approval(host: DevHostProcess, jobs: JobClient) -> None:
    # The origin read the sensitive table with a human's approval of exactly that statement.
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    first = jobs.wait(job_id, {"waiting_for_user"})["waiting"]
    assert jobs.answer(job_id, {"action": "edit", "sql": CONTACTS}).status_code == 202
    again = jobs.next_question(job_id, first["question_id"])
    assert again["details"]["sensitive_tables"] == ["customer_contacts"]
    assert jobs.answer(job_id, "approve", question_id=again["question_id"]).status_code == 202
    origin = jobs.wait(job_id)
    assert origin["status"] == "completed" and origin["steps"][0]["output"]["rows"]
    # A fork that edits the SQL to read it again (same statement, policy "sensitive") is asked again.
    edited = f"{CONTACTS} WHERE email IS NOT NULL"
    fork_id = started(fork(jobs, job_id, "s1", sql=edited, approval={"sql": "sensitive"}))
    waiting = jobs.wait(fork_id, {"waiting_for_user"}, timeout_s=120)["waiting"]
    assert waiting["kind"] == "approval" and waiting["details"]["sensitive_tables"] == ["customer_contacts"]
    # Nothing the fork ran so far held an approval: it drafted (guarded) the statement and waits.
    for event in history(host, fork_id):
        if event["EventType"] == "TaskCompleted" and event["FunctionName"] == "execute_azure_sql":
            context = event["Input"]["execution_context"]
            assert context["sql_mode"] == "draft" and context["approved_sql"] is None
    assert jobs.answer(fork_id, "approve").status_code == 202
    done = jobs.wait(fork_id, timeout_s=120)
    assert done["status"] == "completed" and done["steps"][0]["output"]["rows"]
    # Without an approval policy the fork may not read it at all: the origin's approval is no permission.
    refused_id = started(fork(jobs, job_id, "s1", sql=CONTACTS, approval={"sql": "never"}))
    refused = jobs.wait(refused_id, {"waiting_for_user", "failed"}, timeout_s=120)
    assert refused["steps"][0]["state"] in ("waiting", "failed")
    assert refused["steps"][0]["error"]["code"] in ("SENSITIVE_TABLE", "SQL_REJECTED", "PERMISSION_DENIED"), refused[
        "steps"
    ][0]["error"]
    assert "output" not in refused["steps"][0]


def test_compare_a_job_and_its_fork(jobs: JobClient, origin: dict[str, Any]) -> None:
    fork_view = jobs.wait(started(fork(jobs, origin["id"], "s1", sql=EDITED_SQL)), timeout_s=180)
    resp = jobs.http.get(f"/api/jobs/{origin['id']}/compare/{fork_view['id']}")
    assert resp.status_code == 200, resp.text
    diff = resp.json()
    assert diff["a"] == {"id": origin["id"], "status": "completed", "forked_from": None}
    assert diff["b"]["id"] == fork_view["id"] and diff["b"]["forked_from"]["step"] == "s1"
    assert diff["answer"]["a"] == origin["answer"]["text"] and diff["answer"]["b"] == fork_view["answer"]["text"]
    assert diff["answer"]["same"] is False
    assert any("4 rows" in claim for claim in diff["answer"]["claims_added"])
    assert any("92" in claim for claim in diff["answer"]["claims_dropped"])
    cited_a = {c["source_id"] for c in origin["answer"]["citations"]}
    cited_b = {c["source_id"] for c in fork_view["answer"]["citations"]}
    assert diff["citations"] == {
        "added": sorted(cited_b - cited_a),
        "dropped": sorted(cited_a - cited_b),
        "kept": sorted(cited_a & cited_b),
    }
    (sql,) = diff["sql"]
    assert sql["step"] == "s1" and sql["same_sql"] is False and sql["carried_over"] is False
    assert sql["a"] == origin["steps"][0]["output"]["sql"] and sql["b"] == fork_view["steps"][0]["output"]["sql"]
    rows = sql["rows"]
    assert (rows["a"], rows["b"]) == (1, 4) and rows["columns_changed"] is True
    assert (rows["added"], rows["removed"]) == (4, 1) and rows["same_rows"] is False
    assert sorted(r[0] for r in rows["added_rows"]) == ["East", "North", "South", "West"]  # rows are lists
    assert rows["removed_rows"] == origin["steps"][0]["output"]["rows"]
    assert diff["usage"]["total"]["a"]["total_tokens"] == origin["usage"]["total"]["total_tokens"]
    assert diff["usage"]["total"]["b"]["total_tokens"] == fork_view["usage"]["total"]["total_tokens"]
    delta = fork_view["usage"]["total"]["total_tokens"] - origin["usage"]["total"]["total_tokens"]
    assert diff["usage"]["total"]["tokens_delta"] == delta
    assert [(s["id"], s["a"], s["b"]) for s in diff["steps"]] == [
        (i, "succeeded", "succeeded") for i in ("s1", "s2", "s3")
    ]
    assert diff["duration_ms"]["a"] is not None and diff["duration_ms"]["b"] is not None
    # A compare with a step carried over marks it; a job compared with itself differs in nothing.
    same = jobs.http.get(f"/api/jobs/{origin['id']}/compare/{origin['id']}").json()
    assert same["answer"]["same"] is True and same["answer"]["claims_added"] == [] == same["citations"]["added"]
    assert same["sql"][0]["rows"]["same_rows"] is True


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"from_step": "s9"}, 400, "INVALID_FORK_POINT", "from_step"),
        ({"from_step": "s1", "changes": {"allow_sensitive": True}}, 400, "INVALID_REQUEST", "changes.allow_sensitive"),
        ({"from_step": "s1", "changes": {"sql": "DROP TABLE regions"}}, 400, "INVALID_REQUEST", "changes.sql"),
        ({"from_step": "s2", "changes": {"sql": "SELECT 1"}}, 400, "INVALID_REQUEST", "changes.sql"),
        ({"from_step": "s1", "changes": {"constraints": {"max_tokens": 0}}}, 400, "INVALID_REQUEST", None),
        (
            {"from_step": "s1", "changes": {"approval": {"sql": "maybe"}}},
            400,
            "INVALID_REQUEST",
            "changes.approval.sql",
        ),
        ({"from_step": "s1", "changes": {"tools": ["nope.tool"]}}, 400, "INVALID_REQUEST", "changes.tools.0"),
        ({"changes": {}}, 400, "INVALID_REQUEST", "from_step"),
        ({"from_step": "s1", "extra": 1}, 400, "INVALID_REQUEST", "extra"),
    ],
)
def test_a_bad_fork_is_a_400_naming_the_field(
    jobs: JobClient, origin: dict[str, Any], body: dict[str, Any], status: int, code: str, field: str | None
) -> None:
    resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json=body)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code
    if field is None:
        assert error["field"].startswith("changes.constraints.")
    else:
        assert error["field"] == field


def test_a_running_or_unknown_job_cannot_be_forked(jobs: JobClient) -> None:
    waiting = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(waiting, {"waiting_for_user"})
    resp = jobs.http.post(f"/api/jobs/{waiting}/fork", json={"from_step": "s1"})
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "JOB_NOT_FINISHED"
    missing = jobs.http.post(f"/api/jobs/{'0' * 32}/fork", json={"from_step": "s1"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "JOB_NOT_FOUND"
    assert jobs.http.get(f"/api/jobs/{waiting}/compare/{'0' * 32}").status_code == 404
    jobs.cancel(waiting)


def _cli(host: DevHostProcess, *args: str) -> subprocess.CompletedProcess[str]:
    key = host.keys.function if host.keys else ""
    cmd = [sys.executable, "-m", "devhost", "jobs", *args, "--url", host.base_url, "--key", key]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_the_cli_forks_and_compares(host: DevHostProcess, jobs: JobClient, origin: dict[str, Any]) -> None:
    done = _cli(host, "fork", origin["id"], "--from", "s1", "--sql", EDITED_SQL, "--max-tokens", "800", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    started_fork = json.loads(done.stdout)
    assert started_fork["forked_from"] == {"job": origin["id"], "step": "s1"}
    fork_view = jobs.wait(started_fork["id"], timeout_s=180)
    assert fork_view["steps"][0]["output"]["sql"].startswith(EDITED_SQL)
    assert json.loads(jobs.http.get(f"/api/jobs/{fork_view['id']}").text)["forked_from"]["input"] == {"sql": EDITED_SQL}
    shown = _cli(host, "compare", origin["id"], fork_view["id"])
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "s1: SQL changed; rows 1 → 4 (+4 −1)" in shown.stdout
    assert "+ From the data: The query returned 4 rows." in shown.stdout
    bad = _cli(host, "fork", origin["id"], "--from", "s9")
    assert bad.returncode == 2 and "INVALID_FORK_POINT" in bad.stdout + bad.stderr


@pytest.fixture(scope="module")
def agent_origin(jobs: JobClient) -> dict[str, Any]:
    """An agent job: turn 1 calls the SQL and the document lookup together, turn 2 is done, then the answer."""
    view = jobs.wait(jobs.submit(MIXED_Q, mode="agent", tools=["function.growth_rate"]), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert [(s["id"], s.get("turn")) for s in view["steps"]] == [("t1", 1), ("t2", 1), ("answer", None)]
    return view


@pytest.mark.parametrize(
    ("from_step", "carried", "runs"),
    [
        ("turn-1", [], ["agent_turn", "execute_azure_sql", "consult_rag", "agent_turn", "generate_response"]),
        ("turn-2", ["t1", "t2"], ["agent_turn", "generate_response"]),
        ("answer", ["t1", "t2"], ["generate_response"]),
    ],
)
def test_an_agent_job_forks_at_a_turn(
    host: DevHostProcess,
    jobs: JobClient,
    agent_origin: dict[str, Any],
    from_step: str,
    carried: list[str],
    runs: list[str],
) -> None:
    resp = fork(jobs, agent_origin["id"], from_step, constraints={"max_tokens": 900})
    assert resp.json()["carried_over"] == carried
    view = jobs.wait(started(resp), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    # The transcript up to the fork point is carried over: only the later turns, their calls and the answer ran.
    ran = [name for name, _ in activities_run(host, view["id"])]
    assert ran[0] == "load_fork_base" and sorted(ran[1:]) == sorted(runs)  # a turn's calls run together
    assert model_calls(host, view["id"]) == runs.count("agent_turn") + 1 + runs.count("execute_azure_sql")
    assert [s["id"] for s in view["steps"]] == ["t1", "t2", "answer"]
    assert [s["id"] for s in view["steps"] if s.get("carried_over")] == carried
    by_id = {s["id"]: s for s in agent_origin["steps"]}
    for step_id in carried:
        assert view["steps"][carried.index(step_id)]["output"] == by_id[step_id]["output"]
    # What the carried part used is counted apart: the carried calls, and the Executor's turns before the fork.
    own = view["usage"]["total"]["total_tokens"]
    assert (
        own + view["usage"]["carried_over"]["total_tokens"]
        == agent_origin["usage"]["total"]["total_tokens"] - (agent_origin["usage"]["planning"]["total_tokens"])
    )
    assert view["answer"]["text"] == agent_origin["answer"]["text"]  # the offline Executor is deterministic
    assert view["agent"]["turns"] == agent_origin["agent"]["turns"]


def test_an_agent_fork_takes_no_step_edit_and_a_known_turn(jobs: JobClient, agent_origin: dict[str, Any]) -> None:
    bad_turn = fork(jobs, agent_origin["id"], "turn-9")
    assert bad_turn.status_code == 400 and bad_turn.json()["error"]["field"] == "from_step"
    assert bad_turn.json()["error"]["code"] == "INVALID_FORK_POINT"
    edit = fork(jobs, agent_origin["id"], "turn-2", sql="SELECT 1")
    assert edit.status_code == 400 and edit.json()["error"]["field"] == "changes.sql"


def test_run_again_is_a_fork_at_the_failed_step(host: DevHostProcess, jobs: JobClient) -> None:
    # The budget stops the job before its answer (planning and the SQL writer used most of it): it fails at s3.
    failed = jobs.wait(jobs.submit(MIXED_Q, constraints={"budget": {"max_total_tokens": 4800}}), timeout_s=180)
    assert failed["status"] == "failed" and failed["error"]["code"] == "BUDGET_EXCEEDED", failed["error"]
    assert [s["state"] for s in failed["steps"]][:2] == ["succeeded", "succeeded"], failed["error"]
    at = failed["error"]["step_id"]
    assert at == "s3"
    again = fork(jobs, failed["id"], at, constraints={"budget": {"max_total_tokens": 20000}})
    view = jobs.wait(started(again), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    assert [name for name, _ in activities_run(host, view["id"])] == ["load_fork_base", "generate_response"]
    assert view["usage"]["total"]["total_tokens"] == view["usage"]["by_step"]["s3"]["total_tokens"] > 0


def test_a_forks_event_stream_ends_and_shows_only_what_it_ran(jobs: JobClient, origin: dict[str, Any]) -> None:
    view = jobs.wait(started(fork(jobs, origin["id"], "s3")), timeout_s=180)
    got = sse.read(jobs.http, view["id"])
    types = [m.event for m in got if m.data]
    assert types[-1] == "end" and got[-1].data is not None and got[-1].data["status"] == "completed"
    started_steps = {m.data["step_id"] for m in got if m.data and m.event == "step" and m.data["state"] == "started"}
    assert started_steps == {"s3"}
    lines = [m.data["message"] for m in got if m.data and m.event == "log"]
    assert any(line.startswith(f"forked from job {origin['id']} at s3; carried over: s1, s2") for line in lines)


def test_a_hybrid_job_forks_with_the_supervisor_after_its_own_steps_only(host: DevHostProcess, jobs: JobClient) -> None:
    hybrid = jobs.wait(jobs.submit(MIXED_Q, mode="hybrid"), timeout_s=180)
    assert hybrid["status"] == "completed", hybrid.get("error")
    view = jobs.wait(started(fork(jobs, hybrid["id"], "s2", query="store credit")), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    ran = [name for name, _ in activities_run(host, view["id"])]
    # The Supervisor looks after the lookup the fork ran, never after the carried SQL step.
    assert ran == ["load_fork_base", "consult_rag", "supervise", "generate_response"]
    assert view["usage"]["supervisor"]["total_tokens"] <= hybrid["usage"]["supervisor"]["total_tokens"]
