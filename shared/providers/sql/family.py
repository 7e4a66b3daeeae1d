"""The database family: one interface for every SQL database the app can query, one registry keyed by ``SQL_PROVIDER``.

A member is one module in ``shared/providers/sql`` that registers itself with ``@register_database(...)`` on
the function that opens it. What a member provides:

* ``provider``: its ``SQL_PROVIDER`` value (``sqlite``, ``azure_sql``, ``postgresql``);
* ``dialect``: the sqlglot dialect its SQL is written, guarded and run in (``sqlite``, ``tsql``, ``postgres``);
  the guard (``guard.py``) and the catalog's time grains (``data/catalog.json``) must know it;
* ``default_schema``: the schema unqualified names resolve to (the guard accepts ``<schema>.<table>`` too);
* ``open``: settings → a ``SqlDatabase`` (``interfaces.py``) that connects lazily, on its first query, and runs
  one guarded query read-only, bounded by a timeout and a row cap (``QueryRows.truncated``), raising only
  ``ProviderError``;
* ``sensitive_barrier``: how the database itself keeps the tables the catalog marks sensitive away from a
  statement no human approved (``execute(..., sensitive=False)``), whatever the guard let through.

Nothing here connects; ``dialect_for`` answers from settings alone (the API checks an edited statement
without building a client that may need a driver).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.runtime.plugins import PackageModules

if TYPE_CHECKING:
    from shared.providers.interfaces import SqlDatabase
    from shared.runtime.settings import Settings

Opener = Callable[["Settings"], "SqlDatabase"]
F = TypeVar("F", bound=Callable[..., "SqlDatabase"])


@dataclass(frozen=True)
class DatabaseMember:
    """One database of the family (see the module docstring)."""

    provider: str
    dialect: str
    default_schema: str
    sensitive_barrier: str
    open: Opener
    # What it is, for a model choosing among databases, and words a question may name it by.
    description: str = ""
    aliases: tuple[str, ...] = ()


_MEMBERS: dict[str, DatabaseMember] = {}
# Modules of this package that are not members: importing them registers nothing.
_MODULES = PackageModules(
    "shared.providers.sql",
    skip={"family", "catalog", "sampledata", "odbc", "sqlite_limits"},
)


def register_database(
    provider: str,
    *,
    dialect: str,
    default_schema: str,
    sensitive_barrier: str,
    description: str = "",
    aliases: tuple[str, ...] = (),
) -> Callable[[F], F]:
    """Decorator: register the function that opens a member database from settings (called with them alone)."""

    def decorate(open_: F) -> F:
        member = DatabaseMember(provider, dialect, default_schema, sensitive_barrier, open_, description, aliases)
        known = _MEMBERS.get(provider)
        if known is not None and known.open is not open_:
            raise ValueError(f"database {provider!r} is registered twice")
        _MEMBERS[provider] = member
        return open_

    return decorate


def _load_all() -> None:
    _MODULES.load()


def providers() -> list[str]:
    """The registered ``SQL_PROVIDER`` values, sorted."""
    _load_all()
    return sorted(_MEMBERS)


def member(provider: str) -> DatabaseMember:
    """The member registered for ``provider``; CONFIG_ERROR naming SQL_PROVIDER when there is none."""
    _load_all()
    found = _MEMBERS.get(provider)
    if found is None:
        known = ", ".join(sorted(_MEMBERS))
        raise ProviderError(ErrorCode.CONFIG_ERROR, f"SQL_PROVIDER={provider!r} is not a database of the app ({known})")
    return found


def dialect_for(settings: Settings) -> str:
    """The sqlglot dialect of the configured database, from settings alone (nothing connects)."""
    return member(settings.sql_provider).dialect


def open_database(settings: Settings, provider: str | None = None) -> SqlDatabase:
    """The configured database, or another member (no connection until its first query)."""
    return member(provider or settings.sql_provider).open(settings)
