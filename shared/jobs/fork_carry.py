"""What a fork carries of the work its origin's orchestrator did itself, rebuilt from the origin's history.

An activity's result is in the history as it is; some results are not: the orchestrator makes them from
several records. This module rebuilds them, a pure function of the committed history, the same way the
origin's orchestrator made them:

- a person's answer to an ``ask_user`` step (the answer event that ended its wait, or the default it expired
  to): carried as a *result* (the text the later steps are given), never as a permission;
- an agent loop (a planned job's ``agent`` step, a workflow's agent node): its turns (from the ``agent_turn``
  results), its calls ``<step>-t<n>`` and what its lookups found;
- a sub-workflow node's result (its sub-orchestration's completion) and a loop node's iteration count;
- the plan in force at a step of a hybrid job the Supervisor changed (replans, a switched tool), from the
  plan results and the plan each Supervisor call was shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from shared.jobs.contracts import Usage
from shared.jobs.durable_json import decode
from shared.jobs.models import UserAnswer
from shared.jobs.plan import Plan, PlanStep, replanned_steps

AGENT_TURN = "agent_turn"
CALL_TOOL = "call_tool"
PLAN = "plan"
SUPERVISE = "supervise"
FORMAT_OUTPUT = "format_output"
GET_JOB_STATE = "get_job_state"
REQUEST_USER_FEEDBACK = "request_user_feedback"
ITERATIONS = re.compile(r"^(\d+) iterations$")


def task_ref(event: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The step id an activity event belongs to (from its task id ``<job>:<step>:<attempt>``) and its input."""
    inp = decode(event.get("Input"))
    if not isinstance(inp, dict):
        return None, {}
    parts = str(inp.get("task_id", "")).rsplit(":", 2)
    return (parts[1] if len(parts) == 3 else None), inp


def answer_text(raw: Any) -> str | None:
    """The text an answer event gave (as the orchestrator takes it: the option chosen, or the JSON of an object)."""
    import json

    raw = decode(raw)
    try:
        reply = UserAnswer.model_validate(raw) if isinstance(raw, dict) and "answer" in raw else UserAnswer(answer=raw)
    except ValidationError:
        return None
    return reply.action() if isinstance(reply.answer, str) else json.dumps(reply.answer)


def answer_action(raw: Any) -> str | None:
    """The option an answer event chose (``UserAnswer.action``: an edit object's action), as a Supervisor's
    clarifying question takes it."""
    raw = decode(raw)
    try:
        reply = UserAnswer.model_validate(raw) if isinstance(raw, dict) and "answer" in raw else UserAnswer(answer=raw)
    except ValidationError:
        return None
    return reply.action()


def human_answers(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The last answer each step's question got (``answer:<step>-q<n>``): the one that ended its wait."""
    answers: dict[str, Any] = {}
    for event in history:
        name = str(event.get("Name") or "")
        if event.get("EventType") != "EventRaised" or not name.startswith("answer:"):
            continue
        node, sep, number = name.removeprefix("answer:").rpartition("-q")
        if sep and number.isdigit():
            answers[node] = decode(event.get("Input"))
    return answers


def ask_user_output(step_id: str, step_input: dict[str, Any], answers: dict[str, Any]) -> dict[str, Any] | None:
    """An ask_user step's result: the answer that ended its wait, else the default its wait expired to."""
    if step_id in answers:
        text = answer_text(answers[step_id])
        return None if text is None else {"answer": text}
    options = step_input.get("options")
    if isinstance(options, list) and options and isinstance(options[0], str):
        return {"answer": options[0]}  # no answer came: the wait expired to its default (the first option)
    return None


def _parent(call_id: Any) -> tuple[str, int] | None:
    parent, sep, number = str(call_id or "").rpartition("-t")
    return (parent, int(number)) if sep and parent and number.isdigit() else None


def agent_loops(history: list[dict[str, Any]], owners: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The Executor turns (their task and result) of each agent step or node in ``owners`` (in the order they ran).

    A turn given a transcript belongs to the step its last record ran as (``<step>-t<n>``); a first turn (an
    empty transcript) to the owner of the next call or answer of one of ``owners``, else to the next owner
    without turns.
    """
    loops: dict[str, list[dict[str, Any]]] = {o: [] for o in owners}
    pending: list[dict[str, Any]] = []

    def flush(owner: str | None) -> None:
        if owner is None:
            owner = next((o for o in owners if not loops[o]), None)
        if owner is not None and owner in loops:
            loops[owner].extend(pending)
        pending.clear()

    for event in history:
        if event.get("EventType") not in ("TaskCompleted", "TaskFailed"):
            continue
        step_id, inp = task_ref(event)
        if event.get("FunctionName") == AGENT_TURN:
            task = inp.get("task") if isinstance(inp.get("task"), dict) else {}
            result = decode(event.get("Result"))
            turn = {"task": task, "result": result if isinstance(result, dict) else {}}
            transcript = task.get("transcript") if isinstance(task, dict) else None
            last = transcript[-1] if isinstance(transcript, list) and transcript else None
            ref = _parent(last.get("step")) if isinstance(last, dict) else None
            if ref is not None and ref[0] in loops:
                flush(ref[0])
                loops[ref[0]].append(turn)
            else:
                pending.append(turn)
            continue
        if not pending or step_id is None:
            continue
        ref = _parent(step_id)
        if ref is not None and ref[0] in loops:
            flush(ref[0])
        elif step_id in loops:
            flush(step_id)
        elif step_id not in (PLAN, SUPERVISE):
            flush(None)
    if pending:
        flush(None)
    return loops


def turns_usage(loops: dict[str, list[dict[str, Any]]]) -> Usage:
    """What the turns of these agent loops used (every attempt, as the origin counted it)."""
    total = Usage()
    for turns in loops.values():
        for turn in turns:
            try:
                total = total + Usage.model_validate(turn["result"].get("usage") or {})
            except ValidationError:
                continue
    return total


def agent_calls(
    owner: str,
    turns: list[dict[str, Any]],
    max_tool_calls: int,
    outputs: dict[str, dict[str, Any]],
    kinds: dict[str, str],
    answers: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[str]]:
    """An agent loop's calls as its output lists them (``{id, tool, success}``) and the ids of its lookups.

    The calls are numbered as the loop opened them (``<owner>-t<n>``: every call a turn asked for before
    ``format_output``, within ``max_tool_calls``); a call succeeded when its activity's result is recorded (a
    lookup, a family tool, python), a person answered it (request_user_feedback), or it read the job's state.
    """
    calls: list[dict[str, Any]] = []
    lookups: list[str] = []
    for turn in turns:
        result = turn["result"]
        if result.get("status") == "failed" or not isinstance(result.get("result"), dict):
            continue
        for call in result["result"].get("tool_calls") or []:
            if not isinstance(call, dict) or call.get("tool") == FORMAT_OUTPUT or len(calls) >= max_tool_calls:
                break
            step_id = f"{owner[:24]}-t{len(calls) + 1}"
            tool = str(call.get("tool", ""))
            if tool == GET_JOB_STATE:
                success = True
            elif tool == REQUEST_USER_FEEDBACK:
                success = step_id in answers
            else:
                success = step_id in outputs
            if success and step_id in kinds and kinds[step_id] != CALL_TOOL:
                lookups.append(step_id)  # a lookup or python: what it found is one of the loop's sources
            calls.append({"id": str(call.get("id", "")), "tool": tool, "success": success})
    return calls, lookups


def agent_step_output(
    owner: str,
    turns: list[dict[str, Any]],
    max_tool_calls: int,
    outputs: dict[str, dict[str, Any]],
    kinds: dict[str, str],
    answers: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A planned job's agent step result (as ``AgentLoop.work_step`` returns it) and its lookups' results."""
    calls, lookups = agent_calls(owner, turns, max_tool_calls, outputs, kinds, answers)
    numbers = {str((t["task"] or {}).get("turns_left")) for t in turns}
    question = next((str(t["task"].get("question", "")) for t in turns if t["task"].get("question")), "")
    reasoning = [
        str(t["result"]["result"].get("reasoning"))[:2000]
        for t in turns
        if t["result"].get("status") != "failed"
        and isinstance(t["result"].get("result"), dict)
        and t["result"]["result"].get("reasoning")
    ]
    found = {step_id: outputs[step_id] for step_id in lookups}
    output = {
        "question": question,
        "turns": len(numbers),
        "reasoning": reasoning,
        "tool_calls": calls,
        "parts": list(found.values()),
    }
    return output, found


def agent_node_output(
    owner: str,
    turns: list[dict[str, Any]],
    max_tool_calls: int,
    outputs: dict[str, dict[str, Any]],
    kinds: dict[str, str],
    answers: dict[str, Any],
) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """A workflow agent node's output before its schema is applied (``text``, ``citations``, ``tool_calls``), from
    its answer's result (recorded as the node's own step), and its lookups' results; None without an answer."""
    answer = outputs.get(owner)
    if answer is None:
        return None, {}
    calls, lookups = agent_calls(owner, turns, max_tool_calls, outputs, kinds, answers)
    text = str(answer.get("answer") or "")
    output = {"text": text, "citations": answer.get("citations", []), "tool_calls": calls}
    return output, {step_id: outputs[step_id] for step_id in lookups}


def sub_workflow_results(history: list[dict[str, Any]], job_id: str) -> dict[str, dict[str, Any]]:
    """The part result of each sub-workflow node (sub-orchestrations ``<job>:<node>:<n>``), the last by node."""
    found: dict[str, dict[str, Any]] = {}
    for event in history:
        if event.get("EventType") != "SubOrchestrationInstanceCompleted":
            continue
        child = decode(event.get("Input"))
        result = decode(event.get("Result"))
        if not isinstance(child, dict) or not isinstance(result, dict):
            continue
        run = child.get("run")
        if not isinstance(run, dict) or run.get("part") is not None:
            continue  # a parallel branch
        prefix, _, rest = str(child.get("job_id", "")).partition(":")
        node, sep, number = rest.rpartition(":")
        if prefix == job_id and sep and number.isdigit():
            found[node] = result
    return found


def loop_iterations(tool_output: str | None) -> int | None:
    """How many times a loop node ran its body, as its step recorded it (``"<n> iterations"``)."""
    match = ITERATIONS.match(tool_output or "")
    return int(match.group(1)) if match else None


def definitions(history: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every definition the run loaded (``load_definition``: its input and its result), in order."""
    loaded = []
    for event in history:
        if event.get("EventType") != "TaskCompleted" or event.get("FunctionName") != "load_definition":
            continue
        inp, result = decode(event.get("Input")), decode(event.get("Result"))
        if isinstance(inp, dict) and isinstance(result, dict):
            loaded.append((inp, result))
    return loaded


def plan_at(
    history: list[dict[str, Any]],
    from_step: str,
    ran: set[str],
    writes_answer: Callable[[str], bool],
    initial: list[PlanStep] | None = None,
    replans: int = 0,
) -> tuple[Plan | None, int]:
    """A hybrid job's plan as it was when ``from_step`` started, and how many replans it had then.

    The first plan result, changed by each replan (applied after the step the Supervisor looked at) made
    before that step; each Supervisor call's input holds the whole plan as it was then (a switched tool
    included). ``ran``: the steps that succeeded (a replan keeps them as the new answer's sources). A fork
    starts from ``initial`` (its base's plan) with its base's ``replans``.
    """
    steps = list(initial) if initial is not None else None
    supervised: str | None = None
    for event in history:
        if event.get("EventType") != "TaskCompleted":
            continue
        step_id, inp = task_ref(event)
        if inp.get("executor_type") == SUPERVISE:
            task = inp.get("task") if isinstance(inp.get("task"), dict) else {}
            shown = task.get("plan") if isinstance(task, dict) else None
            step = task.get("step") if isinstance(task, dict) else None
            if not isinstance(shown, list) or not isinstance(step, dict):
                continue
            try:
                steps = [PlanStep.model_validate(s) for s in shown]
            except ValidationError:
                return None, replans
            supervised = str(step.get("id"))
            ids = [s.id for s in steps]
            if from_step in ids and supervised in ids and ids.index(from_step) <= ids.index(supervised):
                return Plan(steps=steps), replans  # what the Supervisor did from here on is after the fork point
            if supervised in ids and _asks(decode(event.get("Result"))):
                # Its question's answer goes to every later step: they depend on the step it asked about.
                at = ids.index(supervised)
                steps = steps[: at + 1] + [
                    later if supervised in later.depends_on
                    else later.model_copy(update={"depends_on": [*later.depends_on, supervised]})
                    for later in steps[at + 1 :]
                ]  # fmt: skip
            continue
        result = decode(event.get("Result"))
        if step_id != PLAN or not isinstance(result, dict) or result.get("status") == "failed":
            continue
        try:
            planned = Plan.model_validate(result.get("result"))
        except ValidationError:
            return None, replans
        if steps is None:
            steps = list(planned.steps)
            continue
        ids = [s.id for s in steps]
        if supervised not in ids:
            return None, replans
        index = ids.index(supervised)
        replans += 1
        kept = [s.id for s in steps[: index + 1] if s.id in ran]
        steps = steps[: index + 1] + replanned_steps(planned.steps, kept, f"r{replans}", writes_answer)
    return (Plan(steps=steps) if steps is not None else None), replans


def _asks(result: Any) -> bool:
    """Whether a Supervisor call's result is a clarifying question it asked (a valid ask_user with a question)."""
    decision = result.get("result") if isinstance(result, dict) and result.get("status") != "failed" else None
    return isinstance(decision, dict) and decision.get("action") == "ask_user" and bool(decision.get("question"))


def supervisor_answers(history: list[dict[str, Any]], expiry_default: bool) -> dict[str, str]:
    """A hybrid job's answers to the Supervisor's clarifying questions, by the step the Supervisor looked at.

    The Supervisor asks after a step ended (a valid ``ask_user`` decision with a question); the answer raised
    for that step's question before the job goes on is the reply (the orchestrator adds it to the question of the
    steps after it). No answer: the first option when the job's waits expire to their default, else nothing.
    """
    found: dict[str, str] = {}
    asked: tuple[str, list[Any]] | None = None
    for event in history:
        kind = event.get("EventType")
        if kind == "EventRaised" and asked is not None:
            name = str(event.get("Name") or "")
            node, sep, _ = name.removeprefix("answer:").rpartition("-q")
            if name.startswith("answer:") and sep and node == asked[0]:
                text = answer_action(event.get("Input"))
                if text is not None:
                    found[node] = text
                    asked = None
            continue
        if kind not in ("TaskScheduled", "TaskCompleted"):
            continue
        if asked is not None and kind == "TaskCompleted":
            # The job went on without an answer event: the wait expired.
            options = asked[1]
            if expiry_default and options and isinstance(options[0], str):
                found[asked[0]] = options[0]
            asked = None
        if kind != "TaskCompleted":
            continue
        _, inp = task_ref(event)
        if inp.get("executor_type") != SUPERVISE:
            continue
        result = decode(event.get("Result"))
        task = inp.get("task") if isinstance(inp.get("task"), dict) else {}
        step = task.get("step") if isinstance(task, dict) else None
        if _asks(result) and isinstance(step, dict):
            asked = (str(step.get("id")), list(result["result"].get("options") or []))
    if asked is not None and expiry_default and asked[1] and isinstance(asked[1][0], str):
        found[asked[0]] = asked[1][0]
    return found
