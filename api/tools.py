"""``GET /api/tools``: the family tools an agent may name, and the ones left out, each with why.

A tool an MCP server lists is left out when it cannot be shown or run safely (an input schema with a remote
``$ref``, a pattern RE2 cannot run, a schema past the bounds: see shared/runtime/schema_safety.py); the
console and a definition's author see the reason here rather than only in the host's log.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import azure.durable_functions as df
import azure.functions as func

from api.common import request_caller
from api.contract.bodies import ToolList, dump_body
from api.errors import ApiError, guarded, json_response

if TYPE_CHECKING:
    from shared.runtime.settings import Settings

# A description is shown up to this many characters here (the model sees the tool's own bounded one).
MAX_DESCRIPTION_CHARS = 300


def list_tools(settings: Settings) -> dict[str, Any]:
    """Every configured family tool (name, family, description) and every left-out one with its reason."""
    from shared.tools import tools
    from shared.tools.mcp import left_out_tools

    try:
        found = tools(settings)
    except ValueError as exc:
        raise ApiError(409, "TOOLS_NOT_CONFIGURED", f"the tools are not configured correctly: {exc}") from exc
    listed = [
        {"name": name, "family": tool.spec.family, "description": tool.spec.description[:MAX_DESCRIPTION_CHARS]}
        for name, tool in sorted(found.items())
    ]
    return {"tools": listed, "left_out": left_out_tools(settings)}


async def tools_handler(req: func.HttpRequest) -> func.HttpResponse:
    """GET /api/tools."""
    from shared.runtime.settings import get_settings

    request_caller(req)
    return json_response(dump_body(ToolList.model_validate(await asyncio.to_thread(list_tools, get_settings()))))


def register(bp: df.Blueprint, level: func.AuthLevel | None) -> None:
    """Register the tools route."""

    @bp.route(route="tools", methods=["GET"], auth_level=level)
    async def tools_list(req: func.HttpRequest) -> func.HttpResponse:
        return await guarded("tools_list", lambda: tools_handler(req))
