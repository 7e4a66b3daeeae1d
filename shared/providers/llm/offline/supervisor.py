"""The offline Supervisor: real, explainable decisions from a step's outcome, without a model.

Rules, first match wins (the orchestrator bounds how often each may apply):
- a step skipped after a transient failure that no one chose to skip: ``retry``;
- a SQL step skipped because no statement could be written or run for it, while the documents
  hold something on its question: ``choose_tool`` consult_rag;
- a document search that found nothing, on a question the data covers: ``choose_tool`` execute_azure_sql;
- the plan leaves a part of the question without a step that looks it up: ``replan``;
- a query that returned no rows, or a search that found nothing: ``ask_user``;
- otherwise ``continue``, saying what the step found.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode
from shared.jobs.plan import SupervisorDecision

SQL_KIND = "execute_azure_sql"
SEARCH_KIND = "consult_rag"
# Why a SQL step can fail for good on its question: the writer could not write it, or the guard refused it.
_UNANSWERABLE_SQL = {ErrorCode.BAD_REQUEST, ErrorCode.SQL_REJECTED, ErrorCode.SQL_ERROR, ErrorCode.INVALID_INPUT}
TOPICS = ["revenue", "returns", "orders", "policies"]


def _text(step: dict[str, Any]) -> str:
    data = step.get("input") or {}
    return str(data.get("question") or data.get("query") or "")[:300]


def _lookup_kinds(plan: list[dict[str, Any]]) -> set[str]:
    return {s.get("kind", "") for s in plan} & {SQL_KIND, SEARCH_KIND}


def supervise_offline(
    inputs: dict[str, Any],
    *,
    split: Callable[[str], list[str]],
    covers_data: Callable[[str], bool],
    docs_have: Callable[[str], bool],
) -> SupervisorDecision:
    """Decide after one step from its outcome; every decision says why."""
    question = str(inputs.get("question") or "")
    step = inputs.get("step") or {}
    output = inputs.get("output") or {}
    plan = list(inputs.get("plan") or [])
    kind, text = step.get("kind", ""), _text(step)
    if output.get("skipped"):
        return _after_skip(kind, text, output, docs_have)
    if isinstance(output.get("truncated"), str):
        # The orchestrator cut a large output to a prefix: there is something, and too much to inspect here.
        return SupervisorDecision(action="continue", reason="the step returned a large output")
    if kind == SEARCH_KIND and not output.get("chunks") and covers_data(text):
        return SupervisorDecision(
            action="choose_tool",
            executor_type=SQL_KIND,
            reason=f"the documents have nothing on '{text}', but the data covers it: query the data instead",
        )
    missing = _uncovered_part(question, plan, split, covers_data, docs_have)
    if missing is not None:
        return SupervisorDecision(
            action="replan", reason=f"the plan has no step that looks up '{missing}': plan the rest again"
        )
    return _on_result(kind, text, output)


def _after_skip(kind: str, text: str, output: dict[str, Any], docs_have: Callable[[str], bool]) -> SupervisorDecision:
    code = output.get("error_code")
    if code in RETRYABLE_CODES and not output.get("skipped_by_user"):
        return SupervisorDecision(
            action="retry",
            reason=f"the step was skipped after a transient failure ({code}); another attempt can fix it",
        )
    if kind == SQL_KIND and code in _UNANSWERABLE_SQL and text and docs_have(text):
        return SupervisorDecision(
            action="choose_tool",
            executor_type=SEARCH_KIND,
            reason=f"no query could answer '{text}' ({code}), but the documents have something on it",
        )
    return SupervisorDecision(action="continue", reason=f"the step was skipped: {output.get('reason') or 'no reason'}")


def _on_result(kind: str, text: str, output: dict[str, Any]) -> SupervisorDecision:
    if kind == SQL_KIND and "rows" in output and _no_data(output.get("rows")):
        return SupervisorDecision(
            action="ask_user",
            reason=f"the query for '{text}' found no data",
            question=f"The query for '{text}' found no data. What should I look for instead?"[:1000],
            options=["continue without it", *TOPICS],
        )
    if kind == SEARCH_KIND and not output.get("chunks"):
        return SupervisorDecision(
            action="ask_user",
            reason=f"the documents have nothing on '{text}' and the data does not cover it",
            question=f"I found nothing in the documents about '{text}'. Which topic do you mean?"[:1000],
            options=TOPICS,
        )
    if kind == SQL_KIND:
        rows = output.get("row_count", len(output.get("rows") or []))
        partial = " (a partial result, labelled as such)" if output.get("truncated") else ""
        return SupervisorDecision(action="continue", reason=f"the query returned {rows} row(s){partial}")
    if kind == SEARCH_KIND:
        return SupervisorDecision(action="continue", reason=f"the search found {len(output['chunks'])} passage(s)")
    return SupervisorDecision(action="continue", reason="the step's output is usable")


def _no_data(rows: Any) -> bool:
    """No rows, or only rows of NULLs (an aggregate over nothing: SUM of no rows is one NULL row)."""
    return not rows or all(isinstance(r, list) and all(v is None for v in r) for r in rows)


def _uncovered_part(
    question: str,
    plan: list[dict[str, Any]],
    split: Callable[[str], list[str]],
    covers_data: Callable[[str], bool],
    docs_have: Callable[[str], bool],
) -> str | None:
    """A part of the question that the data or the documents could answer but no lookup step of the plan names."""
    looked_up = " ".join(_text(s).lower() for s in plan if s.get("kind") in _lookup_kinds(plan))
    for part in split(question):
        words = [w for w in part.lower().split() if len(w) > 3]
        if words and not any(w in looked_up for w in words) and (covers_data(part) or docs_have(part)):
            return part[:200]
    return None
