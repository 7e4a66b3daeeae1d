"""The ``function`` tool family: plain typed Python functions, registered in code with ``@function_tool``.

A function's signature is its schema: each parameter's annotation (``Annotated[..., Field(...)]`` for
bounds and descriptions) and default become a pydantic model, so ``run_tool`` checks the model's
arguments before the function runs. The family lists every registered function; the built-in ones live
in ``_builtin_functions`` (imported on first listing, so the registry is complete before it is read).
"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, create_model

from shared.tools import register_family
from shared.tools.base import Tool, ToolContext, ToolSpec

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

FAMILY = "function"
# Modules whose import registers the built-in functions (``@function_tool`` at their top level).
BUILTIN_MODULES = ("shared.tools._builtin_functions",)
_MEMBER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")

F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY: dict[str, FunctionTool] = {}


class FunctionTool(Tool):
    """A Python function as a tool: its arguments model is built from its signature."""

    def __init__(self, func: Callable[..., Any], *, name: str, description: str, timeout_s: float) -> None:
        self.func = func
        model = _arguments_model(func, name)
        self.spec = ToolSpec(
            name=f"{FAMILY}.{name}",
            family=FAMILY,
            description=description,
            input_schema=model.model_json_schema(),
            timeout_s=timeout_s,
            input_model=model,
        )

    def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Call the function with the arguments as its annotations type them."""
        assert self.spec.input_model is not None  # set in __init__
        # run_tool hands over the JSON form; validating again restores the annotated Python types.
        checked = self.spec.input_model.model_validate(args)
        result = self.func(**{key: getattr(checked, key) for key in type(checked).model_fields})
        return result.model_dump(mode="json") if isinstance(result, BaseModel) else result


def _arguments_model(func: Callable[..., Any], name: str) -> type[BaseModel]:
    """A pydantic model of the function's keyword arguments (unknown arguments are refused)."""
    hints = typing.get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"function tool {name!r}: parameter {param.name!r} must be a named parameter")
        if param.name not in hints:
            raise TypeError(f"function tool {name!r}: parameter {param.name!r} needs a type annotation")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], default)
    title = "".join(part.capitalize() for part in name.split("_")) + "Arguments"
    model: type[BaseModel] = create_model(title, __config__=ConfigDict(extra="forbid"), **fields)
    return model


def function_tool(
    *, name: str | None = None, description: str | None = None, timeout_s: float = 10.0
) -> Callable[[F], F]:
    """Decorator: register a typed function as the tool ``function.<name>`` (the function itself is unchanged)."""

    def register(func: F) -> F:
        member = name or func.__name__
        if not _MEMBER_NAME.match(member):
            raise ValueError(f"function tool name {member!r} must match {_MEMBER_NAME.pattern}")
        text = description or inspect.getdoc(func) or ""
        if not text.strip():
            raise ValueError(f"function tool {member!r} needs a description (argument or docstring)")
        existing = _REGISTRY.get(member)
        if existing is not None and existing.func is not func:
            raise ValueError(f"function tool {member!r} is registered twice")
        _REGISTRY[member] = FunctionTool(func, name=member, description=text.strip(), timeout_s=timeout_s)
        return func

    return register


def registered() -> list[FunctionTool]:
    """Every registered function tool (built-ins included), sorted by name."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    return [_REGISTRY[key] for key in sorted(_REGISTRY)]


@register_family(FAMILY)
def load(settings: Settings) -> list[Tool]:
    """The family's members: every registered function (which of them a job may call is its allowed list)."""
    return list(registered())
