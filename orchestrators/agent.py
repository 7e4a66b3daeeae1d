"""Agent mode: the Executor (a model) works the job with tools; every turn and every tool call is an activity.

A plain generator like the job orchestrator, driven through the run's core (``RunCore``): deterministic, no I/O.
The loop is bounded by the job's ``agent`` limits (turns, tool calls) and its budget, which ``Attempts.call_once``
checks before every model call. What the model writes is untrusted data: a lookup's arguments are
checked against its kind's typed input model, a family tool must be one the job allows (checked here
and again in the ``call_tool`` executor), and what a SQL step may read is decided by the same approval
code as in planned jobs. Failures go through the same policy as steps: retryable codes are retried by
``Attempts.execute``; anything else comes back to the model in the result envelope, and the model may try
something else within its bounds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrators.outcomes import ToolStepFailed
from orchestrators.run.attempts import access_context
from shared.executors import (
    AGENT_TURN,
    CALL_TOOL,
    StepInputError,
    get_executor,
    input_for_text,
    kinds_where,
    lookup_kinds,
    validate_step_input,
)
from shared.jobs.agent import (
    FORMAT_OUTPUT,
    GET_JOB_STATE,
    PYTHON_TOOL,
    REQUEST_USER_FEEDBACK,
    RUN_PYTHON,
    AgentLimits,
    AgentToolCall,
    AgentTurn,
    ToolCallRecord,
)
from shared.jobs.contracts import ErrorCode, ExecutionContext, SqlAccess
from shared.jobs.models import StepState
from shared.jobs.plan import AskUserInput, PlanStep

if TYPE_CHECKING:
    from orchestrators.run.core import RunCore
    from orchestrators.run.record import Gen

# What the model is shown of each result, and of how many earlier calls (the oldest are dropped first).
MAX_RECORD_CHARS = 6000
MAX_TRANSCRIPT = 24
ANSWER_STEP_ID = "answer"


@dataclass(frozen=True)
class AgentProfile:
    """A user-defined agent as a run's orchestrator resolved it: its instructions, the family tools it may call
    (already cut to what the app configures), its bounds and the models it may use (None: the job's)."""

    instructions: str
    tools: list[str]
    limits: AgentLimits
    models: list[str | None] | None = None
    # The step kinds (lookups) the agent names among its tools: the only ones it is offered and may call.
    lookups: list[str] | None = None


class AgentLoop:
    """Executor turns and their tool calls: a whole agent-mode job, or one ``agent`` step of a planned job.

    For a job, each tool call is a step of the job and the answer step follows. For a step (``parent``),
    the calls are the parent step's own, numbered ``<step>-t<n>``; what they found becomes its output.
    """

    def __init__(
        self,
        run: RunCore,
        question: str | None = None,
        parent: StepState | None = None,
        profile: AgentProfile | None = None,
    ) -> None:
        self.run = run
        self.question = question or run.job.request.question
        self.parent = parent
        # A workflow's agent node brings its own instructions, tools, bounds and models; else the job's.
        self.profile = profile
        self.tools = list(profile.tools) if profile else list(run.job.request.tools)
        self.limits = profile.limits if profile else run.job.request.agent
        # A job's Executor may call every lookup kind; a workflow's agent only those it names.
        kinds = set(lookup_kinds())
        self.lookups = kinds if profile is None or profile.lookups is None else kinds & set(profile.lookups)
        self.transcript: list[ToolCallRecord] = []
        self.calls = 0
        self.turns = 0
        # A fork of an agent job starts at a later turn, the earlier ones carried over (orchestrators/fork.py).
        self.first_turn = 1
        # What the user told the Executor: the answer is written for the question as the user explained it.
        self.replies: list[str] = []
        # Agent step: the outputs of its lookups (the sources its output hands to the answer) and its reasoning.
        self.found: list[dict[str, Any]] = []
        self.reasoning: list[str] = []

    def work_step(self) -> Gen:
        """An agent step: turns until the Executor is done or a bound is reached; its output is what was found."""
        yield from self.loop()
        assert self.parent is not None
        self.parent.tool_output = _short(f"{self.calls} tool calls in {self.turns} turns")
        return {
            "question": self.question,
            "turns": self.turns,
            "reasoning": self.reasoning,
            "tool_calls": [{"id": r.id, "tool": r.tool, "success": r.success} for r in self.transcript],
            "parts": self.found,
        }

    def work(self) -> Gen:
        """Run turns until the Executor calls format_output, stops calling tools, or a bound is reached."""
        run = self.run
        run.record.start_running("agent")
        run.publish()
        yield from self.loop()
        return (yield from self.write_answer())

    def loop(self) -> Gen:
        """Executor turns and their calls, within the job's agent bounds."""
        run, limits = self.run, self.limits
        for turn in range(self.first_turn, limits.max_turns + 1):
            if self.calls >= limits.max_tool_calls:
                # No call of a further turn could run: it would only spend tokens (and may hit the budget).
                run.log("the Executor reached its %d tool calls; writing the answer", limits.max_tool_calls)
                break
            decided = yield from self.turn(turn)
            if decided is None or not decided.tool_calls:
                break
            if (yield from self.run_calls(decided.tool_calls, turn)):
                break
        else:
            run.log("the Executor used all %d turns", limits.max_turns)

    def turn(self, turn: int) -> Gen:
        """One Executor turn (an activity under the policy); None when it failed or its output is not valid."""
        run, limits = self.run, self.limits
        self.turns = turn
        if self.parent is None:
            run.record.count_turn(turn)
        run.publish()  # the view says which turn the Executor is on while it thinks
        task = {
            "question": self.question,
            "transcript": [r.model_dump(mode="json") for r in self.transcript[-MAX_TRANSCRIPT:]],
            "turns_left": limits.max_turns - turn + 1,
            "calls_left": max(0, limits.max_tool_calls - self.calls),
        }
        if self.profile is not None:
            task["instructions"] = self.profile.instructions
            task["lookups"] = sorted(self.lookups)
        models = self.profile.models if self.profile else None
        out = yield from run.attempts.execute(
            None, AGENT_TURN, task, ExecutionContext(allowed_tools=list(self.tools)), models=models
        )
        if out is None:
            run.log("executor turn %d failed; writing the answer from what the tools found", turn)
            return None
        try:
            decided = AgentTurn.model_validate(out.result)
        except ValidationError as exc:
            run.log("executor turn %d is not valid (%s); writing the answer", turn, str(exc)[:200])
            return None
        run.log("executor turn %d: %s", turn, decided.reasoning[:500] or "(no reasoning given)")
        if decided.reasoning:
            self.reasoning.append(decided.reasoning[:2000])
        return decided

    def run_calls(self, calls: list[AgentToolCall], turn: int) -> Gen:
        """Run one turn's tool calls; True when the Executor is done (format_output or out of calls)."""
        limit = self.limits.max_tool_calls
        todo: list[AgentToolCall] = []
        done = False
        for call in calls:
            if call.tool == FORMAT_OUTPUT:
                done = True
                break
            if self.calls + len(todo) >= limit:
                self.run.log("the Executor reached its %d tool calls; writing the answer", limit)
                done = True
                break
            todo.append(call)
        opened = [(call, self.open_step(call, turn)) for call in todo]
        yield from self.prefetch(opened)
        for call, step in opened:
            self.transcript.append((yield from self.close_step(call, step)))
        # One publish for the turn: every wait inside a step (a retry, a question, a new attempt) publishes first.
        self.run.publish()
        return done

    def prefetch(self, opened: list[tuple[AgentToolCall, StepState]]) -> Gen:
        """The calls of one turn that need no person start together: their first attempts are one fan-out.

        Each result waits in ``Attempts.prefetched`` (``hand_over``) for the step that would have scheduled it,
        which then goes on as usual (retries, failures, the envelope), so the only change is that they ran at once.
        """
        firsts = [(step, first) for call, step in opened if (first := self.first_attempt(call, step.id))]
        if len(firsts) < 2:
            self.run.publish()
            return
        tool_calls = sum(1 for _step, (name, _payload) in firsts if name == CALL_TOOL)
        self.run.budgets.count_tool_calls(CALL_TOOL, firsts[0][0].id, tool_calls)  # counted now, not when each is taken
        for step, (_name, payload) in firsts:
            # The first attempt starts now; the step's own call takes its result instead of scheduling it.
            step.attempts = 1
            step.model = payload["execution_context"]["model"]
        self.run.publish()
        ctx = self.run.ctx
        results = yield ctx.task_all([ctx.call_activity(name, payload) for _step, (name, payload) in firsts])
        for (step, (_name, _payload)), raw in zip(firsts, results, strict=True):
            self.run.attempts.hand_over(self.run.attempts.key(step.id, 1), raw)

    def first_attempt(self, call: AgentToolCall, step_id: str) -> tuple[str, dict[str, Any]] | None:
        """The activity and payload of a call's first attempt, when it may start without a person; else None."""
        run, args = self.run, call.arguments()
        if not isinstance(args, dict):
            return None
        allowed = list(self.tools)
        if call.tool in self.lookups:
            spec = get_executor(call.tool)
            if spec is None or (spec.runs_sql and run.job.request.approval.sql != "never"):
                return None  # an approval may be asked first
            try:
                task = validate_step_input(call.tool, args)
            except StepInputError:
                return None
            name, context = (
                call.tool,
                (access_context(SqlAccess(sql_mode="run")) if spec.runs_sql else ExecutionContext()),
            )
        elif call.tool in allowed and call.tool != PYTHON_TOOL:
            name, task = CALL_TOOL, {"tool": call.tool, "arguments": args}
            context = ExecutionContext(allowed_tools=allowed)
        else:
            return None
        models = run.job.request.constraints.allowed_models
        model = models[0] if models else None
        # The call's id, as the step's own execute() will name its later attempts (idempotency keys).
        call_id = run.attempts.key(step_id, 1).call_id
        payload = run.attempts.executor_input(
            step_id, name, task, context.model_copy(update={"call_id": call_id}), model, attempt=1
        )
        return name, payload.model_dump(mode="json")

    def open_step(self, call: AgentToolCall, turn: int) -> StepState:
        """A tool call becomes a step of the job, shown running from the moment its turn asked for it."""
        run = self.run
        self.calls += 1
        step = StepState(
            id=f"t{self.calls}" if self.parent is None else f"{self.parent.id[:24]}-t{self.calls}",
            kind=call.tool[:64],
            title=f"{call.tool} (turn {turn})"[:200],
            turn=turn,
            tool_input=_short(call.arguments()),
            state="running",
            started_at=run.now_iso(),
        )
        if self.parent is None:
            run.record.add_step(step)
        return step

    def close_step(self, call: AgentToolCall, step: StepState) -> Gen:
        """Work one opened call to its end; returns the record the Executor sees next turn."""
        run = self.run
        if self.parent is None:
            run.record.at_step(step)
        run.record.begin_step()
        record = yield from self.dispatch(call, call.arguments(), step)
        step.ended_at = run.now_iso()
        if record.success:
            step.state = "succeeded"
        elif record.error and record.error.get("code") == "SKIPPED":
            step.state = "skipped"
            step.note = record.error.get("message", "")[:300]
        else:
            step.state = "failed"
        step.tool_output = _short(_summary(record.data) if record.success else record.error)
        return record

    def dispatch(self, call: AgentToolCall, args: Any, step: StepState) -> Gen:
        """Run a call by its kind of tool; every refusal and failure becomes an envelope, never an exception."""
        record = ToolCallRecord(id=call.id, tool=call.tool, arguments=args, success=False, step=step.id)
        if not isinstance(args, dict):
            return self.refuse(record, step, ErrorCode.INVALID_INPUT, "arguments_json must be a JSON object")
        if call.tool == REQUEST_USER_FEEDBACK and not self.run.questions.can_ask:
            # A part of a run (a branch, a sub-workflow) has no one to ask: the model answers from what it found.
            return self.refuse(record, step, ErrorCode.INVALID_INPUT, "no person can answer here; use what you found")
        try:
            if call.tool == REQUEST_USER_FEEDBACK:
                data = yield from self.ask_user(args, step)
            elif call.tool == GET_JOB_STATE:
                data = self.job_state()
            elif call.tool in self.lookups:
                data = yield from self.lookup(call.tool, args, step)
            elif call.tool == PYTHON_TOOL and call.tool in self.tools:
                # Code runs as a run_python step: inputs resolved, approval and sandbox budget applied.
                data = yield from self.lookup(RUN_PYTHON, args, step)
            elif call.tool in self.tools:
                data = yield from self.family_tool(call.tool, args, step)
            else:
                offered = sorted([*self.lookups, REQUEST_USER_FEEDBACK, FORMAT_OUTPUT, GET_JOB_STATE])
                allowed = offered + list(self.tools)
                return self.refuse(record, step, ErrorCode.INVALID_INPUT, f"unknown tool; tools: {allowed}")
        except StepInputError as exc:
            return self.refuse(record, step, ErrorCode.INVALID_INPUT, exc.message)
        except ToolStepFailed as failed:
            error = failed.out.error
            assert error is not None
            envelope = failed.out.result if isinstance(failed.out.result, dict) else {}
            return record.model_copy(
                update={
                    "error": {"code": str(error.code), "message": error.message[:1000]},
                    "data": _bounded(envelope.get("data")),
                }
            )
        if data is None:
            reason = self.run.record.skip_reason or "it was skipped"
            return record.model_copy(update={"error": {"code": "SKIPPED", "message": reason[:1000]}})
        bounded, cut = _bounded_flag(data)
        return record.model_copy(update={"success": True, "data": bounded, "truncated": cut})

    def refuse(self, record: ToolCallRecord, step: StepState, code: ErrorCode, message: str) -> ToolCallRecord:
        """A call refused before any activity ran: shown on the step and to the model."""
        from shared.jobs.models import ErrorInfo

        step.error = ErrorInfo(code=code, message=message[:600], step_id=step.id)
        self.run.log("refused tool call %s (%s): %s", record.id, record.tool, message[:200])
        return record.model_copy(update={"error": {"code": str(code), "message": message[:1000]}})

    def lookup(self, kind: str, args: dict[str, Any], step: StepState) -> Gen:
        """A step kind of the registry called as a tool: the same typed input, policy and approvals as a plan step."""
        spec = PlanStep(id=step.id, kind=kind, title=step.title, input=validate_step_input(kind, args))
        result = yield from self.run.steps.run_step(spec, step)
        if result is not None:
            self.run.record.keep(step.id, result)
            self.found.append(result)
        return result

    def ask_user(self, args: dict[str, Any], step: StepState) -> Gen:
        """request_user_feedback: the job waits for the user with the Executor's question, exactly like any wait."""
        asked = AskUserInput.model_validate(validate_step_input("ask_user", args))
        options = asked.options[:8]
        reply = yield from self.run.questions.ask(
            step, "clarify", asked.question, options, default=options[0] if options else None, free_text=True
        )
        if isinstance(reply.answer, str):
            self.replies.append(reply.action())
        return {"answer": reply.action() if isinstance(reply.answer, str) else reply.answer}

    def family_tool(self, name: str, args: dict[str, Any], step: StepState) -> Gen:
        """A tool of a family, through the call_tool executor (one activity per attempt)."""
        allowed = list(self.tools)
        out = yield from self.run.attempts.execute(
            step, CALL_TOOL, {"tool": name, "arguments": args}, ExecutionContext(allowed_tools=allowed)
        )
        if out is None:
            return None
        envelope = out.result if isinstance(out.result, dict) else {}
        return envelope.get("data")

    def job_state(self) -> dict[str, Any]:
        """get_job_state: the job's progress as the orchestrator holds it (read-only; no activity needed)."""
        state = self.run.state
        return {
            "steps": [{"id": s.id, "tool": s.kind, "state": s.state} for s in state.steps],
            "tokens_used": state.usage.total_tokens,
            "budget_left": self.run.budgets.budget_left(),
            "turn": state.turns,
            "tool_calls_left": max(0, self.limits.max_tool_calls - self.calls),
        }

    def write_answer(self) -> Gen:
        """The answer step: the kind that writes answers, over every source the tools found, with its notes."""
        run = self.run
        kind = sorted(kinds_where(lambda spec: spec.writes_answer))[0]
        question = run.job.request.question
        if self.replies:
            question = f"{question} ({'; '.join(self.replies)})"  # as planned jobs add clarifications
        spec = PlanStep(id=ANSWER_STEP_ID, kind=kind, title="Write the answer", input=input_for_text(kind, question))
        step = StepState(id=spec.id, kind=kind, title=spec.title)
        run.record.add_step(step)
        step.started_at = run.now_iso()
        run.record.begin_step()
        result = yield from run.steps.run_step(spec, step)
        step.ended_at = run.now_iso()
        step.state = "succeeded" if result is not None else "skipped"
        if result is None:
            step.note = run.record.skip_reason or "it was skipped"
        run.publish()
        return result


def agent_step(core: RunCore, question: str, parent: StepState) -> Gen:
    """An agent step of a planned job: the loop of ``parent``'s own tool calls (what the core's steps run)."""
    return AgentLoop(core, question, parent).work_step()


def _bounded_flag(data: Any) -> tuple[Any, bool]:
    compact = _compact(data)
    text = json.dumps(compact, default=str)
    if len(text) <= MAX_RECORD_CHARS:
        return compact, compact is not data and _was_cut(data)
    return text[:MAX_RECORD_CHARS], True


def _bounded(data: Any) -> Any:
    return _bounded_flag(data)[0]


def _was_cut(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    return len(data.get("chunks") or []) > 8 or len(data.get("rows") or []) > 20


def _compact(data: Any) -> Any:
    """What the model needs of a lookup: each passage cut short, the first rows, and the true size of the result."""
    if not isinstance(data, dict):
        return data
    compact = dict(data)
    if isinstance(compact.get("chunks"), list):
        compact["chunks"] = [
            {k: (str(v)[:400] if k == "content" else v) for k, v in c.items()} if isinstance(c, dict) else c
            for c in compact["chunks"][:8]
        ]
    if isinstance(compact.get("rows"), list):
        compact["rows"] = compact["rows"][:20]
    return compact


def _summary(data: Any) -> Any:
    """What the view shows of a result: the size of a lookup, or the data itself (cut short by ``_short``)."""
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        size = data.get("row_count", len(data["rows"]))
        partial = ", truncated" if data.get("truncated") else ""
        return f"{size} rows ({', '.join(map(str, data.get('columns') or []))}){partial}"
    if isinstance(data, dict) and isinstance(data.get("chunks"), list):
        titles = "; ".join(str(c.get("title", "")) for c in data["chunks"][:3] if isinstance(c, dict))
        return f"{len(data['chunks'])} passages: {titles}"
    return data


def _short(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:199] + "…"
