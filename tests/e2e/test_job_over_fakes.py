"""Whole jobs on a devhost process whose real provider code talks to the fakes over loopback.

The app runs with ``LLM_PROVIDER=azure_openai`` (API key auth, the v1 endpoint of the fake OpenAI
server) and ``SEARCH_PROVIDER=azure`` (the fake search service, seeded through the real ingestion
sink, hybrid queries through the index's vectorizer). SQL runs on the embedded SQLite provider: the
Azure SQL provider needs SQL Server (its guard emits T-SQL ``TOP`` and it introspects
``INFORMATION_SCHEMA``), which cannot run here; its ODBC path is tested on the SQLite3 ODBC driver in
tests/azuresql. Checked here: the contract outputs carry the fake's usage, the cost from
``MODEL_PRICES`` and the deployment as ``model_used``; a 429 with retry-after becomes a visible
backoff (failed attempt, durable timer, success); the answer streams into the view as it is written.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from shared.providers.search.azure import build_azure_retriever
from shared.runtime.settings import DATA_DIR, Settings
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.fakes.openai_server import FakeOpenAI, JsonReply, rate_limited
from tests.fakes.search_server import FakeSearchServer, seed_index
from tests.jobs.jobclient import JobClient

MIXED_Q = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"
DOCS_QUERY = "returns policy refunds after 30 days"
DEPLOYMENT = "jobs-chat-prod"
# What Azure OpenAI reports as the model behind the deployment; model_used must stay the deployment.
UNDERLYING_MODEL = "gpt-4.1-mini-2025-04-14"
PRICES = {DEPLOYMENT: {"input_per_million": 0.4, "output_per_million": 1.6}}
AOAI_KEY = "fake-aoai-key-0123"
SEARCH_KEY = "fake-search-key"
RETRY_AFTER_MS = 400
Q3_SQL = (
    "SELECT g.name AS region, COUNT(*) AS return_count FROM returns r "
    "JOIN order_items oi ON oi.order_item_id = r.order_item_id "
    "JOIN orders o ON o.order_id = oi.order_id JOIN regions g ON g.region_id = o.region_id "
    "WHERE r.return_date >= '2025-07-01' AND r.return_date < '2025-10-01' "
    "GROUP BY g.name ORDER BY return_count DESC"
)
USAGE = {"plan": (3100, 210), "write_sql": (2400, 70), "write_answer": (1800, 150)}


def toy_embed(text: str) -> list[float]:
    """Hashing-trick bag of words (the fake's vectorizer and the documents' vectors)."""
    vector = [0.0] * 32
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 32] += 1.0
    return vector


def plan() -> dict[str, Any]:
    """The plan the fake model returns for the mixed question."""
    return {
        "steps": [
            {
                "id": "sales",
                "kind": "execute_azure_sql",
                "title": "Returns by region in Q3",
                "input": {"question": "Which region had the most returns in Q3?"},
                "depends_on": [],
            },
            {
                "id": "policy",
                "kind": "consult_rag",
                "title": "Refunds after 30 days",
                "input": {"query": DOCS_QUERY},
                "depends_on": [],
            },
            {
                "id": "answer",
                "kind": "generate_response",
                "title": "Answer",
                "input": {"question": MIXED_Q},
                "depends_on": ["sales", "policy"],
            },
        ],
        "rationale": "Needs the returns data and the returns policy.",
    }


def answer(doc_source: str) -> dict[str, Any]:
    """A long-ish answer citing the SQL result and a real chunk of the seeded index."""
    filler = " ".join(f"Detail {i} of the returns analysis follows from the cited sources." for i in range(12))
    return {
        "answer": (
            f"The region with the most returns in Q3 was the one at the top of the query result [sql:sales]. "
            f"Refunds after 30 days follow the returns policy [{doc_source}]. {filler}"
        ),
        "citations": [
            {"source_id": "sql:sales", "kind": "sql", "title": "Returns by region in Q3", "quote": None},
            {"source_id": doc_source, "kind": "document", "title": "Returns policy", "quote": None},
        ],
        "claims": [],
    }


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeOpenAI, dict[str, str], str]]:
    """The fake OpenAI and search servers; the search env; the source id the app's query will return first."""
    with (
        FakeOpenAI(api_key=AOAI_KEY, response_model=UNDERLYING_MODEL) as llm,
        FakeSearchServer(api_key=SEARCH_KEY, vectorizer=toy_embed) as search,
    ):
        env = seed_index(search, DATA_DIR / "docs", embed=toy_embed)
        # Ask the same index the same query the app will ask, to cite a chunk it really returns.
        retriever = build_azure_retriever(
            Settings(
                search_provider="azure",
                azure_search_endpoint=search.endpoint,
                azure_search_api_key=SecretStr(SEARCH_KEY),
                azure_search_index=env["AZURE_SEARCH_INDEX"],
                azure_search_vector_mode=env["AZURE_SEARCH_VECTOR_MODE"],  # type: ignore[arg-type]
                azure_search_semantic_config=env.get("AZURE_SEARCH_SEMANTIC_CONFIG"),
            )
        )
        top = retriever.search(DOCS_QUERY, top_k=5)
        assert top, "the seeded fake index returns nothing for the docs query"
        search.requests.clear()
        yield llm, env, top[0].source_id


@pytest.fixture(scope="module")
def host(
    fakes: tuple[FakeOpenAI, dict[str, str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevHostProcess]:
    llm, search_env, _ = fakes
    data = tmp_path_factory.mktemp("providers-host")
    env = {
        "LLM_PROVIDER": "azure_openai",
        "AZURE_OPENAI_ENDPOINT": llm.endpoint,
        "AZURE_OPENAI_API_KEY": AOAI_KEY,
        "AZURE_OPENAI_CHAT_DEPLOYMENT": DEPLOYMENT,
        "MODEL_PRICES": json.dumps(PRICES),
        **search_env,
        "SQL_PROVIDER": "sqlite",
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
        "PARTIAL_OUTPUT_STORE": "local",
        "PARTIAL_OUTPUT_PATH": str(data / "partial_output.sqlite3"),
    }
    proc = DevHostProcess(REPO_ROOT, data, env=env)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def cost(tokens: tuple[int, int]) -> float:
    price = PRICES[DEPLOYMENT]
    return (tokens[0] * price["input_per_million"] + tokens[1] * price["output_per_million"]) / 1_000_000


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def history(host: DevHostProcess, job_id: str) -> list[dict[str, Any]]:
    """The raw Durable history, through the host's Durable HTTP API."""
    assert host.keys is not None
    resp = host.client.get(
        f"/runtime/webhooks/durabletask/instances/{job_id}",
        params={"showHistory": "true", "showHistoryOutput": "true", "code": host.keys.system},
    )
    assert resp.status_code == 200, resp.text
    return list(resp.json()["historyEvents"])


def test_mixed_job_over_the_fakes_with_backoff_and_a_streamed_answer(
    fakes: tuple[FakeOpenAI, dict[str, str], str], host: DevHostProcess, jobs: JobClient
) -> None:
    llm, _, doc_source = fakes
    llm.reset()
    llm.script_job(
        plan=JsonReply(plan(), usage=USAGE["plan"]),
        write_sql=JsonReply(
            {"sql": Q3_SQL, "tables": ["returns", "order_items", "orders", "regions"], "explanation": "Q3 returns."},
            usage=USAGE["write_sql"],
        ),
        # Streamed slowly enough for a poller to watch the answer grow.
        write_answer=JsonReply(answer(doc_source), usage=USAGE["write_answer"], chunks=30, chunk_delay_s=0.12),
    )
    llm.script(rate_limited(retry_after_ms=RETRY_AFTER_MS), task="write_answer")

    job_id = jobs.submit(MIXED_Q)
    seen: list[dict[str, Any]] = []
    live_lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.03)
        view = jobs.view(job_id)
        if view["status"] in ("completed", "failed", "cancelled", "waiting_for_user"):
            break
        for step in view["steps"]:
            if "partial_output" in step:
                seen.append(step["partial_output"])
                assert step["kind"] == "generate_response" and step["state"] == "running"
        live_lines += [line["message"] for line in view["log"]["live"]]
    else:
        raise AssertionError(f"job {job_id} did not end: {view}")
    assert view["status"] == "completed", view.get("error") or view.get("waiting")
    assert llm.failures == []

    # The plan's steps ran over the providers.
    steps = {s["id"]: s for s in view["steps"]}
    assert [s["kind"] for s in view["steps"]] == ["execute_azure_sql", "consult_rag", "generate_response"]
    sql = steps["sales"]["output"]
    assert sql["sql"].lower().startswith("select") and "limit" in sql["sql"].lower()
    with sqlite3.connect(DATA_DIR / "sample.db") as conn:
        expected = [list(r) for r in conn.execute(Q3_SQL)]
    assert sql["rows"] == expected and len(expected) == 4
    chunks = steps["policy"]["output"]["chunks"]
    assert chunks and chunks[0]["source_id"] == doc_source
    final = view["answer"]
    assert final["text"] == answer(doc_source)["answer"]
    assert {c["source_id"] for c in final["citations"]} == {"sql:sales", doc_source}

    # Usage is the fake's, priced from MODEL_PRICES; model_used is the deployment, not the model Azure reports.
    assert view["usage"]["planning"]["tokens_input"] == USAGE["plan"][0]
    assert view["usage"]["planning"]["estimated_cost"] == pytest.approx(cost(USAGE["plan"]))
    by_step = view["usage"]["by_step"]
    assert (by_step["sales"]["tokens_input"], by_step["sales"]["tokens_output"]) == USAGE["write_sql"]
    assert by_step["policy"]["total_tokens"] == 0
    assert (by_step["answer"]["tokens_input"], by_step["answer"]["tokens_output"]) == USAGE["write_answer"]
    assert by_step["answer"]["estimated_cost"] == pytest.approx(cost(USAGE["write_answer"]))
    total = view["usage"]["total"]
    assert total["total_tokens"] == sum(a + b for a, b in USAGE.values())
    assert total["estimated_cost"] == pytest.approx(sum(cost(u) for u in USAGE.values()))
    assert steps["sales"]["model"] == steps["answer"]["model"] == DEPLOYMENT
    requests = llm.requests_for("write_answer")
    assert len(requests) == 2 and all(r.body["model"] == DEPLOYMENT and r.stream for r in requests)
    assert all(r.headers.get("api-key") == AOAI_KEY or AOAI_KEY in r.headers.get("authorization", "") for r in requests)
    assert requests[0].path.startswith("/openai/v1/")

    # The 429 is a visible backoff: a failed attempt, a durable timer of at least retry-after, then success.
    assert steps["answer"]["attempts"] == 2 and steps["answer"]["state"] == "succeeded"
    messages = [e["message"] for e in view["log"]["entries"]]
    failed_at = next(
        i for i, m in enumerate(messages) if "answer generate_response (attempt 1): failed RATE_LIMITED" in m
    )
    assert any("timer fired" in m for m in messages[failed_at:])
    assert any(m.startswith("answer generate_response (attempt 2): success") for m in messages[failed_at:])
    events = history(host, job_id)
    timers = [e for e in events if e["EventType"] == "TimerCreated"]
    assert len(timers) == 1
    [failure] = [
        e for e in events if e["EventType"] == "TaskCompleted" and (e.get("Result") or {}).get("status") == "failed"
    ]
    assert failure["Result"]["error"] == {
        "code": "RATE_LIMITED",
        "message": failure["Result"]["error"]["message"],
        "retry_after_ms": RETRY_AFTER_MS,
        "final": False,  # a rate limit is worth a retry (a tool declared non-retryable fails for good)
    }
    [timer] = [e for e in events if e["EventType"] == "TimerCreated"]
    # The timer was armed after the failure was recorded and fires at least retry-after later.
    assert _ts(timer["FireAt"]) - _ts(failure["Timestamp"]) >= timedelta(milliseconds=RETRY_AFTER_MS)
    assert [e["EventType"] for e in events].count("TimerFired") == 1

    # The answer grew in the view while it streamed: prefixes of the final text, of the second attempt.
    texts = [p["text"] for p in seen]
    distinct = len(set(texts))
    print(f"streaming: {len(seen)} polls saw partial output, {distinct} distinct, final {len(final['text'])} chars")
    assert len(set(texts)) >= 2, f"saw {len(seen)} partial outputs"
    assert all(final["text"].startswith(t) for t in texts)
    assert all(p["attempt"] == 2 and p["chars"] == len(p["text"]) for p in seen)
    lengths = [len(t) for t in texts]
    assert lengths == sorted(lengths) and lengths[0] < len(final["text"])
    assert any(re.fullmatch(r"answer generate_response: streaming, \d+ chars so far", m) for m in live_lines)
    # Done: the history's answer replaced the preview, and the log cursor never saw a live line.
    assert all("partial_output" not in s for s in view["steps"]) and view["log"]["live"] == []
    assert all("seq" in e for e in view["log"]["entries"])


def test_openai_compatible_base_url_flavour(fakes: tuple[FakeOpenAI, dict[str, str], str], tmp_path: Path) -> None:
    """An Ollama-style server: OPENAI_BASE_URL + a model name, no key; model_used is what it reports."""
    llm, search_env, doc_source = fakes
    llm.reset()
    llm.script_job(
        plan=JsonReply(
            {
                "steps": [
                    {"id": "policy", "kind": "consult_rag", "title": "Policy", "input": {"query": DOCS_QUERY}},
                    {
                        "id": "answer",
                        "kind": "generate_response",
                        "title": "Answer",
                        "input": {"question": "What about refunds after 30 days?"},
                        "depends_on": ["policy"],
                    },
                ],
                "rationale": "The refund rules are in the policy documents.",
            },
            usage=(500, 40),
        ),
        write_answer=JsonReply(answer(doc_source), usage=(700, 90)),
    )
    saved_key, llm.api_key = llm.api_key, None
    env = {
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_MODEL": "llama3.1:8b",
        "MODEL_PRICES": json.dumps({"llama3.1:8b": {"input_per_million": 0, "output_per_million": 0}}),
        **search_env,
        "PARTIAL_OUTPUT_PATH": str(tmp_path / "partial.sqlite3"),
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path / "host", env=env)
    try:
        proc.start()
        view = JobClient(proc).wait(JobClient(proc).submit("What about refunds after 30 days?"))
    finally:
        proc.stop()
        llm.api_key = saved_key
    assert view["status"] == "completed", view.get("error")
    assert llm.failures == []
    # The fake reports UNDERLYING_MODEL; on an OpenAI-compatible endpoint that is the model that answered.
    assert {s["model"] for s in view["steps"] if s["kind"] == "generate_response"} == {UNDERLYING_MODEL}
    assert view["usage"]["total"]["total_tokens"] == 500 + 40 + 700 + 90
    assert all(r.path.startswith("/v1/") and r.body["model"] == "llama3.1:8b" for r in llm.requests)
