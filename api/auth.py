"""Who is calling: the App Service Authentication (Easy Auth) principal, and which jobs that caller may see.

With Easy Auth on, the platform authenticates the caller, strips any client-sent ``X-MS-CLIENT-PRINCIPAL*``
headers and sets its own: ``X-MS-CLIENT-PRINCIPAL-ID`` (the user's object id) and ``X-MS-CLIENT-PRINCIPAL``
(base64 JSON ``{"auth_typ", "claims": [{"typ", "val"}], "name_typ", "role_typ"}``). Those headers are
trusted only when App Service says Easy Auth is on (``WEBSITE_AUTH_ENABLED``); without it anyone could
send them, so they are ignored and every function-key holder sees every job.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.errors import ApiError

PRINCIPAL_HEADER = "x-ms-client-principal"
PRINCIPAL_ID_HEADER = "x-ms-client-principal-id"
PRINCIPAL_NAME_HEADER = "x-ms-client-principal-name"
PRINCIPAL_IDP_HEADER = "x-ms-client-principal-idp"
UNAUTHENTICATED = "UNAUTHENTICATED"
# Far above a real principal (a few KB), low enough that decoding a hostile header costs nothing.
MAX_PRINCIPAL_HEADER = 32 * 1024
MAX_ID = 200
MAX_NAME = 200
OBJECT_ID_CLAIMS = ("http://schemas.microsoft.com/identity/claims/objectidentifier", "oid")
NAME_CLAIMS = ("name", "preferred_username", "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name")
# Entra ID announces role_typ as the long URI but sends app roles as "roles" claims: accept both.
ROLE_CLAIMS = ("roles", "http://schemas.microsoft.com/ws/2008/06/identity/claims/role")


class PrincipalError(ValueError):
    """The principal headers are missing or malformed."""


class Claim(BaseModel):
    """One claim of the Easy Auth principal."""

    model_config = ConfigDict(extra="ignore")

    typ: str
    val: str


class ClientPrincipal(BaseModel):
    """The decoded ``X-MS-CLIENT-PRINCIPAL`` header."""

    model_config = ConfigDict(extra="ignore")

    auth_typ: str = ""
    claims: list[Claim] = Field(default_factory=list, max_length=1000)
    name_typ: str | None = None
    role_typ: str | None = None

    def values(self, *types: str | None) -> list[str]:
        """Values of the claims whose type is one of ``types``."""
        wanted = {t for t in types if t}
        return [c.val for c in self.claims if c.typ in wanted]


class Principal(BaseModel):
    """The authenticated caller."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1, max_length=MAX_ID)
    name: str = Field(max_length=MAX_NAME)
    idp: str = ""
    roles: frozenset[str] = frozenset()


def _decode(raw: str) -> ClientPrincipal:
    if len(raw) > MAX_PRINCIPAL_HEADER:
        raise PrincipalError("the client principal header is too large")
    try:
        text = base64.b64decode(raw.strip() + "=" * (-len(raw.strip()) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise PrincipalError("the client principal header is not valid base64 UTF-8") from exc
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PrincipalError("the client principal header is not JSON") from exc
    if not isinstance(data, dict):
        raise PrincipalError("the client principal header is not a JSON object")
    try:
        return ClientPrincipal.model_validate(data)
    except ValidationError as exc:
        raise PrincipalError("the client principal header does not have the Easy Auth shape") from exc


def parse_principal(headers: Mapping[str, str]) -> Principal:
    """The caller from the Easy Auth headers; raises PrincipalError when they are missing or malformed."""
    lower = {k.lower(): v for k, v in headers.items()}
    raw = lower.get(PRINCIPAL_HEADER)
    decoded = _decode(raw) if raw else ClientPrincipal()
    header_id = (lower.get(PRINCIPAL_ID_HEADER) or "").strip()
    claim_ids = {v.strip() for v in decoded.values(*OBJECT_ID_CLAIMS) if v.strip()}
    principal_id = header_id or (min(claim_ids) if len(claim_ids) == 1 else "")
    if not principal_id:
        raise PrincipalError("no signed-in user on the request (no client principal id)")
    if claim_ids and principal_id not in claim_ids:
        raise PrincipalError("the client principal id does not match the principal's object id claim")
    if len(principal_id) > MAX_ID:
        raise PrincipalError("the client principal id is too long")
    names = decoded.values(decoded.name_typ, *NAME_CLAIMS)
    name = (names[0] if names else lower.get(PRINCIPAL_NAME_HEADER) or principal_id).strip()[:MAX_NAME]
    roles = frozenset(decoded.values(decoded.role_typ, *ROLE_CLAIMS))
    idp = decoded.auth_typ or lower.get(PRINCIPAL_IDP_HEADER, "")
    return Principal(id=principal_id, name=name or principal_id, idp=idp[:50], roles=roles)


class Caller(BaseModel):
    """Who calls and what they may see; ``principal`` None means Easy Auth is off (the key is the only gate)."""

    model_config = ConfigDict(frozen=True)

    principal: Principal | None = None
    admin: bool = False

    def sees(self, job_input: Any) -> bool:
        """Whether this caller may list, view, answer or cancel a job with this orchestration input."""
        if self.principal is None or self.admin:
            return True
        owner = job_input.get("owner") if isinstance(job_input, dict) else None
        # A job without an owner (started before Easy Auth was turned on) is for admins only.
        return isinstance(owner, dict) and owner.get("id") == self.principal.id


def caller_of(headers: Mapping[str, str], *, easy_auth: bool, admin_role: str) -> Caller:
    """The caller of a request; 401 UNAUTHENTICATED when Easy Auth is on and no valid principal came with it."""
    if not easy_auth:
        return Caller()
    try:
        principal = parse_principal(headers)
    except PrincipalError as exc:
        raise ApiError(401, UNAUTHENTICATED, f"sign in first: {exc}") from exc
    return Caller(principal=principal, admin=admin_role in principal.roles)
