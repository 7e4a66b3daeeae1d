"""consult_rag through the executor runner and the client factory, against the fake service seeded
with the sample corpus by the real ingestion sink: the Azure path is the same job step, unchanged."""

from __future__ import annotations

import pytest

from shared.providers.clients import Clients
from shared.runtime.settings import DATA_DIR, Settings
from tests.fakes.search_server import FakeSearchServer, Fault, seed_index
from tests.providers.search.azure.conftest import toy_embed

QUESTION = "What does the returns policy say about refunds after 30 days?"


def _payload(query: str, **task: object) -> dict[str, object]:
    return {"task_id": "t1", "executor_type": "consult_rag", "task": {"query": query, **task}}


@pytest.fixture
def clients(search_server: FakeSearchServer, monkeypatch: pytest.MonkeyPatch) -> Clients:
    env = seed_index(search_server, DATA_DIR / "docs", embed=toy_embed)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Clients(Settings())


def test_consult_rag_on_azure_search(search_server: FakeSearchServer, clients: Clients) -> None:
    from shared.executors.runner import run_executor

    output = run_executor(_payload(QUESTION, top_k=3), expected_type="consult_rag", clients=clients)

    assert output["status"] == "success", output["error"]
    chunks = output["result"]["chunks"]
    assert 1 <= len(chunks) <= 3
    assert all("#" in c["source_id"] and c["path"] for c in chunks)
    assert chunks[0]["source_id"].startswith("policies/")
    body = search_server.searches()[-1].body
    assert body["queryType"] == "semantic" and body["vectorQueries"][0]["kind"] == "text"
    assert clients.document_titles()  # the planner sees the indexed titles


def test_portable_filter_and_throttling(search_server: FakeSearchServer, clients: Clients) -> None:
    from shared.executors.runner import run_executor

    filtered = run_executor(_payload("refunds", filter="doc:faq"), expected_type="consult_rag", clients=clients)
    assert filtered["status"] == "success"
    assert filtered["result"]["chunks"] and all(c["source_id"].startswith("faq/") for c in filtered["result"]["chunks"])

    search_server.add_fault(Fault(status=429, route="search", retry_after="2"))
    throttled = run_executor(_payload(QUESTION), expected_type="consult_rag", clients=clients)
    assert throttled["status"] == "failed"
    assert throttled["error"]["code"] == "RATE_LIMITED" and throttled["error"]["retry_after_ms"] == 2000
    again = run_executor(_payload(QUESTION), expected_type="consult_rag", clients=clients)
    assert again["status"] == "success"
