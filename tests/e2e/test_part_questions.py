"""Questions asked inside a run's parts (a parallel branch, a sub-workflow), on a devhost process.

The part reports its question to the root run (the ``report_part`` activity raises ``part-news:<n>`` on
it); the job view, list and log show it as the job's question; the job API raises the answer on the part.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.e2e import sse
from tests.jobs.jobclient import JobClient
from tests.runs.shapes import change, human


@pytest.fixture(scope="module")
def jobs(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobClient]:
    env = {"AzureWebJobsStorage": azurite.connection_string, "DEFINITIONS_TABLE": "parts" + uuid.uuid4().hex[:12]}
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("parts-host"), env=env)
    proc.start()
    yield JobClient(proc)
    proc.stop()


def ask(node_id: str, question: str, **extra: Any) -> dict[str, Any]:
    return human(node_id, question, ["yes", "no"], **extra)


def calc(node_id: str, old: float, **extra: Any) -> dict[str, Any]:
    return change(node_id, {"value": old}, **extra)


def fan(
    wf_id: str, first: dict[str, Any], second: dict[str, Any], *after: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """A workflow of two branches joined at ``merge``, then the ``after`` nodes."""
    branches = [first["id"], second["id"]]
    nodes = [
        {"id": "split", "kind": "parallel", "branches": branches},
        first,
        second,
        {"id": "merge", "kind": "join", "after": branches},
        *after,
    ]
    return {"id": wf_id, "name": wf_id, "nodes": nodes, **extra}


def start(jobs: JobClient, workflow: dict[str, Any], *more: dict[str, Any]) -> str:
    for definition in (*more, workflow):
        resp = jobs.http.post("/api/workflows", json=definition)
        assert resp.status_code == 201, resp.text
    resp = jobs.http.post(f"/api/workflows/{workflow['id']}/runs", json={})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def steps(view: dict[str, Any]) -> dict[str, str]:
    return {s["id"]: s["state"] for s in view["steps"]}


def log_lines(jobs: JobClient, run_id: str) -> list[str]:
    return [e["message"] for e in jobs.view(run_id)["log"]["entries"]]


def test_a_question_in_a_branch_is_the_jobs_question_and_its_answer_resumes_the_branch(jobs: JobClient) -> None:
    outputs = {"said": {"from": "review.answer"}, "percent": {"from": "calc.data.percent_change"}}
    after = calc("after", 50, after=["merge"])
    run_id = start(
        jobs, fan("branch-asks", ask("review", "Ship the Q3 numbers?"), calc("calc", 80), after, outputs=outputs)
    )
    view = jobs.wait(run_id, {"waiting_for_user"})
    waiting = view["waiting"]
    assert waiting["question_id"] == "review-q1@review" and waiting["question"] == "Ship the Q3 numbers?"
    assert waiting["instance"] == f"{run_id}:review" and waiting["step_id"] == "review"
    assert steps(view)["review"] == "waiting" and steps(view)["split"] == "running"
    # The list, the view and the log tell the same: the job waits for the user on this question.
    listed = jobs.http.get("/api/jobs", params={"status": "waiting_for_user"}).json()["jobs"]
    assert run_id in [j["id"] for j in listed]
    assert "waiting for the user (review-q1@review): Ship the Q3 numbers?" in log_lines(jobs, run_id)
    streamed = sse.read(jobs.http, run_id, stop=lambda m: m.event == "question")[-1]
    assert streamed.event == "question" and (streamed.data or {})["question_id"] == "review-q1@review"
    # Only the question shown is answered, once.
    stale = jobs.answer(run_id, "yes", question_id="review-q1")
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "STALE_QUESTION"
    assert jobs.answer(run_id, "maybe").status_code == 400
    assert jobs.answer(run_id, "yes").status_code == 202
    again = jobs.answer(run_id, "no", question_id="review-q1@review")
    assert again.status_code == 409 and again.json()["error"]["code"] in ("ALREADY_ANSWERED", "JOB_NOT_WAITING")
    view = jobs.wait(run_id)
    assert view["status"] == "completed", view.get("error")
    assert view["run"]["outputs"] == {"said": "yes", "percent": 25.0}
    assert set(steps(view).values()) == {"succeeded"} and view["waiting"] is None
    assert "user answered review-q1@review" in log_lines(jobs, run_id)


def test_two_branches_ask_at_once_and_each_answer_resumes_the_question_shown(jobs: JobClient) -> None:
    outputs = {"left": {"from": "left.answer"}, "right": {"from": "right.answer"}}
    run_id = start(jobs, fan("both-ask", ask("left", "Left?"), ask("right", "Right?"), outputs=outputs))
    first = jobs.wait(run_id, {"waiting_for_user"})["waiting"]
    said = {"left": "yes", "right": "no"}
    assert jobs.answer(run_id, said[first["step_id"]], question_id=first["question_id"]).status_code == 202
    second = jobs.next_question(run_id, first["question_id"])
    assert {first["step_id"], second["step_id"]} == {"left", "right"}
    assert second["question_id"] == f"{second['step_id']}-q1@{second['step_id']}"
    assert jobs.answer(run_id, said[second["step_id"]], question_id=second["question_id"]).status_code == 202
    view = jobs.wait(run_id)
    assert view["status"] == "completed", view.get("error")
    assert view["run"]["outputs"] == {"left": "yes", "right": "no"}


def test_a_question_in_a_sub_workflow_shows_at_its_node_and_a_rejection_fails_the_sub(jobs: JobClient) -> None:
    inner = {
        "id": "inner-approval",
        "name": "Inner approval",
        "nodes": [
            human("confirm", "Approve the refund?", ["approve", "reject"]),
            calc("refund", 40, after=["confirm"]),
        ],
        "outputs": {"percent": {"from": "refund.data.percent_change"}},
    }
    outer = {
        "id": "outer",
        "name": "Outer",
        "nodes": [{"id": "sub", "kind": "workflow", "workflow": "inner-approval"}],
        "outputs": {"percent": {"from": "sub.percent"}},
    }
    run_id = start(jobs, outer, inner)
    view = jobs.wait(run_id, {"waiting_for_user"})
    waiting = view["waiting"]
    # The asking node is the sub-workflow's: the job shows the question at its own node that runs it.
    assert waiting["question_id"] == "confirm-q1@sub:1" and waiting["step_id"] == "sub"
    assert waiting["kind"] == "approval" and waiting["instance"] == f"{run_id}:sub:1"
    assert steps(view) == {"sub": "waiting"}
    assert jobs.answer(run_id, "approve").status_code == 202
    view = jobs.wait(run_id)
    assert view["status"] == "completed", view.get("error")
    assert view["run"]["outputs"] == {"percent": 150.0}

    rejected = jobs.http.post("/api/workflows/outer/runs", json={}).json()["id"]
    jobs.wait(rejected, {"waiting_for_user"})
    assert jobs.answer(rejected, "reject").status_code == 202
    view = jobs.wait(rejected)
    assert view["status"] == "failed" and view["error"]["code"] == "SUB_WORKFLOW_FAILED"
    assert "rejected" in view["error"]["message"]


def test_cancelling_a_run_whose_branch_waits_ends_the_question(jobs: JobClient) -> None:
    run_id = start(jobs, fan("cancel-wait", ask("ask", "Go?"), calc("calc", 80)))
    jobs.wait(run_id, {"waiting_for_user"})
    assert jobs.cancel(run_id).status_code == 202
    view = jobs.wait(run_id)
    assert view["status"] == "cancelled"
    late = jobs.answer(run_id, "yes", question_id="ask-q1@ask")
    assert late.status_code == 409 and late.json()["error"]["code"] == "JOB_NOT_WAITING"
    # The branch that waited is stopped too, not left waiting for an answer nobody can give.
    assert jobs.host.wait_status(f"{run_id}:ask", {"Terminated"})["runtimeStatus"] == "Terminated"


def test_the_cli_stops_at_a_branchs_question_and_answers_it_like_any_other(jobs: JobClient) -> None:
    outputs = {"said": {"from": "ask.answer"}}
    start(jobs, fan("cli-branch", ask("ask", "Go?"), calc("calc", 80), outputs=outputs))
    waits = cli(jobs, "workflows", "run", "cli-branch", "--no-input")
    assert waits.returncode == 4, waits.stdout + waits.stderr  # waits for a person: exit 4, with the job id
    run_id = next(
        j["id"]
        for j in jobs.http.get("/api/jobs", params={"status": "waiting_for_user"}).json()["jobs"]
        if j["question"] == "workflow cli-branch v1"
    )
    assert run_id in waits.stdout + waits.stderr and "Go?" in waits.stdout + waits.stderr
    answered = cli(jobs, "jobs", "answer", run_id, "yes")
    assert answered.returncode == 0, answered.stdout + answered.stderr
    view = jobs.wait(run_id)
    assert view["status"] == "completed" and view["run"]["outputs"] == {"said": "yes"}


def cli(jobs: JobClient, *args: str) -> subprocess.CompletedProcess[str]:
    host = jobs.host
    assert host.keys is not None
    command = [sys.executable, "-m", "devhost", *args, "--url", host.base_url, "--key", host.keys.function]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False)
