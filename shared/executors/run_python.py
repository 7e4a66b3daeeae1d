"""run_python: model-written Python over earlier steps' outputs, in the configured sandbox (a step kind).

The code and the names of its inputs come from the plan, the Executor or a user's edit (untrusted); the
input values, whether the job allows the tool, the draft mode of the approval policy and the sandbox time
left come from the execution context, which only the orchestrator writes. Bad code is a failed step with
the error's last lines (TOOL_ERROR), a machine that cannot isolate is CONFIG_ERROR: nothing runs bare.
Files the code wrote go to the artifact store; the result holds only their references.
"""

from __future__ import annotations

import base64
import json
import re
from typing import TYPE_CHECKING, Any

from shared.executors import register
from shared.jobs.contracts import ErrorCode, ExecutorInput, ExecutorOutput, ProviderError, Usage
from shared.runtime.artifacts import ArtifactRef, ArtifactStore, get_artifact_store, make_ref
from shared.sandbox.base import SandboxFile, SandboxLimits, SandboxRequest, SandboxResult, SandboxUnavailable
from shared.tools.python import PYTHON_TOOL, RUN_PYTHON, RunPythonInput, build_sandbox

if TYPE_CHECKING:
    from shared.providers.clients import Clients

# What a step result keeps of stdout and of the result value (Durable payloads stay small).
MAX_STDOUT_CHARS = 8_000
MAX_RESULT_CHARS = 16_000
# Media types by extension; anything else is served as bytes to download. Never taken from the code.
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
    ".csv": "text/csv",
    ".txt": "text/plain",
    ".json": "application/json",
}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@register(
    RUN_PYTHON,
    description=(
        "Run Python in an isolated sandbox over earlier steps' outputs (named inputs: variable -> step id, "
        "e.g. SQL rows as a table) to compute numbers (growth rates, shares, statistics) or draw a chart (PNG). "
        "Only in jobs that allow the python.run tool."
    ),
    uses_llm=False,
    input_model=RunPythonInput,
    runs_code=True,
)
def run_python(inp: ExecutorInput, clients: Clients) -> ExecutorOutput:
    """Run the step's code in the sandbox and return stdout, result, file references and sandbox time."""
    task = RunPythonInput.model_validate(inp.task)
    ctx = inp.execution_context
    refused = _refusal(task, inp)
    if refused is not None:
        return refused
    settings = clients.settings
    wall = settings.sandbox_wall_seconds
    if ctx.sandbox_seconds_left is not None:
        wall = min(wall, ctx.sandbox_seconds_left)
    if ctx.budget_cost_left is not None and settings.sandbox_price_per_hour > 0:
        # A money budget (max_estimated_cost, max_cost) bounds the sandbox time too: the run may use what is left.
        affordable = float(ctx.budget_cost_left) * 3600 / settings.sandbox_price_per_hour
        if affordable <= 0:
            return ExecutorOutput.failure(
                ErrorCode.BUDGET_EXCEEDED,
                f"no code ran: the job has {float(ctx.budget_cost_left):.6f} USD left; the meter that crosses it: "
                f"sandbox.{settings.sandbox_provider}.seconds",
            )
        wall = min(wall, affordable)
    request = SandboxRequest(code=task.code, inputs={name: ctx.python_inputs[name] for name in task.inputs})
    try:
        ran = build_sandbox(clients, ctx.job_id or "local").run(request, SandboxLimits(wall_seconds=wall))
    except SandboxUnavailable as exc:
        return ExecutorOutput.failure(
            ErrorCode.CONFIG_ERROR, f"the code sandbox is unavailable on this host, so no code ran: {exc}"
        )
    usage = Usage(estimated_cost=round(ran.wall_ms / 3_600_000 * settings.sandbox_price_per_hour, 8))
    result = _result(task, ran, settings.sandbox_provider)
    if ran.status != "ok":
        message = f"the code did not finish ({ran.status}): {ran.error or 'no error text'}"
        return ExecutorOutput.failure(ErrorCode.TOOL_ERROR, message[-2000:], usage=usage, result=result)
    files = [_safe_file(f, i) for i, f in enumerate(ran.files)]
    if ctx.python_mode == "draft":
        # Nothing is kept before a human approves: the policy only learns what the code would write.
        result["files_written"] = [{"name": n, "media_type": t, "size": len(d)} for n, t, d in files]
        result["draft"] = True
        return ExecutorOutput(status="success", result=result, usage=usage)
    result["files"] = _store(inp, files, get_artifact_store(settings)) if files else []
    return ExecutorOutput(status="success", result=result, usage=usage)


def _refusal(task: RunPythonInput, inp: ExecutorInput) -> ExecutorOutput | None:
    """The executor's own barriers: the job allows the tool, every input was resolved, time is left."""
    ctx = inp.execution_context
    if PYTHON_TOOL not in ctx.allowed_tools:
        return ExecutorOutput.failure(
            ErrorCode.INVALID_INPUT, f"this job does not allow {PYTHON_TOOL}, so no code may run in it"
        )
    missing = sorted(set(task.inputs) - set(ctx.python_inputs))
    if missing:
        return ExecutorOutput.failure(
            ErrorCode.INVALID_INPUT, f"input {missing[0]!r} ({task.inputs[missing[0]]}) has no resolved value"
        )
    if ctx.sandbox_seconds_left is not None and ctx.sandbox_seconds_left <= 0:
        return ExecutorOutput.failure(ErrorCode.BUDGET_EXCEEDED, "the job's sandbox time budget is spent")
    return None


def _result(task: RunPythonInput, ran: SandboxResult, provider: str) -> dict[str, Any]:
    """The step result without files: bounded stdout and result value, and the sandbox time used."""
    stdout = ran.stdout
    cut = ran.stdout_truncated or len(stdout) > MAX_STDOUT_CHARS
    value, value_cut = _bounded(ran.result)
    return {
        "question": task.question,
        "inputs": dict(task.inputs),
        "stdout": stdout[-MAX_STDOUT_CHARS:],
        "stdout_truncated": cut,
        "result": value,
        "result_truncated": value_cut,
        "files": [],
        "sandbox": {"provider": provider, "status": ran.status, "wall_ms": ran.wall_ms, "cpu_ms": ran.cpu_ms},
    }


def _bounded(value: Any) -> tuple[Any, bool]:
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)[:MAX_RESULT_CHARS], True
    if len(text) <= MAX_RESULT_CHARS:
        return value, False
    return text[:MAX_RESULT_CHARS], True


def _safe_file(file: SandboxFile, index: int) -> tuple[str, str, bytes]:
    """A written file's name (its base name, safe characters only), media type (by extension) and bytes."""
    base = file.name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", base).strip("._")[:120] or f"file-{index}"
    dot = name.rfind(".")
    media_type = MEDIA_TYPES.get(name[dot:].lower(), "application/octet-stream") if dot >= 0 else ""
    try:
        data = base64.b64decode(file.data_b64, validate=True)
    except ValueError as exc:
        raise ProviderError(ErrorCode.UPSTREAM_ERROR, f"the sandbox returned {name!r} undecodable") from exc
    return name, media_type or "application/octet-stream", data


def _store(inp: ExecutorInput, files: list[tuple[str, str, bytes]], store: ArtifactStore) -> list[dict[str, Any]]:
    """Keep each file in the artifact store; the references go in the step result."""
    ctx = inp.execution_context
    refs: list[dict[str, Any]] = []
    for index, (name, media_type, data) in enumerate(files):
        ref = ArtifactRef(
            name=name, media_type=media_type, size=len(data), ref=make_ref(ctx.step_id or "step", ctx.attempt, index)
        )
        try:
            store.put(ctx.job_id or "", ref, data)
        except Exception as exc:
            raise ProviderError(ErrorCode.UPSTREAM_ERROR, f"the artifact store did not keep {name!r}: {exc}") from exc
        refs.append(ref.model_dump())
    return refs
