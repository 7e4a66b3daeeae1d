"""A run_python step on a host where no sandbox can run (CONFIG_ERROR) asks once, skip or abort, never loops.

The rule for every step that failed for good is to ask the user; for CONFIG_ERROR neither a retry nor an edit can
help, so the question offers only skip and abort and says why (orchestrators/policy.py ``error_options``). The
whole job runs inline over the real executors; the sandbox raises SandboxUnavailable, either as the local one
does on a machine without user namespaces, or as the Azure one does without its endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from orchestrators.policy import error_options
from shared.executors import run_python as run_python_module
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.providers.sql.catalog import load_catalog
from shared.runtime.settings import Settings
from shared.sandbox.base import SandboxLimits, SandboxRequest, SandboxResult, SandboxUnavailable

QUESTION = "Compute the growth rate of revenue by month in 2025 and chart it"


class NoIsolation:
    """A sandbox on a machine that cannot isolate: it refuses every run, as LocalSandbox does there."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self, request: SandboxRequest, limits: SandboxLimits) -> SandboxResult:
        self.runs += 1
        raise SandboxUnavailable("bubblewrap cannot isolate code on this machine (user namespaces?)")


def settings(**changes: Any) -> Settings:
    base = {"llm_provider": "offline", "search_provider": "local", "sql_provider": "sqlite"}
    return Settings(**{**base, **changes})


def run_job(clients: Clients, answers: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """Run the job answering each question in turn; the result, the questions asked, the executors called."""
    asked: list[dict[str, Any]] = []
    called: list[str] = []
    job = {
        "job_id": "job-no-sandbox",
        "request": {"question": QUESTION, "tools": ["python.run"]},
        "policy": {"first_retry_ms": 1, "max_retry_ms": 5},
    }

    def activity(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        called.append(name)
        return run_executor(payload, expected_type=name, clients=clients)

    def answer(event: str) -> Any:
        asked.append(dict(ctx.custom_status["waiting"]))
        return {"answer": answers[len(asked) - 1] if len(asked) <= len(answers) else "abort"}

    ctx = InlineContext(job, activity, answer)
    result: dict[str, Any] = run_inline(job_orchestrator_body, ctx)
    return result, asked, called


NoSandbox = tuple[Clients, Callable[[], int]]


@pytest.fixture(params=["local", "azure_sessions"])
def no_sandbox(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> NoSandbox:
    """Clients whose sandbox is unavailable, and how many runs a sandbox refused (the Azure one refuses before)."""
    if request.param == "local":
        box = NoIsolation()
        monkeypatch.setattr(run_python_module, "build_sandbox", lambda clients, job_id: box)
        return Clients(settings(), catalog=load_catalog()), lambda: box.runs
    # The Azure sandbox without its endpoint is refused by the factory before any call.
    return Clients(settings(sandbox_provider="azure_sessions"), catalog=load_catalog()), lambda: 1


def test_the_question_offers_only_skip_or_abort_and_says_the_sandbox_is_unavailable(no_sandbox: NoSandbox) -> None:
    clients, refused = no_sandbox
    result, asked, called = run_job(clients, ["skip"])
    assert result["status"] == "completed"
    (question,) = asked
    assert question["kind"] == "error" and question["step_id"] == "s2"
    assert question["options"] == ["skip", "abort"]
    assert "sandbox is unavailable" in question["question"] and "Skip it or abort" in question["question"]
    assert question["details"]["error"]["code"] == "CONFIG_ERROR"
    assert called.count("run_python") == 1 and refused() == 1  # asked once, never run again


def test_abort_ends_the_job_with_a_clear_failure(no_sandbox: NoSandbox) -> None:
    result, asked, called = run_job(no_sandbox[0], ["abort"])
    assert result["status"] == "failed"
    assert result["error"]["code"] == "CONFIG_ERROR" and result["error"]["step_id"] == "s2"
    assert "sandbox is unavailable" in result["error"]["message"]
    assert len(asked) == 1 and called.count("run_python") == 1


def test_retry_is_not_an_answer_and_does_not_run_again(no_sandbox: NoSandbox) -> None:
    clients, refused = no_sandbox
    result, asked, called = run_job(clients, ["retry", "skip"])
    # "retry" is refused (not an option): the same question is asked again, and the step is skipped.
    assert result["status"] == "completed"
    assert [q["options"] for q in asked] == [["skip", "abort"], ["skip", "abort"]]
    assert called.count("run_python") == 1 and refused() == 1


def test_other_failures_keep_every_option() -> None:
    assert error_options("CONFIG_ERROR") == ["skip", "abort"]
    assert error_options("TOOL_ERROR") == ["retry", "skip", "edit", "abort"]
    assert error_options("AUTH_FAILED") == ["retry", "skip", "edit", "abort"]
