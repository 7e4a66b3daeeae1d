"""One step of any kind, run by the core: its typed input, its executor, and what it is given of earlier steps.

A step's input is validated against its kind's typed model here again (whoever produced it: a plan, the
Executor, a workflow node); a person's clarifications are added to it; a SQL step goes through its approval
(``approvals``), a run_python step through its policy (``code``), an agent step to the agent loop the run was
built with. The answer step gets the sources and notes of the steps it depends on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from orchestrators.outcomes import JobStop
from orchestrators.run.budgets import runs_code
from orchestrators.run.code import PythonStep, result_note
from orchestrators.run.record import Gen, StepOutput, runs_sql, writes_answer
from shared.executors import StepInputError, text_field_of, validate_step_input
from shared.jobs.agent import PYTHON_TOOL
from shared.jobs.contracts import ErrorCode, ExecutionContext
from shared.jobs.models import StepState
from shared.jobs.plan import AGENT_STEP, ASK_USER, AgentStepInput, AskUserInput, PlanStep

if TYPE_CHECKING:
    from orchestrators.run.core import RunCore

MAX_SQL_ROWS_TO_ANSWER = 20
MAX_ANSWER_SOURCES = 200  # ExecutionContext.sources

# How an agent step runs: the agent loop (orchestrators/agent.py), which the run is built with (no import ring).
AgentStep = Callable[["RunCore", str, StepState], Gen]


class Steps:
    """Runs one step of a run, whatever produced it."""

    def __init__(self, core: RunCore, agent_step: AgentStep) -> None:
        self.core = core
        self.agent_step = agent_step

    def run_step(self, spec: PlanStep, step: StepState) -> Gen:
        """Run one step; returns its result dict, or None when skipped."""
        if spec.kind == ASK_USER:
            try:
                asked = AskUserInput.model_validate(validate_step_input(spec.kind, spec.input))
            except StepInputError as exc:
                raise JobStop(ErrorCode.BAD_REQUEST, f"step {spec.id!r} ({spec.kind}): {exc.message}", spec.id) from exc
            options = asked.options[:8]
            reply = yield from self.core.questions.ask(
                step,
                "clarify",
                asked.question,
                options,
                default=options[0] if options else None,
                free_text=True,
            )
            text = reply.action() if isinstance(reply.answer, str) else json.dumps(reply.answer)
            self.core.record.clarify(spec.id, text)
            return {"answer": text}

        if spec.kind == AGENT_STEP:
            part = AgentStepInput.model_validate(self.task_for(spec))
            return (yield from self.agent_step(self.core, part.question, step))

        task = self.task_for(spec)
        if runs_code(spec.kind):
            return (yield from PythonStep(self.core, spec, step).work(task))
        if runs_sql(spec.kind):
            return (yield from self.core.approvals.run_sql_step(spec, step, task))
        extra = ExecutionContext()
        if writes_answer(spec.kind):
            extra = ExecutionContext(sources=self.sources_for(spec), step_notes=self.notes_for(spec))
        out = yield from self.core.attempts.execute(step, spec.kind, task, extra)
        return None if out is None else (out.result or {})

    def task_for(self, spec: PlanStep) -> dict[str, Any]:
        """The executor task of a step (its input re-validated), with any clarifications the user gave for it."""
        try:
            task = validate_step_input(spec.kind, spec.input)
        except StepInputError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"step {spec.id!r} ({spec.kind}): {exc.message}", spec.id) from exc
        notes = [self.core.record.clarifications[d] for d in spec.depends_on if d in self.core.record.clarifications]
        if notes:
            key = text_field_of(spec.kind)
            task[key] = f"{task.get(key, '')} ({'; '.join(notes)})".strip()[:2000]
        return task

    def notes_for(self, spec: PlanStep) -> list[str]:
        """What the answer must say about the steps it depends on that did not run, and why."""
        wanted = set(spec.depends_on) if spec.depends_on else None
        notes = [
            f"The step '{s.title}' did not run: {s.note or 'it was skipped'}."
            for s in self.core.state.steps
            if s.state == "skipped" and s.id != spec.id and (wanted is None or s.id in wanted)
        ]
        # What code computed reaches the answer as a note (it is neither a passage nor SQL rows to cite).
        for s in self.core.state.steps:
            ran_code = runs_code(s.kind) or s.kind == PYTHON_TOOL
            if ran_code and s.id in self.core.outputs and (wanted is None or s.id in wanted):
                notes.append(result_note(s.title, self.core.outputs[s.id]))
        return notes[:12]

    def sources_for(self, spec: PlanStep) -> list[dict[str, Any]]:
        """Compact sources for the answer: chunks and SQL rows of the steps it depends on."""
        wanted = spec.depends_on or list(self.core.outputs)
        sources: list[dict[str, Any]] = []
        for step_id, out in _lookups(wanted, self.core.outputs):
            for chunk in out.get("chunks", []):
                sources.append(
                    {
                        "source_id": chunk["source_id"],
                        "kind": "document",
                        "title": chunk.get("title"),
                        "content": chunk.get("content", ""),
                    }
                )
            if "sql" in out and "rows" in out:
                rows = list(out.get("rows") or [])
                shown = rows[:MAX_SQL_ROWS_TO_ANSWER]
                sources.append(
                    {
                        "source_id": out.get("source_id") or f"sql:{step_id}",
                        "kind": "sql",
                        "title": out.get("question"),
                        "sql": out["sql"],
                        "columns": out.get("columns", []),
                        "rows": shown,
                        # The answer writer must know a result is partial, so it never concludes from it.
                        "row_count": out.get("row_count", len(rows)),
                        "truncated": bool(out.get("truncated")),
                        "rows_shown": len(shown),
                    }
                    # Only when the step used one: the inputs of jobs without it stay as they were (replay).
                    | ({"verified_query": out["verified_query"]} if out.get("verified_query") else {})
                )
        # A passage several lookups found is one source, and the contract takes at most MAX_ANSWER_SOURCES
        # (an agent job may make 64 lookups).
        unique: dict[str, dict[str, Any]] = {}
        for source in sources:
            unique.setdefault(str(source["source_id"]), source)
        return list(unique.values())[:MAX_ANSWER_SOURCES]


def _lookups(wanted: list[str], outputs: Mapping[str, StepOutput]) -> list[tuple[str, dict[str, Any]]]:
    """The outputs of the wanted steps, an agent step's lookups (its ``parts``) each as its own."""
    found: list[tuple[str, dict[str, Any]]] = []
    for step_id in wanted:
        out = outputs.get(step_id) or {}
        found.append((step_id, out))
        found.extend((step_id, part) for part in out.get("parts") or [] if isinstance(part, dict))
    return found
