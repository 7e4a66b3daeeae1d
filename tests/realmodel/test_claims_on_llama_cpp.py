"""A job's answer written by the real model (llama.cpp, Gemma 3 270M) comes back with its claims checked by code.

The job is a workflow run (a lookup, then the answer), so it reaches the answer step without the tiny model having
to plan; the answer is the real model's. Whatever it writes, the view carries the checker's verdict: every claim
with a status and a reason, each unsupported one marked (the CLI flags it), and an answer with no claims says that
nothing in it is checked. Nothing the model writes is shown as a verified fact unless the checker verified it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from devhost.jobs.render import render_result
from devhost.storage.azurite import Azurite
from shared.jobs.claims import NO_CLAIMS, Claim, ClaimSource, check_claims
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.realmodel.server import MODEL_NAME, LlamaServer

QUESTION = "What does the returns policy say about refunds after 30 days?"
WORKFLOW = {
    "id": "policy-answer",
    "name": "Policy answer",
    "inputs": {"q": {"type": "string"}},
    "nodes": [
        {"id": "docs", "kind": "step", "step": "consult_rag", "input": {"query": {"from": "input.q"}}},
        {"id": "answer", "kind": "step", "step": "generate_response", "after": ["docs"],
         "input": {"question": {"from": "input.q"}}},
    ],
}  # fmt: skip
STATUSES = {"verified", "unsupported", "not_checkable"}


@pytest.fixture
def jobs(llama: LlamaServer, azurite: Azurite, tmp_path: Path) -> Iterator[JobClient]:
    env = {
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": llama.base_url,
        "OPENAI_MODEL": MODEL_NAME,
        "MODEL_PRICES": json.dumps({MODEL_NAME: {"input_per_million": 0, "output_per_million": 0}}),
        "PARTIAL_OUTPUT_PATH": str(tmp_path / "partial.sqlite3"),
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "rmclaims" + uuid.uuid4().hex[:10],
    }
    host = DevHostProcess(REPO_ROOT, tmp_path / "host", env=env)
    host.start(timeout_s=240)
    yield JobClient(host)
    host.stop()


@pytest.mark.timeout(1200)
def test_the_real_models_answer_comes_back_with_its_claims_checked(jobs: JobClient) -> None:
    saved = jobs.http.post("/api/workflows", json=WORKFLOW)
    assert saved.status_code == 201, saved.text
    started = time.monotonic()
    run = jobs.http.post(
        "/api/workflows/policy-answer/runs",
        json={"inputs": {"q": QUESTION}, "constraints": {"max_tokens": 400, "timeout_ms": 300_000}},
    )
    assert run.status_code == 202, run.text
    view = jobs.wait(run.json()["id"], timeout_s=1100, until={"completed", "failed"})
    steps = {s["id"]: s for s in view.get("steps") or []}
    answer = view.get("answer") or {}
    claims = answer.get("claims") or []
    summary = answer.get("claims_summary") or {}
    print(
        f"\n| real model | {view['status']} in {time.monotonic() - started:.0f} s | {summary.get('text')} | "
        f"{len(answer.get('citations') or [])} citations | {str(answer.get('text'))[:300]!r}"
    )
    for claim in claims:
        print(f"|   {claim['check']['status']}: {claim['text'][:120]!r} ({claim['check']['reason'][:120]})")
    assert view["status"] == "completed", view.get("error")
    assert steps["answer"]["output"]["claims_summary"] == summary  # the view's claims are the answer step's
    assert summary, answer  # always a verdict: checked claims, or "nothing is checked"

    # Each claim carries the checker's verdict with its reason, and the counts add up.
    assert all(c["check"]["status"] in STATUSES and c["check"]["reason"] for c in claims), claims
    statuses = [c["check"]["status"] for c in claims]
    assert summary["total"] == len(claims) and summary["verified"] == statuses.count("verified")
    assert summary["unsupported"] == statuses.count("unsupported")
    if not claims:
        assert summary["text"] == NO_CLAIMS and summary["verified"] == 0
    # The verdicts are the checker's own: checking the model's claims again against the sources gives the same.
    chunks = steps["docs"]["output"]["chunks"]
    sources = [ClaimSource(source_id=c["source_id"], kind="document", content=c["content"]) for c in chunks]
    again = check_claims([Claim.model_validate(c) for c in claims], sources, {})
    assert [c.check.status for c in again] == statuses

    # Marked, never shown as fact: the CLI flags every claim not verified, or says nothing is checked.
    console = Console(record=True, width=220)
    console.print(render_result(view))
    printed = console.export_text()
    assert f"claims: {summary['text']}" in printed
    assert printed.count("UNSUPPORTED") == statuses.count("unsupported")
