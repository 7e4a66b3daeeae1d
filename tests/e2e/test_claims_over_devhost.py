"""Checked claims over HTTP on devhost: a model's claims (the fake OpenAI server) and the offline writer's.

The model's answer carries one claim per checker rule: a right figure, a wrong figure, a derived percentage,
a quote cited to its passage, the same quote cited to another passage (misattributed), and a claim without
evidence. The job view must carry each with the checker's verdict, and the CLI must flag the unsupported
ones. The offline writer's claims on the embedded defaults must all verify.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from devhost.jobs.render import render_result
from shared.providers.search.local import get_default_index
from shared.providers.sql.sampledata import ensure_sample_db
from shared.runtime.settings import Settings
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.jobs.jobclient import JobClient

QUESTION = "Which region had the most returns in Q3, and what does the returns policy say about refunds?"
DOCS_QUERY = "returns policy refunds"
TOP_K = 4
KEY = "fake-aoai-key-claims"
Q3_SQL = (
    "SELECT g.name AS region, COUNT(*) AS return_count FROM returns r "
    "JOIN order_items oi ON oi.order_item_id = r.order_item_id "
    "JOIN orders o ON o.order_id = oi.order_id JOIN regions g ON g.region_id = o.region_id "
    "WHERE r.return_date >= '2025-07-01' AND r.return_date < '2025-10-01' "
    "GROUP BY g.name ORDER BY return_count DESC"
)


def plan() -> dict[str, Any]:
    step: dict[str, Any] = {"depends_on": []}
    return {
        "steps": [
            {"id": "sales", "kind": "execute_azure_sql", "title": "Returns by region in Q3", **step}
            | {"input": {"question": "Which region had the most returns in Q3?"}},
            {"id": "policy", "kind": "consult_rag", "title": "Refunds", **step}
            | {"input": {"query": DOCS_QUERY, "top_k": TOP_K}},
            {"id": "answer", "kind": "generate_response", "title": "Answer", "depends_on": ["sales", "policy"]}
            | {"input": {"question": QUESTION}},
        ],
        "rationale": "Needs the returns data and the policy.",
    }


def sentence_of(content: str) -> tuple[str, int]:
    """A full sentence of a passage (at least a few words) and where it starts."""
    for line in content.splitlines():
        text = line.strip().removeprefix("- ").strip()
        end = text.find(". ")
        sentence = text if end < 0 else text[: end + 1]
        if len(sentence.split()) >= 6 and not sentence.startswith("#"):
            return sentence, content.index(sentence)
    raise AssertionError(f"no sentence in {content!r}")


def cell(row: int, column: str, role: str = "operand") -> dict[str, Any]:
    return {"source_id": "sql:sales", "row": row, "column": column, "role": role, "start": None, "end": None}


def span(source_id: str, start: int | None = None, end: int | None = None) -> dict[str, Any]:
    return {"source_id": source_id, "row": None, "column": None, "role": "operand", "start": start, "end": end}


def claims_answer(rows: list[list[Any]], chunks: list[Any]) -> dict[str, Any]:
    """An answer with one claim per checker rule, built from the rows and passages the job will see."""
    (top, n_top), (second, n_second) = rows[0], rows[1]
    share = f"{n_top / n_second * 100:.1f}%"
    first, other = chunks[0], next(c for c in chunks[1:] if c.source_id != chunks[0].source_id)
    quote, at = sentence_of(first.content)
    assert quote not in other.content
    claims = [
        {"text": f"{top} had the most returns in Q3 ({n_top}).", "figure": str(n_top), "operation": "value"}
        | {"evidence": [cell(0, "return_count"), cell(0, "region", "label")]},
        {"text": f"{second} had {n_second + 7} returns.", "figure": str(n_second + 7), "operation": "value"}
        | {"evidence": [cell(1, "return_count"), cell(1, "region", "label")]},
        {"text": f"{top} had {share} of {second}'s returns.", "figure": share, "operation": "ratio"}
        | {"evidence": [cell(0, "return_count"), cell(1, "return_count")]},
        {"text": quote, "figure": None, "operation": "value", "evidence": [span(first.source_id, at, at + len(quote))]},
        {"text": quote, "figure": None, "operation": "value", "evidence": [span(other.source_id)]},
        {"text": "Returns rose every quarter this year.", "figure": None, "operation": "value", "evidence": []},
    ]
    return {
        "answer": f"{top} had the most returns ({n_top}) [sql:sales]. {quote} [{first.source_id}]",
        "citations": [
            {"source_id": "sql:sales", "kind": "sql", "title": "Returns by region", "quote": None},
            {"source_id": first.source_id, "kind": "document", "title": first.title, "quote": quote},
        ],
        "claims": claims,
    }


def q3_rows() -> list[list[Any]]:
    """The rows the job's SQL step will return, from the same embedded database."""
    with sqlite3.connect(ensure_sample_db()) as conn:
        return [list(r) for r in conn.execute(Q3_SQL)]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=KEY) as llm:
        yield llm


@pytest.fixture(scope="module")
def jobs(fake: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobClient]:
    data = tmp_path_factory.mktemp("claims-host")
    env = {
        "LLM_PROVIDER": "azure_openai",
        "AZURE_OPENAI_ENDPOINT": fake.endpoint,
        "AZURE_OPENAI_API_KEY": KEY,
        "AZURE_OPENAI_CHAT_DEPLOYMENT": "claims-chat",
        "SQL_PROVIDER": "sqlite",
        "PARTIAL_OUTPUT_STORE": "local",
        "PARTIAL_OUTPUT_PATH": str(data / "partial_output.sqlite3"),
    }
    proc = DevHostProcess(REPO_ROOT, data, env=env)
    proc.start(timeout_s=180)
    yield JobClient(proc)
    proc.stop()


def test_each_checker_rule_over_http_and_the_cli_flags_the_unsupported(fake: FakeOpenAI, jobs: JobClient) -> None:
    rows = q3_rows()
    settings = Settings()
    chunks = get_default_index(settings.local_index_path, settings.documents_dir).search(DOCS_QUERY, top_k=TOP_K)
    reply = claims_answer(rows, chunks)
    fake.reset()
    fake.script_job(
        plan=plan(),
        write_sql={"sql": Q3_SQL, "tables": ["returns", "order_items", "orders", "regions"], "explanation": "Q3"},
        write_answer=JsonReply(reply),
    )
    view = jobs.wait(jobs.submit(QUESTION), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    steps = {s["id"]: s for s in view["steps"]}
    assert steps["sales"]["output"]["rows"] == rows
    assert [c["source_id"] for c in steps["policy"]["output"]["chunks"]] == [c.source_id for c in chunks]
    # The model was asked for claims (the answer's schema has them) and for their evidence.
    [request] = fake.requests_for("write_answer")
    assert "claims" in json.dumps(request.schema or request.prompt_schema or {}) and "Claims." in request.system_text

    answer = view["answer"]
    checks = [(c["check"]["status"], c["check"]["reason"]) for c in answer["claims"]]
    statuses = [s for s, _ in checks]
    assert statuses == ["verified", "unsupported", "verified", "verified", "unsupported", "unsupported"], checks
    assert str(rows[1][1]) in checks[1][1]  # the wrong figure's reason names the right one
    assert "ratio" in checks[2][1]
    assert checks[5][1] == "no evidence is cited for this claim"
    assert answer["claims_summary"]["text"] == "verified 3 of 6; 3 unsupported"
    # The checker's verdict is the app's: a writer cannot send its own.
    assert all(set(c["check"]) == {"status", "reason"} for c in answer["claims"])

    console = Console(record=True, width=200)
    console.print(render_result(view))
    printed = console.export_text()
    assert "claims: verified 3 of 6; 3 unsupported" in printed and printed.count("UNSUPPORTED") == 3
    assert "no evidence" in printed


def test_a_writers_own_verdict_is_replaced_by_the_checkers(fake: FakeOpenAI, jobs: JobClient) -> None:
    rows = q3_rows()
    settings = Settings()
    chunks = get_default_index(settings.local_index_path, settings.documents_dir).search(DOCS_QUERY, top_k=TOP_K)
    reply = claims_answer(rows, chunks)
    wrong = reply["claims"][1] | {"check": {"status": "verified", "reason": "trust me"}}
    fake.reset()
    fake.script_job(
        plan=plan(),
        write_sql={"sql": Q3_SQL, "tables": ["returns", "order_items", "orders", "regions"], "explanation": "Q3"},
        write_answer=JsonReply(reply | {"claims": [wrong]}, check_schema=False),
    )
    view = jobs.wait(jobs.submit(QUESTION), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    [claim] = view["answer"]["claims"]
    assert claim["check"]["status"] == "unsupported" and "trust me" not in claim["check"]["reason"]


def test_an_answer_without_claims_says_that_nothing_in_it_is_checked(fake: FakeOpenAI, jobs: JobClient) -> None:
    """A model that writes prose (a figure, a citation) and no claims: nothing is shown as checked."""
    rows = q3_rows()
    reply = {
        "answer": f"{rows[0][0]} had the most returns in Q3 ({rows[0][1]}) [sql:sales].",
        "citations": [{"source_id": "sql:sales", "kind": "sql", "title": "Returns", "quote": None}],
        "claims": [],
    }
    fake.reset()
    fake.script_job(
        plan=plan(),
        write_sql={"sql": Q3_SQL, "tables": ["returns", "order_items", "orders", "regions"], "explanation": "Q3"},
        write_answer=JsonReply(reply, check_schema=False),
    )
    view = jobs.wait(jobs.submit(QUESTION), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    answer = view["answer"]
    assert answer["claims"] == []
    assert answer["claims_summary"]["total"] == 0 and answer["claims_summary"]["verified"] == 0
    assert answer["claims_summary"]["text"] == "no claims: nothing in this answer is checked against a source"
    console = Console(record=True, width=200)
    console.print(render_result(view))
    assert "claims: no claims: nothing in this answer is checked against a source" in console.export_text()
