"""The ``python`` tool family: one tool, ``python.run``, model-written Python in a sandbox (shared/sandbox).

A job runs code only when it allows ``python.run`` in its ``tools``; the API refuses the name when
``SANDBOX_PROVIDER=off``. The Executor calls it like any family tool, but the orchestrator works the call
itself, as a ``run_python`` step: it resolves the named inputs (earlier steps' outputs, by step id) and
applies the job's approval policy and sandbox budget, which a plain tool call could not. So ``invoke``
refuses to run: nothing reaches the sandbox except through that step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# Named in shared.jobs.agent (the orchestrator reads them there); re-exported for the tool's other users.
from shared.jobs.agent import PYTHON_TOOL as PYTHON_TOOL
from shared.jobs.agent import RUN_PYTHON as RUN_PYTHON
from shared.jobs.contracts import ErrorCode
from shared.tools import register_family
from shared.tools.base import Tool, ToolContext, ToolFailure, ToolSpec

if TYPE_CHECKING:
    from shared.providers.clients import Clients
    from shared.runtime.settings import Settings
    from shared.sandbox.base import Sandbox

FAMILY = "python"
INPUT_NAME = r"^[a-z][a-z0-9_]{0,31}$"
STEP_REF = r"^[a-z0-9_-]{1,32}$"
# Names the sandbox itself defines for the code.
RESERVED = frozenset({"inputs", "result"})

CODE_HELP = (
    "Python 3 run in an isolated sandbox with no network. Each name in `inputs` is a variable holding that "
    "step's output: SQL rows as a pandas DataFrame when pandas is available, else a list of dicts (one per row); "
    "another run_python step's `result` as it was. Set a variable named `result` (JSON values) to return a "
    "value; print() goes to stdout; files written to the current directory (PNG charts, CSV) are returned as "
    "the step's artifacts."
)


class RunPythonInput(BaseModel):
    """What a plan, the Executor or a user's edit may set for a run_python step (nothing else)."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=500, description="What the code computes or draws, in a sentence.")
    code: str = Field(
        min_length=1, max_length=20_000, description=CODE_HELP, json_schema_extra={"contentMediaType": "text/x-python"}
    )
    inputs: dict[
        Annotated[str, StringConstraints(pattern=INPUT_NAME)],
        Annotated[str, StringConstraints(pattern=STEP_REF)],
    ] = Field(
        default_factory=dict,
        max_length=8,
        description="Variable name -> id of an earlier step (or tool call) whose output the code reads.",
    )

    @field_validator("inputs")
    @classmethod
    def _not_reserved(cls, value: dict[str, str]) -> dict[str, str]:
        taken = sorted(set(value) & RESERVED)
        if taken:
            raise ValueError(f"input name {taken[0]!r} is reserved inside the sandbox")
        return value


class PythonTool(Tool):
    """``python.run``: offered to the Executor with the run_python input schema; run as a step, never here."""

    def __init__(self) -> None:
        self.spec = ToolSpec(
            name=PYTHON_TOOL,
            family=FAMILY,
            description=(
                "Run Python over earlier results (by step or tool call id) to compute numbers or draw a chart; "
                "returns stdout, `result` and the files written."
            ),
            input_schema=_schema(),
            timeout_s=240.0,
            input_model=RunPythonInput,
        )

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Refuse: the orchestrator runs python.run as a run_python step, with its inputs and policy."""
        raise ToolFailure(
            ErrorCode.INVALID_INPUT, "python.run runs as a run_python step of the job, not as a plain tool call"
        )


def _schema() -> dict[str, Any]:
    schema = RunPythonInput.model_json_schema()
    schema.pop("title", None)
    return schema


@register_family(FAMILY)
def load(settings: Settings) -> list[Tool]:
    """python.run, unless SANDBOX_PROVIDER=off."""
    return [] if settings.sandbox_provider == "off" else [PythonTool()]


def build_sandbox(clients: Clients, job_id: str) -> Sandbox:
    """The configured sandbox; SandboxUnavailable when none may run (callers map it to CONFIG_ERROR).

    On Azure the session pool's credential and TLS trust come from the client factory (tests inject theirs).
    """
    from shared.sandbox.base import SandboxUnavailable

    settings = clients.settings
    if settings.sandbox_provider == "off":
        raise SandboxUnavailable("SANDBOX_PROVIDER=off: this app runs no code")
    if settings.sandbox_provider == "azure_sessions":
        from shared.sandbox.azure_sessions import AzureSessionsSandbox

        return AzureSessionsSandbox.from_settings(
            settings, job_id, clients.sandbox_credential, verify=clients.sandbox_tls
        )
    from shared.sandbox.local import LocalSandbox

    return LocalSandbox()
