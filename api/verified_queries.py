"""/api/verified-queries: save, list, edit and retire SQL statements people approved (shared/providers/sql/verified.py).

A saved statement is guarded (with each slot at its first allowed value) before it is stored: a statement the
guard refuses is a 400 ``INVALID_VERIFIED_QUERY``. Who approved it is the caller (the Easy Auth principal; with
function keys, nobody in particular). Retiring keeps the row, so a job that used it can still be traced.

With Easy Auth on, the caller is the query's owner (from the principal, never the body). A query is listed to
(and reused for) its owner, everyone when its owner holds a role of VERIFIED_QUERIES_SHARED_ROLES, and the admin
role; anyone else gets 404 ``VERIFIED_QUERY_NOT_FOUND`` as for a missing id. Only the owner or an admin edits or
retires it: another user who sees a shared one gets 403 ``VERIFIED_QUERY_FORBIDDEN``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from pydantic import ValidationError

from api.auth import Caller
from api.common import read_json_body, request_caller, route_auth_level
from api.contract.bodies import VerifiedQueryList, VerifiedQueryShown, dump_body
from api.errors import ApiError, from_validation_error, guarded, json_response
from shared.providers.sql.verified import (
    QueryOwner,
    Reader,
    VerifiedQuery,
    VerifiedQueryIn,
    VerifiedQueryStore,
    catalog_version,
    get_verified_store,
    may_change,
    now,
    sample_sql,
    visible,
)

ROUTE = "verified-queries"
MAX_BODY_BYTES = 64 * 1024


def _store() -> VerifiedQueryStore:
    from shared.runtime.settings import get_settings

    store = get_verified_store(get_settings())
    if store is None:
        raise ApiError(
            503,
            "DEFINITIONS_NOT_CONFIGURED",
            "verified queries live with the definitions: set AzureWebJobsStorage (UseDevelopmentStorage=true "
            "runs it on Azurite under devhost) or DEFINITIONS_TABLE_ENDPOINT",
        )
    return store


def _checked(body: Any, approved_by: str | None) -> VerifiedQuery:
    """The query as stored: validated, its statement guarded, stamped with the approver, time and catalog."""
    from shared.executors.execute_azure_sql import guard_step_sql
    from shared.providers.clients import get_clients

    try:
        given = VerifiedQueryIn.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc, "INVALID_VERIFIED_QUERY") from exc
    clients = get_clients()
    verdict = guard_step_sql(sample_sql(given), clients, clients.database.dialect)
    if not verdict.accepted:
        raise ApiError(
            400, "INVALID_VERIFIED_QUERY", f"the guard refuses the statement: {verdict.message}", field="sql"
        )
    catalog = clients.catalog.model_dump_json()
    return VerifiedQuery(
        **given.model_dump(), approved_by=approved_by, approved_at=now(), catalog_version=catalog_version(catalog)
    )


def _reader(caller: Caller) -> Reader | None:
    who = caller.principal
    return Reader(id=who.id, roles=who.roles) if who else None


def _owner(caller: Caller) -> QueryOwner | None:
    who = caller.principal
    return QueryOwner(id=who.id, name=who.name, roles=tuple(sorted(who.roles)[:64])) if who else None


def _approver(caller: Caller) -> str | None:
    principal = caller.principal
    return principal.name or principal.id if principal else None


def _settings() -> Any:
    from shared.runtime.settings import get_settings

    return get_settings()


async def _changeable(store: VerifiedQueryStore, query_id: str, caller: Caller) -> VerifiedQuery:
    """The query this caller may edit or retire: 404 when they cannot see it, 403 when it is not theirs."""
    query = await asyncio.to_thread(store.get, query_id)
    reader, settings = _reader(caller), _settings()
    if query is None or not visible(query, reader, settings):
        raise ApiError(404, "VERIFIED_QUERY_NOT_FOUND", f"there is no verified query {query_id!r}")
    if not may_change(query, reader, settings):
        raise ApiError(
            403,
            "VERIFIED_QUERY_FORBIDDEN",
            f"verified query {query_id!r} is shared with you, not yours: only its owner or an admin changes it",
        )
    return query


async def list_queries(req: func.HttpRequest) -> func.HttpResponse:
    """The live verified queries this caller may see (``?retired=true``: the retired ones too)."""
    include = req.params.get("retired", "").lower() in ("1", "true", "yes")
    caller = request_caller(req)
    reader, settings = _reader(caller), _settings()
    queries = await asyncio.to_thread(_store().list, include_retired=include)
    mine = [q for q in queries if visible(q, reader, settings)]
    return json_response(dump_body(VerifiedQueryList(verified_queries=[_shown(q, caller) for q in mine])))


def _shown(query: VerifiedQuery, caller: Caller) -> VerifiedQueryShown:
    """A query as the API shows it, with whether it is shared and whether this caller may change it."""
    from shared.providers.sql.verified import shared

    settings = _settings()
    return VerifiedQueryShown(
        **query.model_dump(),
        shared=shared(query, settings.shared_roles) or not settings.website_auth_enabled,
        editable=may_change(query, _reader(caller), settings),
    )


async def create_query(req: func.HttpRequest) -> func.HttpResponse:
    """Save a verified query, owned by the caller; 409 when the id is taken."""
    caller = request_caller(req)
    query = await asyncio.to_thread(_checked, read_json_body(req, MAX_BODY_BYTES), _approver(caller))
    query = query.model_copy(update={"owner": _owner(caller)})
    if not await asyncio.to_thread(_store().put, query, create=True):
        raise ApiError(409, "VERIFIED_QUERY_EXISTS", f"verified query {query.id!r} exists; PUT to edit it", field="id")
    return json_response(dump_body(_shown(query, caller)), 201)


async def update_query(req: func.HttpRequest, query_id: str) -> func.HttpResponse:
    """Edit a verified query (approved again, by the caller, now); its owner stays (an admin edits for them)."""
    caller = request_caller(req)
    store = _store()
    before = await _changeable(store, query_id, caller)
    body = read_json_body(req, MAX_BODY_BYTES)
    if isinstance(body, dict) and body.get("id", query_id) != query_id:
        raise ApiError(400, "INVALID_VERIFIED_QUERY", "the id in the body differs from the URL's", field="id")
    query = await asyncio.to_thread(_checked, {**body, "id": query_id} if isinstance(body, dict) else body, None)
    mine = before.owner is None or (caller.principal is not None and before.owner.id == caller.principal.id)
    # The owner editing their own query brings its roles up to date; an admin's edit leaves the owner as it was.
    owner = _owner(caller) if mine and caller.principal is not None else before.owner
    query = query.model_copy(update={"approved_by": _approver(caller), "owner": owner})
    await asyncio.to_thread(store.put, query, create=False)
    return json_response(dump_body(_shown(query, caller)))


async def retire_query(req: func.HttpRequest, query_id: str) -> func.HttpResponse:
    """Retire a verified query: no job uses it any more; the row stays."""
    caller = request_caller(req)
    store = _store()
    query = await _changeable(store, query_id, caller)
    retired = query.model_copy(update={"retired": True})
    await asyncio.to_thread(store.put, retired, create=False)
    return json_response(dump_body(_shown(retired, caller)))


def register(bp: df.Blueprint) -> None:
    """The four routes of /api/verified-queries."""
    level = route_auth_level()

    @bp.function_name(name="list_verified_queries")
    @bp.route(route=ROUTE, methods=["GET"], auth_level=level)
    async def list_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("list_verified_queries", lambda: list_queries(req))

    @bp.function_name(name="create_verified_query")
    @bp.route(route=ROUTE, methods=["POST"], auth_level=level)
    async def create_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("create_verified_query", lambda: create_query(req))

    @bp.function_name(name="update_verified_query")
    @bp.route(route=f"{ROUTE}/{{query_id}}", methods=["PUT"], auth_level=level)
    async def update_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("update_verified_query", lambda: update_query(req, req.route_params["query_id"]))

    @bp.function_name(name="retire_verified_query")
    @bp.route(route=f"{ROUTE}/{{query_id}}", methods=["DELETE"], auth_level=level)
    async def retire_route(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("retire_verified_query", lambda: retire_query(req, req.route_params["query_id"]))


blueprint = df.Blueprint()
register(blueprint)
