"""Whole jobs over HTTP on a real devhost process running the app itself, on embedded defaults."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

DOCS_Q = "What does the returns policy say about refunds after 30 days?"
SQL_Q = "Which region had the most returns in Q3?"
DOCS_FIRST_Q = (
    "What does the returns policy say about refunds after 30 days, and which region had the most returns in Q3?"
)
MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    data = tmp_path_factory.mktemp("jobs-host")
    proc = DevHostProcess(REPO_ROOT, data, env={"JOB_RETRY_FIRST_INTERVAL_MS": "50"})
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def kinds(view: dict) -> list[str]:
    return [s["kind"] for s in view["steps"]]


def test_documents_only_question(jobs: JobClient) -> None:
    view = jobs.wait(jobs.submit(DOCS_Q))
    assert view["status"] == "completed", view.get("error")
    assert kinds(view) == ["consult_rag", "generate_response"]
    rag = view["steps"][0]["output"]
    assert rag["chunks"] and all("#" in c["source_id"] for c in rag["chunks"])
    answer = view["answer"]
    assert "30 days" in answer["text"]
    cited = {c["source_id"] for c in answer["citations"]}
    assert cited and cited <= {c["source_id"] for c in rag["chunks"]}
    assert all(s["state"] == "succeeded" and s["started_at"] and s["ended_at"] for s in view["steps"])


def test_sql_only_question(jobs: JobClient) -> None:
    view = jobs.wait(jobs.submit(SQL_Q))
    assert view["status"] == "completed", view.get("error")
    assert kinds(view) == ["execute_azure_sql", "generate_response"]
    sql = view["steps"][0]["output"]
    assert sql["sql"].lower().startswith(("select", "with")) and sql["rows"] and sql["columns"]
    assert any(c["kind"] == "sql" for c in view["answer"]["citations"])
    assert view["usage"]["total"]["total_tokens"] > 0


def test_mixed_question_cites_documents_and_sql(jobs: JobClient) -> None:
    view = jobs.wait(jobs.submit(MIXED_Q))
    assert view["status"] == "completed", view.get("error")
    assert set(kinds(view)) == {"execute_azure_sql", "consult_rag", "generate_response"}
    cited_kinds = {c["kind"] for c in view["answer"]["citations"]}
    assert cited_kinds == {"document", "sql"}
    per_step = view["usage"]["by_step"]
    total = view["usage"]["total"]["total_tokens"]
    assert total == view["usage"]["planning"]["total_tokens"] + sum(u["total_tokens"] for u in per_step.values())


def test_approval_approved_runs_the_shown_sql(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    waiting = jobs.wait(job_id, {"waiting_for_user"})
    question = waiting["waiting"]
    assert question["kind"] == "approval" and question["options"] == ["approve", "edit", "reject", "abort"]
    shown_sql = question["details"]["sql"]
    assert waiting["steps"][waiting["current_step_index"]]["state"] == "waiting"
    assert jobs.answer(job_id, "approve").status_code == 202
    view = jobs.wait(job_id)
    assert view["status"] == "completed"
    assert view["steps"][0]["output"]["sql"] == shown_sql


def test_approval_edited_runs_the_edited_sql_through_the_guard(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"})
    edited = "SELECT reason, COUNT(*) AS n FROM returns GROUP BY reason"
    resp = jobs.answer(job_id, {"action": "edit", "sql": edited})
    assert resp.status_code == 202, resp.text
    # A human approves the exact statement that runs: the guarded edit is shown for approval again.
    again = jobs.next_question(job_id, "s1-q1")
    shown = again["details"]["sql"]
    assert again["kind"] == "approval" and "group by reason" in shown.lower() and "limit" in shown.lower()
    assert jobs.answer(job_id, "approve", question_id=again["question_id"]).status_code == 202
    view = jobs.wait(job_id)
    assert view["status"] == "completed", view.get("error")
    assert view["steps"][0]["output"]["sql"] == shown  # the guard capped the rows; exactly that ran


def test_sensitive_tables_need_a_human_yes(jobs: JobClient) -> None:
    contacts = "SELECT email FROM customer_contacts"
    # Approved by a human: the sensitive table may be read, once the edited statement itself is approved.
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    first = jobs.wait(job_id, {"waiting_for_user"})["waiting"]
    assert jobs.answer(job_id, {"action": "edit", "sql": contacts}).status_code == 202
    again = jobs.next_question(job_id, first["question_id"])
    assert again["details"]["sensitive_tables"] == ["customer_contacts"]
    assert jobs.answer(job_id, "approve", question_id=again["question_id"]).status_code == 202
    view = jobs.wait(job_id)
    assert view["status"] == "completed" and view["steps"][0]["output"]["rows"]
    assert view["steps"][0]["output"]["sql"] == again["details"]["sql"]
    # With the "sensitive" policy, a query on ordinary tables runs without asking.
    plain = jobs.wait(jobs.submit(SQL_Q, approval={"sql": "sensitive"}))
    assert plain["status"] == "completed" and plain["steps"][0]["output"]["rows"]


def test_sensitive_tables_are_off_the_allow_list_without_approval(tmp_path: Path) -> None:
    host = _fault_host(tmp_path, "write_sql:BAD_REQUEST:1")
    try:
        jobs = JobClient(host)
        job_id = jobs.submit(SQL_Q)
        jobs.wait(job_id, {"waiting_for_user"})  # the SQL writer failed; the user may edit the step
        assert jobs.answer(job_id, {"action": "edit", "sql": "SELECT email FROM customer_contacts"}).status_code == 202
        view = jobs.wait(job_id, {"waiting_for_user"})
        step = view["steps"][0]
        assert step["error"]["code"] == "SQL_REJECTED" and "customer_contacts" in step["error"]["message"]
        assert "output" not in step
    finally:
        host.stop()


def test_an_approval_edit_may_set_only_the_step_input_fields(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    waiting = jobs.wait(job_id, {"waiting_for_user"})["waiting"]
    contacts = "SELECT email FROM customer_contacts"
    for answer, field in (
        ({"action": "edit", "sql": contacts, "allow_sensitive": True}, "answer.allow_sensitive"),
        ({"action": "edit", "input": {"question": "x", "mode": "run"}}, "answer.input.mode"),
        ({"action": "edit", "sql": ""}, "answer.sql"),
        ({"action": "edit"}, "answer"),
    ):
        resp = jobs.answer(job_id, answer)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["code"] == "INVALID_ANSWER" and resp.json()["error"]["field"] == field
    # Nothing was merged or resumed: the job still asks the same question.
    assert jobs.view(job_id)["waiting"]["question_id"] == waiting["question_id"]
    assert jobs.answer(job_id, "reject").status_code == 202
    assert jobs.wait(job_id)["status"] == "completed"


def test_approval_rejected_skips_the_step(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"})
    assert jobs.answer(job_id, "reject").status_code == 202
    view = jobs.wait(job_id)
    assert view["status"] == "completed"
    step = view["steps"][0]
    assert step["state"] == "skipped" and "output" not in step and step["draft"]["sql"]
    assert view["answer"] is not None


def test_feedback_errors_and_exactly_once(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    waiting = jobs.wait(job_id, {"waiting_for_user"})["waiting"]
    bad = jobs.answer(job_id, "maybe")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_ANSWER"
    first = jobs.answer(job_id, "approve", question_id=waiting["question_id"])
    assert first.status_code == 202
    # The same answer again (a client that got no response) is accepted again; a different one is refused.
    second = jobs.answer(job_id, "approve", question_id=waiting["question_id"])
    assert second.status_code == 202 and second.json()["repeated"] is True
    other = jobs.answer(job_id, "reject", question_id=waiting["question_id"])
    assert other.status_code == 409 and other.json()["error"]["code"] == "ALREADY_ANSWERED"
    view = jobs.wait(job_id)
    assert view["status"] == "completed"
    runs = [e for e in view["log"]["entries"] if "execute_azure_sql" in e["message"] and "rows" in e["message"]]
    assert len(runs) == 1, runs
    assert [(a["question_id"], a["answer"]) for a in view["answers"]] == [(waiting["question_id"], "approve")]
    late = jobs.answer(job_id, "approve")
    assert late.status_code == 409 and late.json()["error"]["code"] == "JOB_NOT_WAITING"


def test_cancel_keeps_done_work(jobs: JobClient) -> None:
    job_id = jobs.submit(SQL_Q, approval={"sql": "always"})
    jobs.wait(job_id, {"waiting_for_user"})
    assert jobs.cancel(job_id).status_code == 202
    view = jobs.wait(job_id, {"cancelled"})
    assert view["steps"][0]["state"] == "cancelled"
    assert any("plan" in e["message"] for e in view["log"]["entries"])
    again = jobs.cancel(job_id)
    assert again.status_code == 409 and again.json()["error"]["code"] == "JOB_FINISHED"


def test_budget_stop_before_exceeding(jobs: JobClient) -> None:
    # Planning fits; the SQL writer's prompt plus max_tokens would not fit what is left.
    job_id = jobs.submit(MIXED_Q, constraints={"max_tokens": 400, "budget": {"max_total_tokens": 3000}})
    view = jobs.wait(job_id)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "BUDGET_EXCEEDED"
    stopped = next(s for s in view["steps"] if s["id"] == view["error"]["step_id"])
    assert stopped["state"] == "failed" and stopped["error"]["code"] == "BUDGET_EXCEEDED"
    assert 0 < view["usage"]["total"]["total_tokens"] <= 3000
    tiny = jobs.wait(jobs.submit(DOCS_Q, constraints={"budget": {"max_total_tokens": 500}}))
    assert tiny["status"] == "failed" and tiny["error"]["code"] == "BUDGET_EXCEEDED"
    assert tiny["usage"]["total"]["total_tokens"] == 0  # stopped before planning spent anything


def test_expired_approval_fails_or_proceeds_by_default(jobs: JobClient) -> None:
    failing = jobs.submit(SQL_Q, approval={"sql": "always", "timeout_seconds": 1})
    proceeding = jobs.submit(SQL_Q, approval={"sql": "always", "timeout_seconds": 1, "on_timeout": "approve"})
    failed = jobs.wait(failing, timeout_s=30, allow_waiting=True)
    assert failed["status"] == "failed" and failed["error"]["code"] == "WAIT_EXPIRED"
    done = jobs.wait(proceeding, timeout_s=30, allow_waiting=True)
    assert done["status"] == "completed" and done["steps"][0]["output"]["rows"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "question"),
        ({"question": "   "}, "question"),
        ({"question": "x", "constraints": {"temperature": 5}}, "constraints.temperature"),
        ({"question": "x", "approval": {"sql": "sometimes"}}, "approval.sql"),
        ({"question": "x", "surprise": 1}, "surprise"),
        ({"question": "x", "constraints": {"budget": {"max_total_tokens": 0}}}, "constraints.budget.max_total_tokens"),
    ],
)
def test_invalid_bodies_get_400_with_the_field(jobs: JobClient, body: dict, field: str) -> None:
    resp = jobs.http.post("/api/jobs", json=body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "INVALID_REQUEST" and error["field"] == field


def test_bad_json_unknown_job_and_auth(jobs: JobClient, host: DevHostProcess) -> None:
    resp = jobs.http.post("/api/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "INVALID_JSON"
    missing = jobs.http.get("/api/jobs/does-not-exist")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "JOB_NOT_FOUND"
    assert host.client.get("/api/jobs").status_code == 401  # the job API needs a function key


def test_list_jobs_newest_first_filtered_and_paged(jobs: JobClient) -> None:
    ids = [jobs.submit(DOCS_Q) for _ in range(3)]
    for job_id in ids:
        jobs.wait(job_id)
    page = jobs.http.get("/api/jobs", params={"limit": 2}).json()
    assert len(page["jobs"]) == 2 and page["next_cursor"]
    assert page["jobs"][0]["created_at"] >= page["jobs"][1]["created_at"]
    rest = jobs.http.get("/api/jobs", params={"limit": 100, "cursor": page["next_cursor"]}).json()
    seen = [j["id"] for j in page["jobs"] + rest["jobs"]]
    assert len(seen) == len(set(seen)) and set(ids) <= set(seen)
    completed = jobs.http.get("/api/jobs", params={"status": "completed", "limit": 100}).json()["jobs"]
    assert completed and all(j["status"] == "completed" for j in completed)
    bad = jobs.http.get("/api/jobs", params={"status": "done"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "status"


def test_listing_follows_durable_continuation_tokens(jobs: JobClient, host: DevHostProcess) -> None:
    import asyncio

    from api.job_list import durable_instances

    for _ in range(3):
        jobs.submit(DOCS_Q)
    binding = json.dumps({"rpcBaseUrl": host.rpc_base_url()})
    one_page = asyncio.run(durable_instances(binding, None, page_size=1000))
    paged = asyncio.run(durable_instances(binding, None, page_size=2))
    assert len(one_page) >= 3
    assert sorted(i["instanceId"] for i in paged) == sorted(i["instanceId"] for i in one_page)


def test_log_is_append_only_and_paged(jobs: JobClient) -> None:
    job_id = jobs.submit(MIXED_Q)
    jobs.wait(job_id)
    full = jobs.view(job_id, log_limit=1000)["log"]
    assert full["complete"] and len(full["entries"]) >= 5
    first = jobs.view(job_id, log_limit=2)["log"]
    second = jobs.view(job_id, log_cursor=first["next_cursor"], log_limit=1000)["log"]
    assert first["entries"] + second["entries"] == full["entries"]


def _fault_host(tmp_path: Path, faults: str) -> DevHostProcess:
    env = {"OFFLINE_LLM_FAULTS": faults, "JOB_RETRY_FIRST_INTERVAL_MS": "50"}
    return DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start()


def test_retryable_faults_back_off_then_succeed(tmp_path: Path) -> None:
    host = _fault_host(tmp_path, "write_answer:RATE_LIMITED:2")
    try:
        jobs = JobClient(host)
        view = jobs.wait(jobs.submit(DOCS_Q))
        assert view["status"] == "completed"
        answer_step = view["steps"][-1]
        assert answer_step["attempts"] == 3
        messages = [e["message"] for e in view["log"]["entries"]]
        assert sum("failed RATE_LIMITED" in m for m in messages) == 2
        assert sum(m.startswith("timer fired") for m in messages) >= 2
    finally:
        host.stop()


def test_failing_step_waits_and_user_retries(tmp_path: Path) -> None:
    host = _fault_host(tmp_path, "write_sql:BAD_REQUEST:1")
    try:
        jobs = JobClient(host)
        job_id = jobs.submit(SQL_Q)
        waiting = jobs.wait(job_id, {"waiting_for_user"})
        assert waiting["waiting"]["kind"] == "error"
        assert waiting["waiting"]["options"] == ["retry", "skip", "edit", "abort"]
        assert waiting["steps"][0]["error"]["code"] == "BAD_REQUEST"
        assert jobs.answer(job_id, "retry").status_code == 202
        view = jobs.wait(job_id)
        assert view["status"] == "completed" and view["steps"][0]["attempts"] == 2
        assert view["steps"][0]["output"]["rows"]
    finally:
        host.stop()


def test_kill_mid_job_then_restart_completes_with_outputs_intact(tmp_path: Path) -> None:
    host = DevHostProcess(REPO_ROOT, tmp_path / "data").start()
    try:
        jobs = JobClient(host)
        job_id = jobs.submit(DOCS_FIRST_Q, approval={"sql": "always"})
        before = jobs.wait(job_id, {"waiting_for_user"})
        done_before = {s["id"]: s.get("output") for s in before["steps"] if s["state"] == "succeeded"}
        assert done_before and all(done_before.values())  # the documents step ran before the approval wait
        host.kill()
        host.port = None
        host.start()
        jobs = JobClient(host)
        after = jobs.view(job_id)
        assert after["status"] == "waiting_for_user"
        assert {s["id"]: s.get("output") for s in after["steps"] if s["state"] == "succeeded"} == done_before
        assert jobs.answer(job_id, "approve").status_code == 202
        view = jobs.wait(job_id)
        assert view["status"] == "completed"
        for step_id, output in done_before.items():
            assert next(s for s in view["steps"] if s["id"] == step_id)["output"] == output
    finally:
        host.stop()
