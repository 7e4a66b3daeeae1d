"""Who uses a definition: runs in flight (a hook the run side fills) and other live definitions that name it.

Delete archives a definition; it is refused while either holds, so a run never loses what it runs and a
saved workflow or team never names a definition that is gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from shared.definitions.models import AgentNode, Definition, Team, Workflow, WorkflowNode
from shared.definitions.store import DefinitionStore

# (kind, id, the durable client binding of the request) → ids of the runs of that definition still in flight.
InFlightCheck = Callable[[str, str, Any], Awaitable[list[str]]]


async def _none_in_flight(_kind: str, _def_id: str, _client: Any) -> list[str]:
    return []


_in_flight: InFlightCheck = _none_in_flight


def set_in_flight_check(check: InFlightCheck | None) -> None:
    """Install how runs in flight are found (the run side does, once runs exist); None restores "none"."""
    global _in_flight
    _in_flight = check or _none_in_flight


async def runs_in_flight(kind: str, def_id: str, client: Any) -> list[str]:
    """Ids of the runs of this definition that have not finished."""
    return await _in_flight(kind, def_id, client)


def names(definition: Definition, kind: str, def_id: str) -> bool:
    """Whether ``definition`` refers to the definition ``kind``/``def_id``."""
    if isinstance(definition, Team):
        strategy = definition.strategy
        roles = {getattr(strategy, "aggregator", None), getattr(strategy, "supervisor", None)}
        return kind == "agent" and (def_id in definition.agents or def_id in roles)
    if isinstance(definition, Workflow):
        for node in definition.nodes:
            if kind == "agent" and isinstance(node, AgentNode) and node.agent == def_id:
                return True
            if kind == "workflow" and isinstance(node, WorkflowNode) and node.workflow == def_id:
                return True
    return False


def referrers(store: DefinitionStore, kind: str, def_id: str) -> list[str]:
    """The live workflows and teams whose latest version names this definition ("workflow/<id>", ...)."""
    if kind == "team":
        return []
    found = []
    for other_kind in ("workflow", "team"):
        for head in store.heads(other_kind):
            if other_kind == kind and head.id == def_id:
                continue
            latest = store.find(other_kind, head.id, head.latest)
            if latest is not None and names(latest, kind, def_id):
                found.append(f"{other_kind}/{head.id}")
    return found
