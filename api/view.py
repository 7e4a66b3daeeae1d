"""Build the job view from the Durable status, its history and the compact custom status.

The view is built as the typed models of api/contract/view.py and sent as ``JobView.dump()``; the recorded views of
tests/api/views hold its JSON to what clients saw (tests/api/test_view_contract.py).

There is no second store: step outputs and the log are read from the history (activity inputs and
results), progress from the custom status, the final answer from the output. The log
(api/view_log.py) is the history rendered as lines.

One exception, which cannot disagree with the history: while a generate_response step runs, the
answer streamed so far is read from the partial output store (shared/runtime/streaming/local.py) into the step's
``partial_output``, with a line in ``log.live``. Live lines have no ``seq`` and are not part of
``log.entries``, so the cursor contract holds; once the history has the step's result, the store is
not read again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from api.contract.view import (
    TERMINAL_STATUSES,
    AgentView,
    AnswerView,
    ArtifactView,
    ErrorView,
    ForkedFrom,
    JobView,
    LiveLine,
    PartialOutputView,
    PlanView,
    ReceivedAnswer,
    RunGraph,
    RunView,
    StepView,
    ToolCallView,
    UsageView,
    WaitingForm,
    WaitingView,
)
from api.view_log import answers_received as answers_received
from api.view_log import build_log as build_log
from api.view_log import decode as decode
from api.view_log import event_line as event_line
from api.view_log import ms_between as ms_between
from api.view_log import part_news as part_news
from api.view_log import retry_message as retry_message
from api.view_log import task_ref as task_ref
from shared.executors import AGENT_TURN, CALL_TOOL, PLAN, SUPERVISE, kinds_where
from shared.jobs.agent import AgentLimits
from shared.jobs.contracts import Usage
from shared.jobs.fork import carried_outputs
from shared.jobs.models import TERMINAL_RUNTIME, JobState, StepState, Waiting
from shared.jobs.plan import AGENT_STEP
from shared.jobs.runs import LOAD_DEFINITION
from shared.runtime.ledger import view_cost
from shared.runtime.streaming.local import PartialOutput

logger = logging.getLogger(__name__)
PartialReader = Callable[[str, str], PartialOutput | None]


def job_status(runtime: str | None, state: JobState | None, output: Any) -> str:
    """Map the runtime status and custom status to the job status."""
    if runtime == "Pending" or runtime is None:
        return "pending"
    if runtime in ("Terminated", "Canceled"):
        return "cancelled"
    if runtime == "Failed":
        return "failed"
    if runtime == "Completed":
        result = decode(output)
        return "failed" if isinstance(result, dict) and result.get("status") == "failed" else "completed"
    return state.status if state is not None else "running"


def plan_status(runtime: str | None, state: JobState | None) -> str:
    """How planning stands: planning, planned, failed or cancelled (never "planning" for a finished job)."""
    current = state.plan_status if state else "planning"
    if current == "planning" and runtime in ("Terminated", "Canceled"):
        return "cancelled"
    if current == "planning" and runtime in ("Failed", "Completed"):
        return "failed"
    return current


def step_outputs(history: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The latest successful result of each step, and of each SQL draft shown for approval, from history."""
    outputs: dict[str, dict[str, Any]] = {}
    drafts: dict[str, dict[str, Any]] = {}
    for event in history:
        if event.get("EventType") == "SubOrchestrationInstanceCompleted":
            outputs.update(branch_outputs(event))
            continue
        if event.get("EventType") != "TaskCompleted":
            continue
        step_id, _, inp = task_ref(event)
        result = decode(event.get("Result"))
        if step_id in (None, PLAN, AGENT_TURN) or not isinstance(result, dict) or result.get("status") == "failed":
            continue
        body = result.get("result") or {}
        if body.get("draft"):
            drafts[str(step_id)] = body
        elif inp.get("executor_type") != SUPERVISE:
            outputs[str(step_id)] = body
    return outputs, drafts


def branch_outputs(event: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The node outputs a parallel branch handed back (its nodes are the run's own steps), from its completion.

    A sub-workflow's part is left out: its node ids belong to another workflow and may collide with the run's.
    A branch's part is started with ``run.part`` set (its input) and hands back no ``result``.
    """
    result = decode(event.get("Result"))
    if not isinstance(result, dict) or not isinstance(result.get("outputs"), dict):
        return {}
    given = decode(event.get("Input"))
    run = given.get("run") if isinstance(given, dict) else None
    branch = isinstance(run.get("part"), dict) if isinstance(run, dict) else result.get("result") is None
    if not branch:
        return {}
    ran = {s.get("id") for s in result.get("steps") or [] if isinstance(s, dict)}
    return {str(k): v for k, v in result["outputs"].items() if k in ran and isinstance(v, dict)}


def agent_step_calls(history: list[dict[str, Any]], step_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The tool calls of each agent step (``<step>-t<n>``), from the history: tool, input, result, time, usage.

    One entry per call, its last attempt; a call still running has no entry until its result is in.
    """
    calls: dict[str, dict[str, dict[str, Any]]] = {}
    for event in history:
        if event.get("EventType") not in ("TaskCompleted", "TaskFailed"):
            continue
        call_id, attempt, inp = task_ref(event)
        parent, sep, number = str(call_id).rpartition("-t")
        if not sep or parent not in step_ids or not number.isdigit():
            continue
        given = inp.get("task")
        task: dict[str, Any] = given if isinstance(given, dict) else {}
        result = decode(event.get("Result"))
        body: dict[str, Any] = result if isinstance(result, dict) else {}
        failed = event.get("EventType") == "TaskFailed" or body.get("status") == "failed"
        calls.setdefault(parent, {})[str(call_id)] = {
            "id": call_id,
            "tool": task.get("tool") if inp.get("executor_type") == CALL_TOOL else inp.get("executor_type"),
            "input": task.get("arguments") if inp.get("executor_type") == CALL_TOOL else task,
            "state": "failed" if failed else "succeeded",
            "attempts": attempt,
            "output": body.get("result"),
            "error": body.get("error") if failed else None,
            "duration_ms": ms_between(event.get("ScheduledTime"), event.get("Timestamp")),
            "usage": body.get("usage"),
        }
    return {parent: list(by_id.values()) for parent, by_id in calls.items()}


def brief_step_facts(history: list[dict[str, Any]], step_ids: set[str]) -> dict[str, dict[str, Any]]:
    """What the history tells of brief steps (``custom_status``): attempts, times, usage and the call's input."""
    facts: dict[str, dict[str, Any]] = {}
    for event in history:
        if event.get("EventType") not in ("TaskCompleted", "TaskFailed"):
            continue
        step_id, attempt, inp = task_ref(event)
        if step_id not in step_ids:
            continue
        fact = facts.setdefault(str(step_id), {"attempts": 0, "usage": Usage()})
        fact["attempts"] = max(fact["attempts"], attempt or 0)
        fact.setdefault("started_at", event.get("ScheduledTime"))
        fact["ended_at"] = event.get("Timestamp")
        result = decode(event.get("Result"))
        if isinstance(result, dict) and isinstance(result.get("usage"), dict):
            fact["usage"] = fact["usage"] + Usage.model_validate(result["usage"])
        task = inp.get("task")
        if isinstance(task, dict):
            fact["tool_input"] = task.get("arguments") if inp.get("executor_type") == CALL_TOOL else task
    return facts


def _fill_brief(step: StepState, fact: dict[str, Any] | None) -> StepState:
    """A brief step made whole again from the history (the custom status cut it to fit)."""
    filled = step.model_copy(update={"title": f"{step.kind} (turn {step.turn})"})
    if fact is None:
        return filled
    text = json.dumps(fact.get("tool_input"), default=str)
    return filled.model_copy(
        update={
            "attempts": fact["attempts"],
            "started_at": fact.get("started_at"),
            "ended_at": fact.get("ended_at"),
            "usage": fact["usage"],
            "tool_input": text if len(text) <= 200 else text[:199] + "…",
        }
    )


def default_partial_reader() -> PartialReader | None:
    """Read partial output from the store the settings choose (None when it is off or unavailable)."""
    from shared.runtime.settings import get_settings
    from shared.runtime.streaming.local import get_store

    store = get_store(get_settings())
    return store.read if store is not None else None


def attach_partial_output(job_id: str, steps: list[StepView], read: PartialReader | None) -> list[LiveLine]:
    """Add ``partial_output`` to running streaming steps with no result in the history yet; return live lines.

    The live lines are not history entries: they carry no ``seq`` and never move the log cursor.
    """
    live: list[LiveLine] = []
    for entry in steps:
        if not _streams_now(entry):
            continue
        if read is None:
            return live
        try:
            partial = read(job_id, entry.id)
        except Exception as exc:  # the preview is optional; the view must still answer
            logger.warning("partial output of %s/%s unreadable: %s", job_id, entry.id, exc)
            continue
        # Text of an earlier attempt is stale: the step started over.
        if partial is None or partial.attempt != entry.attempts:
            continue
        entry.partial_output = PartialOutputView(
            text=partial.text,
            chars=partial.chars,
            attempt=partial.attempt,
            complete=partial.complete,
            updated_at=partial.updated_at,
        )
        state = "streamed" if partial.complete else "streaming"
        message = f"{entry.id} {entry.kind}: {state}, {partial.chars} chars so far"
        live.append(LiveLine(step_id=entry.id, time=partial.updated_at, message=message))
    return live


def build_view(
    status: dict[str, Any],
    links: dict[str, str],
    *,
    log_cursor: int = 0,
    log_limit: int = 100,
    partials: PartialReader | None = None,
    retention_days: float | None = None,
    parts: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The job view as JSON (``build_job_view``, dumped)."""
    return build_job_view(
        status,
        links,
        log_cursor=log_cursor,
        log_limit=log_limit,
        partials=partials,
        retention_days=retention_days,
        parts=parts,
    ).dump()


def build_job_view(
    status: dict[str, Any],
    links: dict[str, str],
    *,
    log_cursor: int = 0,
    log_limit: int = 100,
    partials: PartialReader | None = None,
    retention_days: float | None = None,
    parts: dict[str, list[dict[str, Any]]] | None = None,
) -> JobView:
    """The job view a UI polls (``partials`` reads streamed text; default: the configured store; ``parts``: the
    histories of a run's parts, for its cost)."""
    custom = status.get("customStatus")
    state = JobState.model_validate(custom) if isinstance(custom, dict) else None
    runtime = status.get("runtimeStatus")
    history = status.get("historyEvents") or status.get("history") or []
    job_input = decode(status.get("input"))
    request = job_input.get("request", {}) if isinstance(job_input, dict) else {}
    output = decode(status.get("output"))
    steps = _steps(state, runtime, history)
    live: list[LiveLine] = []
    if runtime not in TERMINAL_RUNTIME and any(_streams_now(e) for e in steps):
        read = partials if partials is not None else default_partial_reader()
        live = attach_partial_output(str(status.get("instanceId")), steps, read)
    answer = None
    if isinstance(output, dict) and output.get("answer") is not None:
        answer = AnswerView(text=output["answer"], citations=output.get("citations", []), **answer_claims(steps))
        if output.get("unsupported"):
            # Why the answer has no support: shown with it, so no one takes it for something found.
            answer.unsupported = output["unsupported"]
    waiting = state.waiting if state and runtime not in TERMINAL_RUNTIME else None
    log = build_log(history, log_cursor, log_limit)
    log.live = live

    shown = job_status(runtime, state, output)
    return JobView(
        id=status.get("instanceId"),
        status=shown,
        finished=shown in TERMINAL_STATUSES,
        runtime_status=runtime,
        question=request.get("question"),
        mode=request.get("mode", "deterministic"),
        created_at=status.get("createdTime"),
        updated_at=status.get("lastUpdatedTime"),
        current_step_index=state.step_index if state else -1,
        plan=PlanView(status=plan_status(runtime, state)),
        steps=steps,
        waiting=waiting_view(waiting, str(status.get("instanceId"))) if waiting else None,
        usage=_usage(state),
        cost=view_cost(history, status.get("createdTime"), parts=parts),  # every meter (shared/runtime/ledger.py)
        quote=_quote(state, job_input),  # what it may cost, before it spent (shared/jobs/quote.py)
        agent=_agent(request, state),
        run=_with_run_facts(_run(job_input, output), job_input, history),
        # What the job was asked with besides its question: enough to start it again with other limits.
        request={k: request.get(k) for k in ("constraints", "approval", "wait", "tools", "agent") if k in request},
        forked_from=_forked_from(job_input),
        answer=answer,
        answers=[ReceivedAnswer.model_validate(a) for a in answers_received(history)],
        error=_view_error(runtime, state, output, steps),
        log=log,
        links=links,
        history_purged_after=history_purged_after(status.get("createdTime"), runtime, retention_days),
    )


def _quote(state: JobState | None, job_input: Any) -> dict[str, Any] | None:
    """The job's quote: after planning (the state's), or a run's made before it started (its input's)."""
    if state is not None and state.quote is not None:
        return state.quote.model_dump(mode="json")
    made = job_input.get("quote") if isinstance(job_input, dict) else None
    return made if isinstance(made, dict) else None


def waiting_view(waiting: Waiting, job_id: str = "") -> WaitingView:
    """The question as the view shows it, with ``form``: what kind of question it is, so a UI draws it as such.

    ``sql``: approve an SQL statement (``details.sql``); ``code``: approve Python code (``details.code``);
    ``step_error``: a step failed, retry/skip/edit; ``text``: a question answered in words (options are
    suggestions); ``choice``: pick one of ``options`` (a workflow's human node, approve/reject included).
    """
    details = waiting.details
    form: WaitingForm
    if waiting.kind == "error":
        form = "step_error"
    elif waiting.kind == "approval" and isinstance(details.get("code"), str):
        form = "code"
    elif waiting.kind == "approval" and "sql" in details:
        form = "sql"
    elif waiting.free_text:
        form = "text"
    else:
        form = "choice"
    shown = WaitingView.model_validate(waiting.model_dump(mode="json") | {"form": form})
    if waiting.instance and job_id and waiting.instance.startswith(f"{job_id}:"):
        # The part of the run that asks (a branch's node; a sub-workflow's node and its run number), so a client
        # names it without taking instance ids apart.
        shown.asked_in = waiting.instance.removeprefix(f"{job_id}:").split(":")
    return shown


def _forked_from(job_input: Any) -> ForkedFrom | None:
    """A fork's origin: the job and the step it re-ran from (None for a job that is no fork)."""
    fork = job_input.get("fork") if isinstance(job_input, dict) else None
    if not isinstance(fork, dict):
        return None
    return ForkedFrom(job=fork.get("origin"), step=fork.get("from_step"), input=fork.get("input"))


def _run(job_input: Any, output: Any) -> RunView | None:
    """A workflow or team run: what it runs (kind, id, pinned version) and, once done, its named outputs."""
    run = job_input.get("run") if isinstance(job_input, dict) else None
    if not isinstance(run, dict):
        return None
    outputs = output.get("outputs") if isinstance(output, dict) else None
    view = RunView(kind=run.get("kind"), id=run.get("id"), version=run.get("version"), outputs=outputs)
    if isinstance(run.get("limits"), dict):
        view.limits = run["limits"]  # the run's total-work budget (docs/definitions.md, "Run limits")
    return view


def _with_run_facts(view: RunView | None, job_input: Any, history: list[dict[str, Any]]) -> RunView | None:
    """A run's view with its inputs and its ``graph``: the workflow's nodes as the run loaded them.

    The graph is the root's ``load_definition`` result, so the run is drawn as it ran even when the definition
    changed since; None for a team or before it is loaded.
    """
    run = job_input.get("run") if isinstance(job_input, dict) else None
    if view is None or not isinstance(run, dict):
        return view
    inputs = run.get("inputs")
    view.inputs = inputs if isinstance(inputs, dict) else {}
    view.graph = _run_graph(run, history)
    return view


def _run_graph(run: dict[str, Any], history: list[dict[str, Any]]) -> RunGraph | None:
    """The nodes (and start) of the workflow a run loaded for itself, from the history; None when there are none."""
    if run.get("kind") != "workflow":
        return None
    for event in history:
        if event.get("EventType") != "TaskCompleted" or event.get("FunctionName") != LOAD_DEFINITION:
            continue
        inp = decode(event.get("Input"))
        if not isinstance(inp, dict) or (inp.get("kind"), inp.get("id")) != ("workflow", run.get("id")):
            continue
        definition = decode(event.get("Result"))
        if isinstance(definition, dict) and isinstance(definition.get("nodes"), list):
            return RunGraph(nodes=definition["nodes"], start=definition.get("start"))
    return None


def _steps(state: JobState | None, runtime: Any, history: list[dict[str, Any]]) -> list[StepView]:
    """The steps as the view shows them: brief ones filled from the history, outputs, an agent step's calls."""
    if state is None:
        return []
    outputs, drafts = step_outputs(history)
    if any(step.carried_from for step in state.steps):
        outputs = {**carried_outputs(history), **outputs}  # a fork's carried steps: results from its base
    if any(not step.title for step in state.steps):
        facts = brief_step_facts(history, {step.id for step in state.steps if not step.title})
        state.steps = [_fill_brief(step, facts.get(step.id)) if not step.title else step for step in state.steps]
    steps = [_step_entry(step, runtime, outputs, drafts) for step in state.steps]
    agent_steps = {step.id for step in steps if step.kind == AGENT_STEP}
    if agent_steps:
        for entry_id, calls in agent_step_calls(history, agent_steps).items():
            entry = next(e for e in steps if e.id == entry_id)
            entry.tool_calls = [ToolCallView.model_validate(call) for call in calls]
    return steps


def _code_kinds() -> set[str]:
    """Step kinds that run code and keep the files it wrote (run_python, and an agent's python.run calls)."""
    from shared.tools.python import PYTHON_TOOL

    return kinds_where(lambda spec: spec.runs_code) | {PYTHON_TOOL}


def _artifact_refs(files: list[Any]) -> list[ArtifactView]:
    """The well-formed artifact references of a code step's result; anything else is not shown."""
    from pydantic import ValidationError

    from shared.runtime.artifacts import ArtifactRef

    refs: list[ArtifactView] = []
    for item in files:
        try:
            refs.append(ArtifactView.model_validate(ArtifactRef.model_validate(item).model_dump()))
        except ValidationError:
            continue
    return refs


def answer_claims(steps: list[StepView]) -> dict[str, Any]:
    """The answer's claims as the answer step checked them (shared/jobs/claims.py), or nothing."""
    for step in reversed(steps):
        out = step.output
        if step.kind == "generate_response" and isinstance(out, dict) and out.get("claims_summary"):
            return {"claims": out.get("claims") or [], "claims_summary": out["claims_summary"]}
    return {}


def _streams_now(entry: StepView) -> bool:
    """A step whose answer is being written now, with no result in the history yet."""
    return entry.state == "running" and entry.kind in _streaming_kinds() and "output" not in entry.model_fields_set


def _step_entry(
    step: StepState, runtime: Any, outputs: dict[str, dict[str, Any]], drafts: dict[str, dict[str, Any]]
) -> StepView:
    """One step as the view shows it: its state in words, its duration without human waits, its output."""
    entry = StepView.model_validate(step.model_dump(mode="json", exclude_none=True))
    if runtime in ("Terminated", "Canceled") and step.state in ("running", "retrying", "waiting"):
        entry.state = "cancelled"
    if entry.state == "retrying":
        entry.message = retry_message(step.retry_at, step.next_attempt, step.max_attempts)
    elif entry.state == "skipped" and step.note:
        entry.message = f"did not run: {step.note}"
    if step.carried_from:
        # A fork's step carried over: its result, timings and usage are the origin's, not the fork's.
        entry.carried_over = True
        entry.message = f"carried over from job {step.carried_from}"
    # A human wait is shown as waited_ms and is not part of the step's duration.
    run_ms = ms_between(step.started_at, step.ended_at)
    if run_ms is not None:
        entry.duration_ms = max(0, run_ms - step.waited_ms)
    # The orchestrator's state decides: a result already in the history shows once the step has taken it
    # (calls of one agent turn run together, and the turn goes on when all of them are back).
    if step.id in outputs and step.state != "running":
        entry.output = outputs[step.id]
        # Files a step wrote (run_python): references only; GET /api/jobs/{id}/artifacts/{ref} serves the bytes.
        # Only a code step's files are artifacts: another result's "files" is data (a tool's, a model's).
        files = outputs[step.id].get("files")
        refs = _artifact_refs(files) if step.kind in _code_kinds() and isinstance(files, list) else []
        if refs:
            entry.artifacts = refs
    if step.id in drafts:
        entry.draft = drafts[step.id]
    return entry


def _view_error(runtime: Any, state: JobState | None, output: Any, steps: list[StepView]) -> ErrorView | None:
    """The job's error: the one it recorded, or the orchestration's own failure."""
    if runtime != "Failed":
        if state is None or state.error is None:
            return None
        # With ``limit`` when a run limit was reached.
        return ErrorView.model_validate(state.error.model_dump(mode="json"))
    return ErrorView(
        code="ORCHESTRATION_FAILED",
        message=str(output)[:600],
        step_id=steps[state.step_index].id if state and 0 <= state.step_index < len(steps) else None,
    )


def _agent(request: dict[str, Any], state: JobState | None) -> AgentView | None:
    """Agent mode: the Executor's turns and tool calls so far against the job's bounds (None in other modes)."""
    if request.get("mode") != "agent":
        return None
    limits = AgentLimits.model_validate(request.get("agent") or {})
    steps = state.steps if state else []
    return AgentView(
        turns=state.turns if state else 0,
        max_turns=limits.max_turns,
        tool_calls=sum(1 for s in steps if s.turn is not None),
        max_tool_calls=limits.max_tool_calls,
    )


def _usage(state: JobState | None) -> UsageView:
    """Tokens and cost: the job's total, planning, the Supervisor, the Executor's turns, and each step."""
    if state is None:
        return UsageView(total=None, planning=None, supervisor=None, executor=None, by_step={})
    # Dumped and read back, so every field of each usage is set (and shown).
    return UsageView.model_validate(
        {
            "total": state.usage.model_dump(mode="json"),
            "planning": state.plan_usage.model_dump(mode="json"),
            "supervisor": state.supervisor_usage.model_dump(mode="json"),
            # Agent mode: the Executor's turns, apart from the tool calls (their usage is by_step).
            "executor": state.executor_usage.model_dump(mode="json"),
            "by_step": {s.id: s.usage.model_dump(mode="json") for s in state.steps},
            # A fork: what its carried-over steps used in the origin (not part of ``total``, the fork's own).
            "carried_over": (state.carried_over or Usage()).model_dump(mode="json"),
        }
    )


def history_purged_after(created: Any, runtime: Any, retention_days: float | None) -> str | None:
    """When the retention timer may purge a finished job (api/maintenance.py); None while it runs."""
    if retention_days is None or runtime not in TERMINAL_RUNTIME or not isinstance(created, str):
        return None
    from datetime import UTC, datetime

    from api.maintenance import purge_after

    try:
        moment = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return purge_after(moment, retention_days).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _streaming_kinds() -> set[str]:
    """The step kinds whose running text the view previews (from the registry)."""
    return kinds_where(lambda spec: spec.streams)
