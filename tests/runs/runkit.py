"""Driving workflow and team runs inline: definitions by pinned version, scripted or real (offline) executors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devhost.durable.inline import InlineContext, run_inline
from orchestrators.job import job_orchestrator_body
from orchestrators.workflow import workflow_part_body
from shared.definitions.catalog import app_catalog
from shared.definitions.models import MODELS
from shared.definitions.validate import validate
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.runtime.settings import Settings
from tests.jobs.test_policy_inline import ok

OFFLINE = Clients(Settings(llm_provider="offline", search_provider="local", sql_provider="sqlite"))
DONE_TURN = ok({"reasoning": "nothing to look up", "tool_calls": [{"id": "c1", "tool": "format_output"}]})


def answer(text: str) -> dict[str, Any]:
    """An answer writer's output with this text."""
    return ok({"answer": text, "citations": []})


class Activities:
    """Activities of a run: load_definition from ``defs``, scripted outputs where given, else the real executors."""

    def __init__(
        self, defs: dict[tuple[str, str, int], dict[str, Any]], *, valid: bool = True, **scripted: list[dict[str, Any]]
    ) -> None:
        self.defs = defs
        if valid:  # what a run loads was saved, so it passed validation (unless a test says otherwise)
            check_saved(defs)
        self.scripted = {k: list(v) for k, v in scripted.items()}
        self.calls: list[tuple[str, Any]] = []

    def __call__(self, name: str, payload: Any) -> Any:
        self.calls.append((name, payload))
        if name == "load_definition":
            key = (payload["kind"], payload["id"], payload["version"])
            if key not in self.defs:
                raise LookupError(f"no {key}")
            # Through the model and back, as the store gives it (aliases: "from", "if", "else").
            return MODELS[key[0]].model_validate(self.defs[key]).model_dump(mode="json", by_alias=True)
        if name == "report_part":  # inline, parts run inside the root's call: nobody waits on the news
            return {"delivered": True}
        if name in self.scripted:
            return self.scripted[name].pop(0)
        return run_executor(payload, expected_type=name, clients=OFFLINE)

    def named(self, name: str) -> list[Any]:
        """The payloads of every call of one activity, in order."""
        return [p for n, p in self.calls if n == name]


def check_saved(table: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    """Every definition passes the validation the API runs on save (the app's catalog, the others as resolver)."""

    class Table:
        def find(self, kind: str, def_id: str, version: int | None) -> Any:
            versions = sorted(v for k, i, v in table if (k, i) == (kind, def_id))
            chosen = version if version in versions else (versions[-1] if versions and version is None else None)
            return None if chosen is None else MODELS[kind].model_validate(table[(kind, def_id, chosen)])

    catalog = app_catalog(OFFLINE.settings)
    for (kind, _id, _version), data in table.items():
        issues = validate(MODELS[kind].model_validate(data), Table(), catalog)
        assert not issues, [(i.path, i.code, i.message) for i in issues]


def defs(*definitions: dict[str, Any], version: int = 1) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Definitions keyed as the store keys them."""
    return {(d.get("kind", "workflow"), d["id"], version): d for d in definitions}


def start(
    acts: Activities,
    kind: str,
    def_id: str,
    *,
    version: int = 1,
    inputs: dict[str, Any] | None = None,
    pins: dict[str, int] | None = None,
    tools: list[str] | None = None,
    reply: Callable[[str], Any] | None = None,
    limits: dict[str, int] | None = None,
    policy: dict[str, Any] | None = None,
    **request: Any,
) -> tuple[dict[str, Any], InlineContext]:
    """Run a workflow or team to its end inline; its result and context (custom status, children)."""
    payload = {
        "job_id": "r1",
        "request": {"question": f"{kind} {def_id}", **request},
        "policy": {"max_attempts_per_model": 2, "first_retry_ms": 1, "max_retry_ms": 5, **(policy or {})},
        "run": {
            "kind": kind,
            "id": def_id,
            "version": version,
            "inputs": inputs or {},
            "pins": pins or {},
            "tools": tools or [],
            **({"limits": limits} if limits is not None else {}),
        },
    }
    ctx = InlineContext(payload, acts, reply, "r1", {"workflow_part": workflow_part_body})
    return run_inline(job_orchestrator_body, ctx), ctx


def steps(ctx: InlineContext) -> dict[str, dict[str, Any]]:
    """The run's steps by id, as the job view's custom status shows them."""
    return {s["id"]: s for s in ctx.custom_status["steps"]}
