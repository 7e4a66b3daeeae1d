"""run_python steps under the job's policy: allowed tool, resolved inputs, approval, sandbox time budget.

A plain generator driven by the core's ``Steps.run_step`` (deterministic, no I/O). The code and its input names
are untrusted (plan, Executor, edit); this module alone decides whether code runs (the job's ``tools`` allow
``python.run``), what its inputs hold (earlier outputs, resolved here by step id), whether a human must
approve it first (``approval.python``) and how much sandbox time is left (``budget.max_sandbox_seconds``),
and hands that to the executor in the execution context. An expired wait never approves code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrators.outcomes import EditedTask, ExpiredAnswer, JobStop
from shared.executors import StepInputError, apply_edits
from shared.jobs.agent import PYTHON_TOOL
from shared.jobs.contracts import ErrorCode, ExecutionContext
from shared.jobs.plan import PlanStep

if TYPE_CHECKING:
    from orchestrators.run.core import RunCore
    from orchestrators.run.record import Gen
    from shared.jobs.models import StepState

APPROVAL_OPTIONS = ["approve", "edit", "reject", "abort"]


def value_of(out: dict[str, Any]) -> Any:
    """What an earlier output is inside the code: SQL rows as a table, a run's result, passages, the answer."""
    if "rows" in out and "columns" in out:
        return {"columns": out.get("columns") or [], "rows": out.get("rows") or []}
    if "stdout" in out and "result" in out:
        return out["result"]
    if isinstance(out.get("chunks"), list):
        keep = ("source_id", "title", "content")
        return [{k: c.get(k) for k in keep} for c in out["chunks"] if isinstance(c, dict)]
    if "answer" in out:
        return out["answer"]
    return out


# The answer step keeps 300 characters of a note (shared/executors/generate_response.py StepNotes).
NOTE_CHARS = 300


def result_note(title: str, out: dict[str, Any]) -> str:
    """What the answer is told of a run_python step: its result in words (never JSON cut mid-object), its files."""
    names = [str(f.get("name"))[:60] for f in out.get("files") or [] if isinstance(f, dict)]
    made = f" It made the file(s) {', '.join(names[:3])}{' and more' if len(names) > 3 else ''}." if names else ""
    shown = title if len(title) <= 80 else f"{title[:79]}…"
    head = f"The step '{shown}' computed with Python: "
    return f"{head}{describe_result(out.get('result'), NOTE_CHARS - len(head) - len(made) - 1)}.{made}"


def describe_result(value: Any, budget: int = NOTE_CHARS) -> str:
    """A computed result as prose: each top-level value in brief, whole ones only, within ``budget`` characters."""
    if not isinstance(value, dict):
        brief = f"result {_brief(value)}"
        return brief if len(brief) <= budget else "a result too long to quote"
    parts: list[str] = []
    used = 0
    for index, (key, item) in enumerate(value.items()):
        part = f"{str(key)[:60]} {_brief(item)}"
        rest = len(value) - index
        more = f"; and {rest} more value(s)" if rest > 1 else ""
        if used + len(part) + len(more) > budget:
            parts.append(f"and {rest} more value(s)")
            break
        parts.append(part)
        used += len(part) + 2
    return "; ".join(parts) if parts else "an empty result"


def _brief(value: Any) -> str:
    """One value in words: a number or short text as is, a list or mapping by its size and first names."""
    if value is None or isinstance(value, bool | int):
        return f"= {value}"
    if isinstance(value, float):
        return f"= {value:.6g}"
    if isinstance(value, str):
        return f"= {value[:120]!r}" if len(value) <= 120 else f"= {value[:117]!r}…"
    if isinstance(value, list):
        if len(value) <= 6 and all(v is None or isinstance(v, bool | int | float | str) for v in value):
            shown = ", ".join(_brief(v)[2:][:40] for v in value)
            return f"= [{shown}]"
        return f"(a list of {len(value)} values)"
    if isinstance(value, dict):
        keys = ", ".join(str(k)[:30] for k in list(value)[:4])
        more = ", …" if len(value) > 4 else ""
        return f"(a table of {len(value)} entries: {keys}{more})"
    return f"= {str(value)[:120]}"


class PythonStep:
    """One run_python step of a job: its policy, from the allow-list to the approved run."""

    def __init__(self, run: RunCore, spec: PlanStep, step: StepState) -> None:
        self.run = run
        self.spec = spec
        self.step = step

    def work(self, task: dict[str, Any]) -> Gen:
        """Run the step as the job's policy says; returns its result, or None when skipped."""
        run = self.run
        if PYTHON_TOOL not in run.job.request.tools:
            return self.refuse(f"the job does not allow {PYTHON_TOOL}, so no code runs in it")
        policy = run.job.request.approval.python
        while True:
            context = yield from self.context(task)
            if context is None:
                return None
            written: list[Any] | None = None
            if policy == "writes_files":
                draft = yield from run.attempts.execute(
                    self.step,
                    self.spec.kind,
                    task,
                    context.model_copy(update={"python_mode": "draft"}),
                    reapprove_edits=True,
                )
                if draft is None:
                    return None
                if isinstance(draft, EditedTask):
                    task = draft.task
                    continue
                result = dict(draft.result or {})
                written = list(result.get("files_written") or [])
                if not written:
                    result.pop("draft", None)  # it wrote nothing: this run is the step's result
                    return result
            if policy != "never":
                decided = yield from self.approve(task, written)
                if decided is None:
                    return None
                if decided is not True:
                    task = decided  # edited: checked (and drafted) again
                    continue
            out = yield from run.attempts.execute(
                self.step, self.spec.kind, task, context, reapprove_edits=policy != "never"
            )
            if isinstance(out, EditedTask):
                task = out.task
                continue
            return None if out is None else (out.result or {})

    def refuse(self, reason: str) -> None:
        """Refuse the step: to the Executor as a refused call, in a planned job as a skipped step."""
        if self.step.turn is not None:
            raise StepInputError(None, reason)
        self.run.record.skipped(reason)
        return None

    def context(self, task: dict[str, Any]) -> Gen:
        """The execution context of a run (inputs resolved, the allow-list, time left); None when skipped."""
        run = self.run
        resolved: dict[str, Any] = {}
        for name, ref in dict(task.get("inputs") or {}).items():
            out = run.outputs.get(ref)
            if out is None:
                return self.unresolved(name, ref)
            resolved[name] = value_of(out)
        # What is left of budget.max_sandbox_seconds (Attempts.call_once checks it again before every attempt).
        left = run.budgets.sandbox_left(self.step.id)
        return ExecutionContext(allowed_tools=list(run.job.request.tools), python_inputs=resolved, **left)
        yield  # a generator like the others the orchestrator drives

    def unresolved(self, name: str, ref: str) -> None:
        """An input naming a step with no output: skipped when that step did not run, else refused or stopped."""
        known = {s.id: s for s in self.run.state.steps}
        if ref in known and known[ref].state == "skipped":
            return self.refuse(f"its input {name!r} comes from step {ref!r}, which did not run")
        message = f"input {name!r} refers to {ref!r}, which is not an earlier step with an output"
        if self.step.turn is not None:
            raise StepInputError(f"inputs.{name}", message)
        raise JobStop(ErrorCode.BAD_REQUEST, f"step {self.step.id!r} (run_python): {message}", self.step.id)

    def approve(self, task: dict[str, Any], written: list[Any] | None) -> Gen:
        """Ask a human about the code: True to run it, a new task after an edit, None when it is skipped."""
        run, policy = self.run, self.run.job.request.approval
        details: dict[str, Any] = {"code": task.get("code"), "inputs": task.get("inputs") or {}}
        if written is not None:
            details["files"] = written
        reply = yield from run.questions.ask(
            self.step,
            "approval",
            f"Approve this Python code for step '{self.step.title}'?"[:1000],
            APPROVAL_OPTIONS,
            default="reject" if policy.on_timeout == "reject" else None,
            details=details,
            timeout_seconds=run.questions.approval_seconds,
            expiry_falls_back=policy.on_timeout == "reject",
            expiry_message=(
                f"the approval of the Python code of step {self.step.id} expired after "
                f"{run.questions.approval_seconds} s; "
                "an expired wait never approves code"
            ),
            edit_of=(self.spec.kind, task),
        )
        action = reply.action()
        if action == "approve" and not isinstance(reply, ExpiredAnswer):
            return True
        if action == "edit":
            return apply_edits(self.spec.kind, task, reply.edits())
        if action in ("reject", "approve"):
            run.record.skipped(
                "its Python code was not approved in time, so it was not run"
                if isinstance(reply, ExpiredAnswer)
                else "the user rejected its Python code",
                by_user=not isinstance(reply, ExpiredAnswer),
            )
            return None
        raise JobStop("REJECTED_BY_USER", "the user aborted the job at the Python approval", self.step.id)
