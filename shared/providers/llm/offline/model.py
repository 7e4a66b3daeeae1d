"""The embedded offline model: a deterministic, keyword-matching stand-in for an LLM, no network.

It is not a language model. It plans by matching the question's words against the semantic catalog
and the document index; writes SQL through the catalog grammar in ``offline.sql_writer``; and writes
extractive answers (copied sentences and plain statements about rows) with citations through
``offline.answers``. ``model_used`` is always ``offline`` (a requested model is never called), the
cost is zero, and ``max_tokens`` is not applied: token counts are estimated from the text (4
characters per token) so budgets behave roughly as with a real model.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from shared.jobs.agent import AgentTurn
from shared.jobs.contracts import AnswerResult, Chunk, ErrorCode, ProviderError, SqlResult
from shared.jobs.plan import ALREADY_DONE, Plan, PlanStep, SqlDraft, SupervisorDecision
from shared.providers.interfaces import LLMRequest, LLMResponse, LLMTask
from shared.providers.llm.offline.questions import DOC_HINTS, DONE_TEXT, FOLLOW_UP, covers, split_question

if TYPE_CHECKING:
    from shared.providers.clients import Clients

T = TypeVar("T", bound=BaseModel)

OFFLINE_MODEL = "offline"


def _parse_faults(spec: str) -> tuple[dict[str, tuple[ErrorCode, int]], dict[str, tuple[int, float]]]:
    """``task:CODE:count`` fails the next calls with that code; ``task:DELAY:count:ms`` makes them slow."""
    faults: dict[str, tuple[ErrorCode, int]] = {}
    delays: dict[str, tuple[int, float]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        task, code, count, *rest = item.split(":")
        if code == "DELAY" and len(rest) == 1:
            delays[task] = (int(count), int(rest[0]) / 1000)
        elif not rest:
            faults[task] = (ErrorCode(code), int(count))
        else:
            raise ValueError(f"OFFLINE_LLM_FAULTS: {item!r} is neither task:CODE:count nor task:DELAY:count:ms")
    return faults, delays


class OfflineLLM:
    """A deterministic stand-in for an LLM, with the same interface."""

    name = "offline"
    default_model = OFFLINE_MODEL

    def __init__(self, clients: Clients) -> None:
        self._clients = clients
        self._faults, self._delays = _parse_faults(clients.settings.offline_llm_faults)
        self._lock = threading.Lock()

    def generate(self, request: LLMRequest[T]) -> LLMResponse[T]:
        """Answer one request deterministically."""
        self._maybe_fail(request.task)
        if request.task is LLMTask.PLAN:
            kinds = request.inputs.get("step_kinds")
            output: BaseModel = self._plan(
                str(request.inputs["question"]), set(kinds) if isinstance(kinds, dict) else set()
            )
        elif request.task is LLMTask.WRITE_SQL:
            output = self._write_sql(str(request.inputs["question"]), str(request.inputs.get("dialect", "sqlite")))
        elif request.task is LLMTask.WRITE_ANSWER:
            output = self._write_answer(request)
        elif request.task is LLMTask.AGENT_TURN:
            output = self._agent_turn(request.inputs)
        elif request.task is LLMTask.SUPERVISE:
            output = self._supervise(request.inputs)
        else:
            # Thin decisions take their deterministic rules when no model is configured (decisions.py).
            raise ProviderError(ErrorCode.BAD_REQUEST, f"the offline model does not answer {request.task.value}")
        if not isinstance(output, request.output_type):
            output = request.output_type.model_validate(output.model_dump())
        from shared.jobs.tokens import estimate_tokens

        tokens_in = estimate_tokens(json.dumps(request.inputs, default=str))
        # max_tokens is not applied (the output is never cut), so the count is not clamped to it either.
        tokens_out = estimate_tokens(output.model_dump_json())
        # The model that answered is this stand-in, whatever model was requested (and it costs nothing).
        return LLMResponse(output=output, tokens_input=tokens_in, tokens_output=tokens_out, model_used=OFFLINE_MODEL)

    def _maybe_fail(self, task: LLMTask) -> None:
        with self._lock:
            delay = self._delays.get(task.value)
            if delay is not None and delay[0] > 0:
                self._delays[task.value] = (delay[0] - 1, delay[1])
        if delay is not None and delay[0] > 0:
            # A slow model call holds its activity open (tests kill the host during it).
            time.sleep(delay[1])
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

    def _plan(self, text: str, kinds: set[str] | None = None) -> Plan:
        # A replan carries what already ran after the question; those parts are not planned again.
        question, _, note = text.partition(f"\n\n{ALREADY_DONE}")
        done = {json.loads(m) for m in DONE_TEXT.findall(note)}
        steps: list[PlanStep] = []
        parts = split_question(question)
        for i, part in enumerate(parts):
            if any(covers(text, part) for text in done):
                continue
            kind, text = self._route(parts, i)
            if kind is not None:
                label = "Query the data" if kind == "execute_azure_sql" else "Search the documents"
                field = "question" if kind == "execute_azure_sql" else "query"
                steps.append(
                    PlanStep(
                        id=f"s{len(steps) + 1}",
                        kind=kind,
                        title=f"{label}: {part}"[:200],
                        input={field: text[:2000]},
                    )
                )
        if not steps and not done:
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
        steps.extend(_analysis(question, steps, kinds or set()))
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

    def _route(self, parts: list[str], i: int) -> tuple[str | None, str]:
        """Which step kind looks up part ``i`` of a question, and with what text (None: neither source has it)."""
        from shared.providers.llm.offline.sql_writer import catalog_covers

        part = parts[i]
        wants_docs = bool(DOC_HINTS.search(part))
        # A part that leans on the one before it is searched with it.
        query = f"{parts[i - 1]} {part}" if i and FOLLOW_UP.search(part) else part
        if not wants_docs and catalog_covers(part, self._clients.catalog):
            return "execute_azure_sql", part
        if wants_docs or self._clients.retriever.search(query, top_k=1):
            return "consult_rag", query
        return None, part

    def _agent_turn(self, inputs: dict[str, Any]) -> AgentTurn:
        from shared.providers.llm.offline.agent import agent_turn_offline
        from shared.providers.llm.offline.sql_writer import catalog_covers

        clients = self._clients
        return agent_turn_offline(
            inputs,
            split=split_question,
            route=self._route,
            covers_data=lambda text: catalog_covers(text, clients.catalog),
            docs_have=lambda text: bool(clients.retriever.search(text, top_k=1)),
        )

    def _supervise(self, inputs: dict[str, Any]) -> SupervisorDecision:
        from shared.providers.llm.offline.sql_writer import catalog_covers
        from shared.providers.llm.offline.supervisor import supervise_offline

        clients = self._clients
        return supervise_offline(
            inputs,
            split=split_question,
            covers_data=lambda text: catalog_covers(text, clients.catalog),
            docs_have=lambda text: bool(clients.retriever.search(text, top_k=1)),
        )

    def _write_sql(self, question: str, dialect: str) -> SqlDraft:
        from shared.providers.llm.offline.sql_writer import explain_unwritable, write_sql_offline

        draft = write_sql_offline(question, self._clients.catalog, dialect)
        if draft is None:
            # The user sees this message on the failed step: say what was understood and what was not.
            raise ProviderError(ErrorCode.BAD_REQUEST, explain_unwritable(question, self._clients.catalog, dialect))
        return draft

    def _write_answer(self, request: LLMRequest[Any]) -> AnswerResult:
        from shared.providers.llm.offline.answers import compose_answer_offline

        chunks: list[Chunk] = []
        sql_results: list[SqlResult] = []
        for source in request.inputs.get("sources", []):
            if source.get("kind") == "sql":
                rows = source.get("rows", [])
                # The SQL step's true size travels with the rows it forwards: fewer rows than row_count,
                # or truncated (the row cap was hit), means the answer sees only part of the result.
                row_count = source.get("row_count")
                sql_results.append(
                    SqlResult(
                        sql=source.get("sql") or "",
                        dialect="",
                        columns=source.get("columns", []),
                        rows=rows,
                        row_count=max(row_count if isinstance(row_count, int) else 0, len(rows)),
                        truncated=bool(source.get("truncated")),
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
        formats = {m.name: m.format for m in self._clients.catalog.metrics}
        notes = request.inputs.get("step_notes")
        step_notes = [str(n) for n in notes] if isinstance(notes, list) else []
        from shared.providers.llm.offline.agent import asked_part

        # Material a prompt hands over (a team member's output) is context, not a part of the question to answer.
        question = asked_part(str(request.inputs["question"]))
        answer = compose_answer_offline(question, chunks, sql_results, formats, step_notes)
        schema = request.inputs.get("output_schema")
        if isinstance(schema, dict):
            answer = _shaped(answer, schema, sql_results)
        if request.on_delta is not None:
            for piece in re.findall(r"\S+\s*", answer.answer):
                request.on_delta(piece)
        return answer


def _analysis(question: str, steps: list[PlanStep], kinds: set[str]) -> list[PlanStep]:
    """A run_python step over the first SQL step's rows when the question asks for a growth rate or a chart."""
    from shared.providers.llm.offline.code import ANALYSIS_CODE, wants_code

    sql = next((s for s in steps if s.kind == "execute_azure_sql"), None)
    if "run_python" not in kinds or sql is None or not wants_code(question):
        return []
    asked = str(sql.input.get("question") or question)
    return [
        PlanStep(
            id=f"s{len(steps) + 1}",
            kind="run_python",
            title=f"Compute the growth and chart it: {asked}"[:200],
            input={
                "question": f"Growth rate and chart of: {asked}"[:500],
                "code": ANALYSIS_CODE,
                "inputs": {"rows": sql.id},
            },
            depends_on=[sql.id],
        )
    ]


def _shaped(answer: AnswerResult, schema: dict[str, Any], sql_results: list[SqlResult]) -> AnswerResult:
    """The answer as a JSON object for an agent's output schema, from what was found; a clear failure if it cannot."""
    from shared.providers.llm.offline.agent import SchemaUnfillable, fill_schema
    from shared.runtime.schema_safety import SchemaLimitExceeded, UnsafeSchema, safe_validator

    columns: dict[str, Any] = {}
    for result in sql_results:  # the first row of each result, earlier results first
        if result.rows:
            for column, value in zip(result.columns, result.rows[0], strict=False):
                columns.setdefault(str(column), value)
    sources = [c.source_id for c in answer.citations]
    try:
        data = fill_schema(schema, answer.answer, sources, columns)
    except SchemaUnfillable as exc:
        raise ProviderError(ErrorCode.BAD_REQUEST, str(exc)) from None
    try:
        problem = next(iter(safe_validator(schema).errors(data)), None)
    except (UnsafeSchema, SchemaLimitExceeded) as exc:
        raise ProviderError(ErrorCode.BAD_REQUEST, f"cannot check against the output schema: {exc}") from None
    if problem is not None:
        where = ".".join(str(p) for p in problem.path) or "(root)"
        raise ProviderError(
            ErrorCode.BAD_REQUEST,
            f"the offline model's object does not fit the output schema at {where}: {problem.message}",
        )
    return AnswerResult(answer=json.dumps(data, ensure_ascii=False, default=str), citations=answer.citations)
