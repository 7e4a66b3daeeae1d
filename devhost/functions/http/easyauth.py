"""Simulated App Service Authentication (Easy Auth) for local runs and tests. NOT a security boundary.

On Azure the platform signs the caller in, strips client-sent ``X-MS-CLIENT-PRINCIPAL*`` headers, sets
its own and sets ``WEBSITE_AUTH_ENABLED=True`` in the app's environment. ``serve --principal NAME`` (every
request is that user) and ``serve --principal-header`` (each request names its user in
``X-Devhost-Principal: name[;role1,role2]``) do the same locally, so an app's per-user logic can be run
and tested. Anyone who can reach the devhost can claim to be anyone: never expose it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

DEV_HEADER = "x-devhost-principal"
PLATFORM_PREFIX = "x-ms-client-principal"
ENV_FLAG = "WEBSITE_AUTH_ENABLED"
PROVIDER = "aad"
NAME_TYP = "name"
ROLE_TYP = "roles"


class PrincipalSpecError(ValueError):
    """A ``name[;role,...]`` principal spec is malformed."""


@dataclass(frozen=True)
class SimulatedUser:
    """A user as the simulation presents it: the name is also the principal id."""

    name: str
    roles: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> SimulatedUser:
        """``alice`` or ``alice;Jobs.Admin,other`` (raises PrincipalSpecError)."""
        name, _, roles = spec.partition(";")
        name = name.strip()
        if not name or len(name) > 200 or any(ord(c) < 32 for c in spec):
            raise PrincipalSpecError(f"invalid principal {spec!r}: expected name[;role1,role2]")
        return cls(name, tuple(r.strip() for r in roles.split(",") if r.strip()))

    def claims(self) -> list[dict[str, str]]:
        """The claims Easy Auth would pass for this user."""
        return [{"typ": NAME_TYP, "val": self.name}] + [{"typ": ROLE_TYP, "val": r} for r in self.roles]

    def headers(self) -> dict[str, str]:
        """The ``X-MS-CLIENT-PRINCIPAL*`` headers the platform sets for a signed-in user."""
        principal = {"auth_typ": PROVIDER, "claims": self.claims(), "name_typ": NAME_TYP, "role_typ": ROLE_TYP}
        encoded = base64.b64encode(json.dumps(principal).encode()).decode()
        return {
            "x-ms-client-principal": encoded,
            "x-ms-client-principal-id": self.name,
            "x-ms-client-principal-name": self.name,
            "x-ms-client-principal-idp": PROVIDER,
        }


@dataclass(frozen=True)
class EasyAuthSimulation:
    """Which user a request is made as: the per-request header (when honoured), else the fixed principal."""

    default: SimulatedUser | None = None
    honour_header: bool = False

    def user(self, headers: Mapping[str, str]) -> SimulatedUser | None:
        """The simulated user of a request (None: not signed in); raises PrincipalSpecError."""
        lower = {k.lower(): v for k, v in headers.items()}
        spec = lower.get(DEV_HEADER) if self.honour_header else None
        return SimulatedUser.parse(spec) if spec else self.default

    def rewrite(self, headers: Mapping[str, str]) -> dict[str, str]:
        """Request headers as the app sees them: client-sent principal headers dropped, the simulated ones added."""
        user = self.user(headers)
        out = {k: v for k, v in headers.items() if not _platform_or_dev(k)}
        if user is not None:
            out.update(user.headers())
        return out

    def describe(self) -> str:
        """One banner line."""
        modes = []
        if self.default is not None:
            roles = f" (roles: {', '.join(self.default.roles)})" if self.default.roles else ""
            modes.append(f"every request is '{self.default.name}'{roles}")
        if self.honour_header:
            modes.append("X-Devhost-Principal: name[;role1,role2] picks the user per request")
        return "Easy Auth SIMULATED (not a security boundary): " + "; ".join(modes)

    def handle(self, request: Request, path: str) -> Response:
        """``/.auth/me``, ``/.auth/login/<provider>`` and ``/.auth/logout`` as far as a local run needs them."""
        lower = path.lower().rstrip("/")
        if lower == "/.auth/me":
            try:
                user = self.user(request.headers)
            except PrincipalSpecError:
                user = None
            if user is None:
                return Response(status_code=401)
            return JSONResponse([{"provider_name": PROVIDER, "user_id": user.name, "user_claims": user.claims()}])
        if lower.startswith("/.auth/login/") or lower == "/.auth/logout":
            # The simulated user is always signed in: go straight back (same-origin paths only).
            target = request.query_params.get("post_login_redirect_uri") or request.query_params.get(
                "post_logout_redirect_uri"
            )
            return RedirectResponse(_local_path(target), status_code=302)
        return Response(status_code=404)


def _platform_or_dev(name: str) -> bool:
    lower = name.lower()
    return lower.startswith(PLATFORM_PREFIX) or lower == DEV_HEADER


def _local_path(target: Any) -> str:
    if not isinstance(target, str) or not target.startswith("/") or target.startswith("//"):
        return "/"
    parts = urlsplit(target)
    return parts.path + (f"?{parts.query}" if parts.query else "") if not parts.netloc else "/"
