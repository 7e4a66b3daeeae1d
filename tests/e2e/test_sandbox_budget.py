"""budget.max_sandbox_seconds over HTTP on a devhost process with the local sandbox (bubblewrap): an endless loop
that times out spends the budget, and the retry a person asks for stops with BUDGET_EXCEEDED instead of running it
again (it used to run again and again: only a successful run's time was checked, once, before the first attempt).

Needs bubblewrap and ``.venv-sandbox`` (``make sandbox``): skipped without them, failed when ``SANDBOX_REQUIRED=1``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from shared.sandbox.local import LocalSandbox
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

QUESTION = "Compute the growth rate of revenue by month in 2025 and chart it"
ENDLESS = "while True:\n    pass"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobClient]:
    if not LocalSandbox().available():
        reason = "the local sandbox cannot isolate here (bubblewrap, user namespaces or `make sandbox` missing)"
        if os.environ.get("SANDBOX_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    data = tmp_path_factory.mktemp("sandbox-budget-host")
    env = {"SANDBOX_PROVIDER": "local", "ARTIFACT_STORE": "local", "ARTIFACT_PATH": str(data / "artifacts.sqlite3")}
    host = DevHostProcess(REPO_ROOT, data / "host", env=env)
    host.start()
    yield JobClient(host)
    host.stop()


def test_an_endless_loop_that_times_out_is_not_run_again_past_the_budget(jobs: JobClient) -> None:
    job_id = jobs.submit(
        QUESTION,
        tools=["python.run"],
        approval={"python": "always"},
        constraints={"budget": {"max_sandbox_seconds": 3}},
    )
    asked = jobs.wait(job_id, {"waiting_for_user"}, timeout_s=120)["waiting"]
    assert asked["kind"] == "approval" and asked["step_id"] == "s2"
    # A person replaces the code with an endless loop (an edit is shown again), then approves it.
    assert jobs.answer(job_id, {"action": "edit", "code": ENDLESS}).status_code == 202
    asked = jobs.next_question(job_id, asked["question_id"], timeout_s=120)
    assert asked["details"]["code"] == ENDLESS
    assert jobs.answer(job_id, "approve").status_code == 202
    # The run hits the 3 s wall (the budget cut the 30 s default to what was left); the step failed: retry?
    asked = jobs.next_question(job_id, asked["question_id"], timeout_s=120)
    assert asked["kind"] == "error" and "timeout" in asked["question"], asked
    assert jobs.answer(job_id, "retry").status_code == 202
    view = jobs.wait(job_id, timeout_s=120)
    assert view["status"] == "failed", view
    error = view["error"]
    assert (error["code"], error["step_id"]) == ("BUDGET_EXCEEDED", "s2"), error
    assert "failed and timed-out runs included" in error["message"] and "its budget is 3 s" in error["message"]
    step = next(s for s in view["steps"] if s["id"] == "s2")
    assert step["attempts"] == 1  # the endless loop ran once, not once per retry
