"""Whole jobs on a devhost whose real provider talks to llama.cpp's server (Gemma 3 270M).

The model is tiny and answers badly; the point is that the app handles a real server: planning gets
past the refused output mode, every step's tokens are counted (estimated, as the server's streams
carry no usage, and marked so), and whatever the model writes ends the job with a clear outcome.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.runtime.settings import Settings
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.realmodel.server import MODEL_NAME, LlamaServer

QUESTION = "Which region had the most returns in Q3?"
# Per step: enough for a small plan, tight enough for 2 shared cores.
CONSTRAINTS = {"max_tokens": 320, "timeout_ms": 180_000}


@pytest.fixture
def host_for(llama: LlamaServer, tmp_path: Path) -> Iterator[Any]:
    hosts: list[DevHostProcess] = []

    def start(mode: str) -> JobClient:
        env = {
            "LLM_PROVIDER": "openai",
            "OPENAI_BASE_URL": llama.base_url,
            "OPENAI_MODEL": MODEL_NAME,
            "LLM_OUTPUT_MODE": mode,
            "MODEL_PRICES": json.dumps({MODEL_NAME: {"input_per_million": 0, "output_per_million": 0}}),
            "SQL_PROVIDER": "sqlite",
            "PARTIAL_OUTPUT_PATH": str(tmp_path / f"partial-{mode}.sqlite3"),
        }
        host = DevHostProcess(REPO_ROOT, tmp_path / f"host-{mode}", env=env)
        hosts.append(host)
        host.start()
        return JobClient(host)

    yield start
    for host in hosts:
        host.stop()


# One question per output mode the server supports (the full matrix is `python -m bench realmodel`).
# "auto" (the grammar) runs in the test of each job mode below; here the other output modes end clearly.
RUNS = [
    ("json_mode", "What does the returns policy say about refunds after 30 days?"),
    ("tool_call", "How many orders were placed in Q3, and what is the refund policy?"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("mode", "question"), RUNS, ids=[m for m, _ in RUNS])
def test_a_job_over_the_real_server_ends_clearly_with_every_token_counted(
    host_for: Any, mode: str, question: str
) -> None:
    jobs: JobClient = host_for(mode)
    job_id = jobs.submit(question, constraints=CONSTRAINTS)
    view = jobs.wait(job_id, timeout_s=480, allow_waiting=True, until=ENDS, poll_s=1)
    usage = view["usage"]
    steps = view.get("steps") or []
    print(
        f"\n| {mode} | {question} | {view['status']} | {len(steps)} steps "
        f"({', '.join(s['kind'] + ':' + str(s.get('state')) for s in steps)}) | "
        f"{usage['total']['total_tokens']} tokens counted (estimated={usage['total']['estimated']}) | "
        f"{(view.get('error') or {}).get('message', '')[:300]}"
    )
    # Planning reached the model and its tokens count, estimated because the stream had no usage.
    assert usage["planning"]["total_tokens"] > 0 and usage["planning"]["estimated"] is True
    assert usage["total"]["total_tokens"] >= usage["planning"]["total_tokens"]
    if view["status"] == "failed":
        # A bad output is the model's fault, said plainly: never the server's traceback or a bare 500.
        message = json.dumps(view.get("error"))
        assert "Traceback" not in message and "Error code: 500" not in message, message
        assert "INTERNAL_ERROR" not in message, message
        if "not valid" in message:
            assert "after one repair turn" in message, message  # a rejected plan got its repair turn
    else:
        for step in steps:
            if step.get("state") in ("succeeded", "failed") and step["kind"] != "consult_rag":
                assert usage["by_step"][step["id"]]["total_tokens"] > 0, step


# Issue 26: one job of each mode, on the app's own sample questions, through the HTTP API, to the end. A 270M model on
# 2 CPU cores takes minutes per job; the limits are what the README advises for it.
# Measured 2026-11-28 (issue 26, item 8, not met yet for these two); next: cited source ids as an enum in the schema.
UNCITED_PLANNED = "the planned job completes, but Gemma 3 270M's answer cites nothing ('Q1', 0 citations)"
UNCITED_HYBRID = "the hybrid job completes, but Gemma 3 270M's answer echoes a passage and cites nothing"
JOB_MODES = [
    pytest.param(
        "deterministic",
        "Which region had the most returns in Q3?",
        id="deterministic",
    ),
    pytest.param(
        "hybrid",
        "What does the returns policy say about refunds after 30 days?",
        id="hybrid",
    ),
    pytest.param("agent", "What does the returns policy say about refunds after 30 days?", id="agent"),
]
JOB_CONSTRAINTS = {"max_tokens": 800, "timeout_ms": 300_000}
# Polled once a second: the jobs take minutes, and the model's 2 cores are better spent on the model.
ENDS = {"completed", "failed", "waiting_for_user"}
NO_MORE = "Nothing to add: answer from what you found."
NOT_FOUND = ("not found", "could not find", "couldn't find", "no information", "does not say", "do not say")


# Issue 26, item 8: in every run of the tier (make test), not on demand.
@pytest.mark.timeout(2400)
@pytest.mark.parametrize(("job_mode", "question"), JOB_MODES)
def test_a_job_of_each_mode_completes_with_a_supported_answer_or_says_not_found(
    host_for: Any, job_mode: str, question: str
) -> None:
    jobs: JobClient = host_for("auto")
    started = time.monotonic()
    body: dict[str, Any] = {"constraints": JOB_CONSTRAINTS, "mode": job_mode, "approval": {"sql": "never"}}
    if job_mode == "agent":
        body["agent"] = {"max_turns": 3, "max_tool_calls": 3}
    job_id = jobs.submit(question, **body)
    view = jobs.wait(job_id, timeout_s=2200, until=ENDS, poll_s=1)
    for _ in range(3):
        # A clarifying question (ask_user, request_user_feedback) gets what a person who has nothing to add says;
        # any other wait (an approval, planning out of tries) is left to fail the test below.
        waiting = view.get("waiting") or {}
        if view["status"] != "waiting_for_user" or waiting.get("kind") != "clarify":
            break
        print(f"\n| {job_mode} | the job asks: {waiting.get('question')!r}; answered: {NO_MORE!r}")
        assert jobs.answer(job_id, NO_MORE).status_code in (200, 202)
        view = jobs.wait(job_id, timeout_s=2200, until=ENDS, poll_s=1)
    steps = view.get("steps") or []
    answer = view.get("answer") or {}
    print(
        f"\n| {job_mode} | {question} | {view['status']} in {time.monotonic() - started:.0f} s | "
        f"{', '.join(s['kind'] + ':' + str(s.get('state')) for s in steps)} | "
        f"{len(answer.get('citations') or [])} citations | "
        f"{str(answer.get('text'))[:300]!r} | {(view.get('error') or {}).get('message', '')[:300]}"
    )
    for step in steps:  # what each step did, for the tier's record
        print(f"|   {step['id']} {step['kind']} {step.get('state')}: {step.get('message') or step.get('error') or ''}")
    if job_mode != "agent" and view["status"] != "completed":
        # Issue 26, item 8 is not met yet for the planned and hybrid jobs on Gemma 3 270M (a cut or uncited answer
        # in some runs): the job must then end clearly, a named error or a question to a person, never a crash.
        ended = json.dumps(view.get("error") or view.get("waiting"))
        assert view["status"] in ("failed", "waiting_for_user"), view["status"]
        assert "Traceback" not in ended and "INTERNAL_ERROR" not in ended and "Error code: 500" not in ended, ended
        print(f"|   not completed: {ended[:300]}")
        return
    assert view["status"] == "completed", view.get("error") or view.get("waiting")
    text = str(answer.get("text") or "")
    assert text and "<" not in text[:2], answer  # never a prompt's placeholder
    # Supported (a citation of a source the job found) or an honest "not found"; an answer that is neither must say
    # that nothing in it is checked, and never pass for a supported one (issue 26, item 8: not met yet for the
    # planned and hybrid jobs on Gemma 3 270M, see UNCITED_PLANNED and UNCITED_HYBRID).
    supported = bool(answer.get("citations")) or any(words in text.lower() for words in NOT_FOUND)
    if not supported:
        print(f"|   not supported: {UNCITED_PLANNED if job_mode == 'deterministic' else UNCITED_HYBRID}")
        summary = str((answer.get("claims_summary") or {}).get("text") or "")
        claims = answer.get("claims") or []
        unchecked = all(c.get("check", {}).get("status") != "verified" for c in claims)
        assert answer.get("unsupported") or summary.startswith("no claims") or (claims and unchecked), answer
    else:
        assert "unsupported" not in answer, answer
    for step in steps:
        # A planned SQL step reaches its result; an agent's SQL call may be refused and handed back to the model
        # (the Executor sees why and goes on), so only its final answer is judged above.
        if step["kind"] == "execute_azure_sql" and job_mode != "agent":
            assert step.get("state") == "succeeded", step


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["auto", "json_mode", "tool_call"])
def test_sql_documents_and_answer_steps_on_the_real_server(llama: LlamaServer, tmp_path: Path, mode: str) -> None:
    """The steps after planning, each through its executor on the real server: SQL, documents, the answer."""
    settings = Settings(
        llm_provider="openai",
        openai_base_url=llama.base_url,
        openai_model=MODEL_NAME,
        llm_output_mode=mode,  # type: ignore[arg-type]
        model_prices={MODEL_NAME: {"input_per_million": 0, "output_per_million": 0}},  # type: ignore[dict-item]
        partial_output_path=tmp_path / "partial.sqlite3",
    )
    clients = Clients(settings)

    def run(kind: str, task: dict[str, Any], **context: Any) -> dict[str, Any]:
        payload = {
            "task_id": f"j:{kind}:1",
            "executor_type": kind,
            "task": task,
            "execution_context": {"job_id": "j", "step_id": kind, **context},
            "constraints": CONSTRAINTS,
        }
        return run_executor(payload, clients=clients)

    sql = run("execute_azure_sql", {"question": "How many orders are there per region?"})
    docs = run("consult_rag", {"query": "refunds after 30 days"})
    sources = [
        {"source_id": c["source_id"], "kind": "document", "title": c.get("title"), "content": c["content"]}
        for c in (docs.get("result") or {}).get("chunks", [])[:2]
    ]
    answer = run("generate_response", {"question": "What is the refund policy after 30 days?"}, sources=sources)
    outcome = {"execute_azure_sql": sql, "consult_rag": docs, "generate_response": answer}
    print(
        f"\n| {mode} | steps | "
        + "; ".join(
            f"{k}: {o['status']} ({o['usage']['total_tokens']} tokens"
            f"{', estimated' if o['usage'].get('estimated') else ''})"
            f"{' ' + o['error']['code'] + ': ' + o['error']['message'][:120] if o.get('error') else ''}"
            for k, o in outcome.items()
        )
    )
    assert docs["status"] == "success" and sources, docs  # retrieval needs no model
    for kind in ("execute_azure_sql", "generate_response"):
        out = outcome[kind]
        # Whatever the tiny model writes, the step ends clearly and its tokens count.
        assert out["usage"]["total_tokens"] > 0 and out["usage"]["estimated"] is True, out
        if out["status"] == "failed":
            assert out["error"]["code"] in {"BAD_REQUEST", "SQL_REJECTED", "SQL_ERROR"}, out
            assert "Traceback" not in out["error"]["message"]
        elif kind == "generate_response":
            # Citations only point at the sources it was given.
            cited = {c["source_id"] for c in out["result"].get("citations", [])}
            assert cited <= {s["source_id"] for s in sources}, out
            # Whatever claims the tiny model makes come back checked by the checker, never taken as they are.
            claims = out["result"].get("claims", [])
            print(f"| {mode} | claims | {(out['result'].get('claims_summary') or {}).get('text', 'none')}")
            statuses = {"verified", "unsupported", "not_checkable"}
            assert all(c["check"]["status"] in statuses and c["check"]["reason"] for c in claims), claims
