"""Types shared by the devhost loader, engine and HTTP server.

The loader turns ``function_app.py`` into a ``LoadedApp``; the engine runs orchestrations and
activities from it; the server maps HTTP onto both. Keep these types free of I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

FunctionKind = Literal["http", "orchestrator", "activity", "entity", "timer", "queue", "blob", "other"]


@dataclass(frozen=True)
class FunctionInfo:
    """One function as the host sees it after ``app.get_functions()``."""

    name: str
    kind: FunctionKind
    trigger: dict[str, Any]
    bindings: list[dict[str, Any]]
    user_function: Callable[..., Any]
    # Orchestrator/activity/entity name other functions call it by (case-insensitive match).
    durable_name: str | None = None
    is_async: bool = False
    # True when the Python function has a parameter literally named ``context`` that is not a binding.
    wants_context: bool = False
    # Name of the durableClient input binding parameter, if any.
    client_binding: str | None = None


@dataclass(frozen=True)
class HostConfig:
    """The parts of host.json and local settings the devhost honours."""

    route_prefix: str = "api"
    hub_name: str = "TestHubName"
    max_concurrent_activities: int = 10
    max_concurrent_orchestrators: int = 10
    max_orchestration_actions: int = 100_000
    # extensions.durableTask.extendedSessionsEnabled / extendedSessionIdleTimeoutInSeconds (devhost.durable.sessions).
    extended_sessions: bool = False
    extended_session_idle_timeout_s: int = 30
    default_version: str | None = None
    function_timeout_s: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadedApp:
    """A function app ready to serve."""

    root: Path
    host: HostConfig
    functions: list[FunctionInfo]

    def by_kind(self, kind: FunctionKind) -> list[FunctionInfo]:
        """All functions of one kind, in registration order."""
        return [f for f in self.functions if f.kind == kind]

    def find(self, kind: FunctionKind, durable_name: str) -> FunctionInfo | None:
        """Find an orchestrator/activity/entity by durable name, case-insensitively (as the extension does)."""
        wanted = durable_name.lower()
        for f in self.functions:
            if f.kind == kind and (f.durable_name or f.name).lower() == wanted:
                return f
        return None


class AppLoadError(Exception):
    """The app cannot be loaded; the message says why and what to fix."""


# Errors the engine raises to the HTTP layer; the server maps each to the extension's status code.
class EngineError(Exception):
    """Base class of engine errors that map to an HTTP status."""

    status_code = 500
    # The error body's "Message" when the extension's handler words it differently from its status default.
    http_message: str | None = None


class InstanceNotFound(EngineError):
    """No instance with that id (404)."""

    status_code = 404


class InstanceGone(EngineError):
    """The instance is in a terminal state (410)."""

    status_code = 410


class InstanceAlreadyExists(EngineError):
    """Start with an id that is still running: the extension's OrchestrationAlreadyExistsException (500)."""

    status_code = 500


class InvalidRequest(EngineError):
    """Bad id, bad JSON, unknown orchestrator and similar (400)."""

    status_code = 400


class PreconditionFailed(EngineError):
    """The operation does not fit the instance's state: the extension's InvalidOperationException (500)."""

    status_code = 500


class NotSupported(EngineError):
    """A feature the devhost does not implement, e.g. entities (501)."""

    status_code = 501
