"""An answer with no support says so (issue 26): a copied placeholder is never an answer, and the job says so."""

from __future__ import annotations

from typing import Any

import pytest

from shared.executors.generate_response import is_placeholder
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.jobs.test_policy_inline import PLAN, RAG_OK, Script, ok, run
from tests.providers.llm.test_executors_over_fake import _payload, clients  # noqa: F401 (fixture)

SOURCES = [{"source_id": "policy#1", "kind": "document", "title": "Policy", "content": "Refunds within 30 days."}]


@pytest.mark.parametrize(
    ("text", "placeholder"),
    [("<the answer>", True), ("  <answer>\n", True), ("Refunds take <30 days>.", False), ("a < b > c", False)],
)
def test_what_counts_as_a_placeholder(text: str, placeholder: bool) -> None:
    assert is_placeholder(text) is placeholder


def test_a_copied_placeholder_is_replaced_by_saying_there_is_no_answer(
    fake_openai: FakeOpenAI,
    clients: Clients,  # noqa: F811
) -> None:
    fake_openai.always(JsonReply({"answer": "<the answer>", "citations": []}), task="write_answer")
    out = run_executor(_payload("generate_response", {"question": "Refunds?"}, sources=SOURCES), clients=clients)
    assert out["status"] == "partial", out
    result = out["result"]
    assert "<the answer>" not in result["answer"].replace("'<the answer>'", "")  # only quoted, never as the answer
    assert result["answer"].startswith("No answer could be written") and result["citations"] == []
    assert "placeholder" in result["unsupported"]


def test_an_answer_whose_citations_all_point_nowhere_is_unsupported(
    fake_openai: FakeOpenAI,
    clients: Clients,  # noqa: F811
) -> None:
    reply = {"answer": "Refunds take 90 days [made#up].", "citations": [{"source_id": "made#up", "kind": "document"}]}
    fake_openai.always(JsonReply(reply), task="write_answer")
    out = run_executor(_payload("generate_response", {"question": "Refunds?"}, sources=SOURCES), clients=clients)
    assert out["status"] == "partial" and out["result"]["answer"] == reply["answer"]
    assert "none of its 1 citations" in out["result"]["unsupported"]


def _answer(result: dict[str, Any], status: str) -> dict[str, Any]:
    out = ok(result)
    out["status"] = status
    return out


def test_a_job_whose_answer_has_no_support_says_so_in_its_result_and_step() -> None:
    unsupported = {"answer": "No answer could be written: x.", "citations": [], "unsupported": "the model wrote x"}
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[_answer(unsupported, "partial")])
    result, ctx = run(script)
    assert result["status"] == "completed" and result["unsupported"] == "the model wrote x"
    answer_step = ctx.custom_status["steps"][-1]
    assert answer_step["note"] == "the answer has no support: the model wrote x"


def test_a_supported_answer_has_no_such_note() -> None:
    supported = {"answer": "Refunds within 30 days.", "citations": [{"source_id": "policy#1", "kind": "document"}]}
    script = Script(plan=[ok(PLAN)], consult_rag=[ok(RAG_OK)], generate_response=[ok(supported)])
    result, ctx = run(script)
    assert result["unsupported"] is None and "note" not in ctx.custom_status["steps"][-1]


def test_the_job_view_shows_why_an_answer_has_no_support() -> None:
    from tests.jobs.answers_flow.test_view_states import view

    output = {"status": "completed", "answer": "No answer could be written: x.", "unsupported": "the model wrote x"}
    shown = view({"status": "completed"}, runtime="Completed", output=output)
    assert shown["answer"]["unsupported"] == "the model wrote x"
    plain = view({"status": "completed"}, runtime="Completed", output={"status": "completed", "answer": "ok"})
    assert "unsupported" not in plain["answer"]


def test_with_no_source_the_answer_is_not_found_without_a_model_call(
    fake_openai: FakeOpenAI,
    clients: Clients,  # noqa: F811
) -> None:
    notes = ["The step 'Sales' did not run: the user rejected its SQL query."]
    out = run_executor(
        _payload("generate_response", {"question": "Refunds?"}, sources=[], step_notes=notes), clients=clients
    )
    assert out["status"] == "success" and fake_openai.requests_for("write_answer") == []
    assert out["result"]["answer"].startswith("I could not find anything") and notes[0] in out["result"]["answer"]
    assert out["result"]["citations"] == [] and out["usage"]["total_tokens"] == 0
