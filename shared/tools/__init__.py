"""Tool families for the Executor: one interface (``base.Tool``), one registry, one module per family.

A family turns configuration into tools: ``function`` (typed Python functions registered in code),
``http`` (HTTP APIs declared in settings), ``mcp`` (the tools of MCP servers declared in settings).
Adding a family is one module here that calls ``register_family`` on import. Tool names carry their
family as a prefix (``http.weather``), so one job's allowed list names tools of every family alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from shared.runtime.plugins import PackageModules
from shared.tools.base import Tool, ToolContext, ToolResult, ToolSpec, run_tool

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

# A family: its name and how it lists its members for the current settings (may raise ValueError
# naming the setting that is wrong).
FamilyLoader = Callable[["Settings"], list[Tool]]

_FAMILIES: dict[str, FamilyLoader] = {}
# Families whose members cannot be listed cheaply (MCP lists over the network) say from settings alone
# whether a name can be one of theirs; the others are checked against their loaded members.
Declares = Callable[["Settings", str], bool]
_DECLARES: dict[str, Declares] = {}
_MODULES = PackageModules(__name__, skip={"base"})

__all__ = [
    "Tool",
    "ToolContext",
    "ToolResult",
    "ToolSpec",
    "family_names",
    "register_family",
    "run_tool",
    "tools",
    "undeclared",
]


def register_family(name: str, *, declares: Declares | None = None) -> Callable[[FamilyLoader], FamilyLoader]:
    """Decorator: register the loader of a tool family (and, if listing is costly, how to check a name cheaply)."""

    def decorate(loader: FamilyLoader) -> FamilyLoader:
        if name in _FAMILIES and _FAMILIES[name] is not loader:
            raise ValueError(f"tool family {name!r} is registered twice")
        _FAMILIES[name] = loader
        if declares is not None:
            _DECLARES[name] = declares
        return loader

    return decorate


def _load_all() -> None:
    _MODULES.load()


def family_names() -> list[str]:
    """The registered tool families, sorted."""
    _load_all()
    return sorted(_FAMILIES)


def undeclared(settings: Settings, name: str) -> str | None:
    """Why a job may not allow this tool name under these settings (None: it is configured); nothing connects."""
    _load_all()
    family = name.split(".", 1)[0]
    if family not in _FAMILIES or "." not in name:
        return f"{name!r} is not a tool of a family ({', '.join(sorted(_FAMILIES))}: <family>.<name>)"
    declares = _DECLARES.get(family)
    try:
        known = declares(settings, name) if declares else any(t.spec.name == name for t in _FAMILIES[family](settings))
    except ValueError as exc:
        return f"the {family} tools are not configured correctly: {exc}"
    return None if known else f"tool {name!r} is not configured on this app"


def tools(settings: Settings) -> dict[str, Tool]:
    """Every tool of every family under these settings, by name; a name used twice is an error."""
    _load_all()
    found: dict[str, Tool] = {}
    for family in sorted(_FAMILIES):
        for tool in _FAMILIES[family](settings):
            if not tool.spec.name.startswith(f"{family}."):
                raise ValueError(f"tool {tool.spec.name!r} of family {family!r} must be named {family}.<name>")
            if tool.spec.name in found:
                raise ValueError(f"tool name {tool.spec.name!r} is used twice")
            found[tool.spec.name] = tool
    return found
