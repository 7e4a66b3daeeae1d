"""The definitions API: list, get (with versions), create, update and delete agents, workflows and teams.

Thin handlers over ``shared.definitions``: the body is parsed and validated there (every problem with its
path and a stable code: 400 ``INVALID_DEFINITION``; over the size limit 413 ``PAYLOAD_TOO_LARGE``), saved
as a new immutable version in the table store, and shown with its versions. Auth and ownership are the
job API's: the function key, or with Easy Auth the principal, who sees only what they created (admins
everything). Delete archives, and is refused while runs are in flight or another definition names it. Built-in
definitions (the workflow ``ask``) are listed and shown read-only; writes to their ids are 409 ``DEFINITION_BUILT_IN``.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import azure.durable_functions as df
import azure.functions as func

from api.auth import Caller
from api.common import (
    STORE_STATUS,
    Visible,
    definition_store,
    in_store,
    int_param,
    read_json_body,
    request_caller,
    route_auth_level,
    visible_head,
)
from api.contract.bodies import Archived, DefinitionList, DefinitionView, dump_body
from api.errors import ApiError, guarded, json_response
from shared.definitions.issues import DefinitionInvalid, DefinitionTooLarge
from shared.definitions.models import MAX_DEFINITION_BYTES, Definition
from shared.definitions.store import DefinitionStore, Head, Owner, StoreError

T = TypeVar("T")
PLURALS = {"agents": "agent", "workflows": "workflow", "teams": "team"}
# The raw body may be pretty-printed: twice the stored limit, then the definition itself is measured.
MAX_BODY_BYTES = 2 * MAX_DEFINITION_BYTES
# Built-in definitions: listed and shown read-only, never stored; their ids cannot be created, changed or deleted.
# ``ask`` is today's question -> plan -> steps job; its inputs are the ones POST /api/workflows/ask/runs checks.
BUILT_INS: dict[str, dict[str, dict[str, Any]]] = {
    "workflows": {
        "ask": {
            "id": "ask",
            "name": "Ask",
            "description": "Built in: today's question -> plan -> steps job (mode: deterministic, hybrid or agent).",
            "inputs": {
                "question": {"type": "string", "description": "the question, 1-2000 characters"},
                "mode": {"type": "string", "required": False, "default": "deterministic"},
            },
        }
    }
}


def _read_body(req: func.HttpRequest) -> Any:
    # Definitions may be larger than a job request (their own limit, MAX_DEFINITION_BYTES, is checked later).
    return read_json_body(req, MAX_BODY_BYTES)


def _checked(kind: str, body: Any, store: DefinitionStore, caller: Caller) -> Definition:
    """Parse and validate a definition against the caller's definitions and the app; 400 / 413 with every problem."""
    from shared.definitions.catalog import app_catalog
    from shared.definitions.validate import check
    from shared.runtime.settings import get_settings

    try:
        definition, _text = check(kind, body, Visible(store, caller), app_catalog(get_settings()))
    except DefinitionTooLarge as exc:
        raise ApiError(413, "PAYLOAD_TOO_LARGE", str(exc)) from exc
    except DefinitionInvalid as exc:
        first = exc.issues[0]
        more = f" (and {len(exc.issues) - 1} more problem(s), see errors)" if len(exc.issues) > 1 else ""
        raise ApiError(
            400,
            "INVALID_DEFINITION",
            f"{first.message}{more}",
            field=first.path or None,
            errors=[issue.as_dict() for issue in exc.issues],
        ) from exc
    return definition


def _owner(caller: Caller) -> Owner | None:
    who = caller.principal
    return Owner(who.id, who.name) if who else None


async def _view(store: DefinitionStore, head: Head, version: int | None = None) -> dict[str, Any]:
    """A definition as the API shows it: one version (the latest by default) and the list of versions."""
    chosen = version or head.latest
    definition = await in_store(store.get_version, head.kind, head.id, chosen)
    versions = await in_store(store.versions, head.kind, head.id)
    return {
        **head.summary(),
        "version": chosen,
        "definition": definition.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "versions": [v.as_dict() for v in versions],
    }


def _built_in(plural: str, def_id: str) -> dict[str, Any] | None:
    return BUILT_INS.get(plural, {}).get(def_id)


def _built_in_summary(definition: dict[str, Any], kind: str) -> dict[str, Any]:
    """A built-in as the API lists it: no owner, no stored versions."""
    return {
        "id": definition["id"],
        "kind": kind,
        "name": definition["name"],
        "description": definition["description"],
        "latest_version": None,
        "owner": None,
        "created_at": None,
        "updated_at": None,
        "built_in": True,
    }


def _refuse_built_in(plural: str, def_id: str, action: str) -> None:
    """409 ``DEFINITION_BUILT_IN`` for a write to a built-in id."""
    if _built_in(plural, def_id) is not None:
        raise ApiError(
            409,
            "DEFINITION_BUILT_IN",
            f"{PLURALS[plural]} {def_id!r} is built in and read-only: it cannot be {action}; use another id",
            field="id",
        )


# --- Handlers ---------------------------------------------------------------------------------------------


async def list_definitions(req: func.HttpRequest, plural: str) -> func.HttpResponse:
    """The caller's live definitions of one kind, by id."""
    caller = request_caller(req)
    store = definition_store()
    heads = await in_store(store.heads, PLURALS[plural])
    owners = [{"owner": {"id": h.owner.id} if h.owner else None} for h in heads]
    built_in = [_built_in_summary(d, PLURALS[plural]) for d in BUILT_INS.get(plural, {}).values()]
    stored = [h.summary() for h, o in zip(heads, owners, strict=True) if caller.sees(o) and not _built_in(plural, h.id)]
    return json_response(dump_body(DefinitionList.model_validate({plural: built_in + stored})))


async def get_definition(req: func.HttpRequest, plural: str, def_id: str) -> func.HttpResponse:
    """One definition: the latest version (or ``?version=N``) and its versions."""
    kind = PLURALS[plural]
    caller = request_caller(req)
    version = int_param(req, "version", 0, 0, 1_000_000) or None
    built_in = _built_in(plural, def_id)
    if built_in is not None:
        if version is not None:
            raise ApiError(404, "DEFINITION_NOT_FOUND", f"built-in {kind} {def_id!r} has no versions", field="version")
        shown = {**_built_in_summary(built_in, kind), "version": None, "definition": built_in, "versions": []}
        return json_response(dump_body(DefinitionView.model_validate(shown)))
    store = definition_store()
    head = visible_head(await in_store(store.head, kind, def_id), caller, kind, def_id)
    if version is not None and version > head.latest:
        raise ApiError(404, "DEFINITION_NOT_FOUND", f"{kind} {def_id!r} has no version {version}", field="version")
    return json_response(dump_body(DefinitionView.model_validate(await _view(store, head, version))))


async def create_definition(req: func.HttpRequest, plural: str) -> func.HttpResponse:
    """Create a definition (version 1, or the next version of an archived id); 409 when the id is live."""
    kind = PLURALS[plural]
    caller = request_caller(req)
    body = _read_body(req)
    store = definition_store()
    if isinstance(body, dict) and isinstance(body.get("id"), str):
        _refuse_built_in(plural, body["id"], "created")
    definition = await asyncio.to_thread(_checked_in_store, kind, body, store, caller)
    head = await in_store(store.head, kind, definition.id)
    if head is not None and head.archived and not caller.sees({"owner": {"id": head.owner.id} if head.owner else None}):
        # An archived id keeps its versions (pinned runs read them): only its owner (or an admin) takes it up again.
        raise ApiError(409, "DEFINITION_EXISTS", f"{kind} id {definition.id!r} is taken; choose another", field="id")
    saved = await in_store(store.save, definition, owner=_owner(caller), create=True)
    location = f"{req.url.split('?', 1)[0].rstrip('/')}/{definition.id}"
    created = DefinitionView.model_validate(await _view(store, saved.head))
    return json_response(dump_body(created), 201, headers={"Location": location})


def _checked_in_store(kind: str, body: Any, store: DefinitionStore, caller: Caller) -> Definition:
    # Validation reads other definitions (the resolver): store errors become API errors here as well.
    try:
        return _checked(kind, body, store, caller)
    except StoreError as exc:
        raise ApiError(STORE_STATUS.get(exc.code, 503), exc.code, exc.message) from exc


async def update_definition(req: func.HttpRequest, plural: str, def_id: str) -> func.HttpResponse:
    """Save a new version (the same content as the latest saves nothing); ``?expected_version=N`` guards it."""
    kind = PLURALS[plural]
    _refuse_built_in(plural, def_id, "changed")
    caller = request_caller(req)
    body = _read_body(req)
    if isinstance(body, dict):
        if body.setdefault("id", def_id) != def_id:
            raise ApiError(400, "INVALID_DEFINITION", f"id must be {def_id!r}, the id in the URL", field="id")
    expected = int_param(req, "expected_version", 0, 0, 1_000_000) or None
    store = definition_store()
    visible_head(await in_store(store.head, kind, def_id), caller, kind, def_id)
    definition = await asyncio.to_thread(_checked_in_store, kind, body, store, caller)
    saved = await in_store(store.save, definition, owner=_owner(caller), create=False, expected_version=expected)
    updated = DefinitionView.model_validate({**await _view(store, saved.head), "created": saved.created})
    return json_response(dump_body(updated))


async def delete_definition(req: func.HttpRequest, plural: str, def_id: str, client: Any) -> func.HttpResponse:
    """Archive a definition; 409 while runs of it are in flight or other definitions name it."""
    from shared.definitions.usage import referrers, runs_in_flight

    kind = PLURALS[plural]
    _refuse_built_in(plural, def_id, "deleted")
    caller = request_caller(req)
    store = definition_store()
    visible_head(await in_store(store.head, kind, def_id), caller, kind, def_id)
    running = await runs_in_flight(kind, def_id, client)
    if running:
        shown = ", ".join(running[:5]) + (" ..." if len(running) > 5 else "")
        raise ApiError(409, "DEFINITION_IN_USE", f"{kind} {def_id!r} has runs in flight ({shown}); wait or cancel them")
    users = await in_store(referrers, store, kind, def_id)
    if users:
        raise ApiError(
            409, "DEFINITION_REFERENCED", f"{kind} {def_id!r} is used by {', '.join(users)}; change those first"
        )
    await in_store(store.archive, kind, def_id)
    return json_response(dump_body(Archived(id=def_id, kind=kind, archived=True)))


# --- Routes -----------------------------------------------------------------------------------------------


def _register_kind(bp: df.Blueprint, plural: str, level: func.AuthLevel | None) -> None:
    """The five routes of one kind (function names must be unique across the app)."""

    @bp.function_name(name=f"list_{plural}")
    @bp.route(route=plural, methods=["GET"], auth_level=level)
    async def list_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded(f"list_{plural}", lambda: list_definitions(req, plural))

    @bp.function_name(name=f"create_{plural}")
    @bp.route(route=plural, methods=["POST"], auth_level=level)
    async def create_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded(f"create_{plural}", lambda: create_definition(req, plural))

    @bp.function_name(name=f"get_{plural}")
    @bp.route(route=f"{plural}/{{def_id}}", methods=["GET"], auth_level=level)
    async def get_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded(f"get_{plural}", lambda: get_definition(req, plural, req.route_params["def_id"]))

    @bp.function_name(name=f"update_{plural}")
    @bp.route(route=f"{plural}/{{def_id}}", methods=["PUT"], auth_level=level)
    async def update_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded(f"update_{plural}", lambda: update_definition(req, plural, req.route_params["def_id"]))

    @bp.function_name(name=f"delete_{plural}")
    @bp.route(route=f"{plural}/{{def_id}}", methods=["DELETE"], auth_level=level)
    @bp.generic_input_binding(arg_name="client", type="durableClient")
    async def delete_route(req: func.HttpRequest, client: str) -> func.HttpResponse:
        return await guarded(
            f"delete_{plural}", lambda: delete_definition(req, plural, req.route_params["def_id"], client)
        )


def register(bp: df.Blueprint) -> None:
    """Register the definition routes, the LLM routes and the tools listing on the blueprint."""
    from api.llm import register as register_llm
    from api.tools import register as register_tools

    level = route_auth_level()
    for plural in PLURALS:
        _register_kind(bp, plural, level)
    register_llm(bp, level)
    register_tools(bp, level)


blueprint = df.Blueprint()
register(blueprint)
