"""The embedded offline LLM: deterministic, no network.

It plans from the question, the semantic catalog and the document index; writes SQL through the
catalog grammar in ``shared.sql_offline``; and writes extractive answers with citations through
``shared.answer_offline``. Token counts are estimated from the text so budgets behave as with a
real model; the cost is zero.
"""

from __future__ import annotations

import json
import re
import threading
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from shared.contracts import AnswerResult, Chunk, ErrorCode, ProviderError, SqlResult
from shared.plan import Plan, PlanStep, SqlDraft, SupervisorDecision
from shared.providers import LLMRequest, LLMResponse, LLMTask

if TYPE_CHECKING:
    from shared.clients import Clients

T = TypeVar("T", bound=BaseModel)

OFFLINE_MODEL = "offline"
# Words that point at the documents (policies, FAQ) rather than at the numbers.
_DOC_HINTS = re.compile(
    r"\b(polic(y|ies)|faq|say|says|said|rule|rules|allowed|can i|how do|how does|how long|warranty|"
    r"shipping|privacy|refunds? after|restocking|guarantee|terms|procedure|process|eligible|document)\b",
    re.IGNORECASE,
)
# Clause boundaries in compound questions: "X, and what does Y?" / "X; Y" / "X? Y".
_SPLIT = re.compile(r"\?\s+|;\s+|,?\s+and\s+(?=(?:what|which|how|who|when|where|is|are|does|do|can)\b)", re.I)


def split_question(question: str) -> list[str]:
    """Split a compound question into its parts (a simple question stays whole)."""
    parts = [p.strip(" ,.?") for p in _SPLIT.split(question)]
    parts = [p for p in parts if len(p.split()) >= 3]
    return parts or [question.strip()]


def _parse_faults(spec: str) -> dict[str, tuple[ErrorCode, int]]:
    faults: dict[str, tuple[ErrorCode, int]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        task, code, count = item.split(":")
        faults[task] = (ErrorCode(code), int(count))
    return faults


class OfflineLLM:
    """A deterministic stand-in for an LLM, with the same interface."""

    name = "offline"
    default_model = OFFLINE_MODEL

    def __init__(self, clients: Clients) -> None:
        self._clients = clients
        self._faults = _parse_faults(clients.settings.offline_llm_faults)
        self._lock = threading.Lock()

    def generate(self, request: LLMRequest[T]) -> LLMResponse[T]:
        """Answer one request deterministically."""
        self._maybe_fail(request.task)
        if request.task is LLMTask.PLAN:
            output: BaseModel = self._plan(str(request.inputs["question"]))
        elif request.task is LLMTask.WRITE_SQL:
            output = self._write_sql(str(request.inputs["question"]), str(request.inputs.get("dialect", "sqlite")))
        elif request.task is LLMTask.WRITE_ANSWER:
            output = self._write_answer(request)
        else:
            output = SupervisorDecision(action="continue", reason="offline supervisor always continues")
        if not isinstance(output, request.output_type):
            output = request.output_type.model_validate(output.model_dump())
        from shared.answer_offline import estimate_tokens

        tokens_in = estimate_tokens(json.dumps(request.inputs, default=str))
        tokens_out = min(estimate_tokens(output.model_dump_json()), request.max_tokens)
        return LLMResponse(
            output=output,
            tokens_input=tokens_in,
            tokens_output=tokens_out,
            model_used=request.model or OFFLINE_MODEL,
        )

    def _maybe_fail(self, task: LLMTask) -> None:
        with self._lock:
            fault = self._faults.get(task.value)
            if fault is None or fault[1] <= 0:
                return
            self._faults[task.value] = (fault[0], fault[1] - 1)
        raise ProviderError(
            fault[0],
            f"injected offline fault for {task.value} (OFFLINE_LLM_FAULTS)",
            retry_after_ms=200 if fault[0] is ErrorCode.RATE_LIMITED else None,
        )

    def _plan(self, question: str) -> Plan:
        from shared.sql_offline import catalog_covers

        catalog = self._clients.catalog
        steps: list[PlanStep] = []
        for part in split_question(question):
            wants_docs = bool(_DOC_HINTS.search(part))
            if not wants_docs and catalog_covers(part, catalog):
                steps.append(
                    PlanStep(
                        id=f"s{len(steps) + 1}",
                        kind="execute_azure_sql",
                        title=f"Query the data: {part}"[:200],
                        input={"question": part},
                    )
                )
            elif wants_docs or self._clients.retriever.search(part, top_k=1):
                steps.append(
                    PlanStep(
                        id=f"s{len(steps) + 1}",
                        kind="consult_rag",
                        title=f"Search the documents: {part}"[:200],
                        input={"query": part},
                    )
                )
        if not steps:
            ask = PlanStep(
                id="s1",
                kind="ask_user",
                title="Clarify the question",
                input={
                    "question": "I could not match the question to the data or the documents. Which topic do you mean?",
                    "options": ["revenue", "returns", "orders", "policies"],
                },
            )
            steps = [
                ask,
                PlanStep(
                    id="s2",
                    kind="consult_rag",
                    title="Search the documents",
                    input={"query": question},
                    depends_on=["s1"],
                ),
            ]
        ids = [s.id for s in steps]
        steps.append(
            PlanStep(
                id=f"s{len(steps) + 1}",
                kind="generate_response",
                title="Write the answer",
                input={"question": question},
                depends_on=ids,
            )
        )
        return Plan(steps=steps, rationale="offline planner: catalog match for data, document hints for policies")

    def _write_sql(self, question: str, dialect: str) -> SqlDraft:
        from shared.sql_offline import write_sql_offline

        draft = write_sql_offline(question, self._clients.catalog, dialect)
        if draft is None:
            raise ProviderError(
                ErrorCode.BAD_REQUEST,
                "the offline SQL writer cannot express this question with the catalog; "
                "edit the step to give the SQL, or configure an LLM",
            )
        return draft

    def _write_answer(self, request: LLMRequest[Any]) -> AnswerResult:
        from shared.answer_offline import compose_answer_offline

        chunks: list[Chunk] = []
        sql_results: list[SqlResult] = []
        for source in request.inputs.get("sources", []):
            if source.get("kind") == "sql":
                sql_results.append(
                    SqlResult(
                        sql=source.get("sql") or "",
                        dialect="",
                        columns=source.get("columns", []),
                        rows=source.get("rows", []),
                        row_count=len(source.get("rows", [])),
                        source_id=source["source_id"],
                        question=source.get("title"),
                    )
                )
            else:
                chunks.append(
                    Chunk(
                        source_id=source["source_id"],
                        title=source.get("title") or "",
                        content=source.get("content", ""),
                    )
                )
        answer = compose_answer_offline(str(request.inputs["question"]), chunks, sql_results)
        if request.on_delta is not None:
            for piece in re.findall(r"\S+\s*", answer.answer):
                request.on_delta(piece)
        return answer
