"""The run API's checks on their own: inputs against InputSpecs, tools cut to the app's, a tool node's tool needed."""

from __future__ import annotations

from typing import Any

import pytest

from api.errors import ApiError
from api.runs import Pinned, allowed_tools, check_inputs
from shared.definitions.models import InputSpec

TOOL = "function.percent_change"
SPECS = {
    "region": InputSpec(type="string"),
    "n": InputSpec(type="integer", required=False),
    "rate": InputSpec(type="number", required=False, default=0.5),
    "flags": InputSpec(type="array", required=False),
}


def refused(call: Any) -> tuple[int, str, str | None]:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value.status, caught.value.code, caught.value.field


def test_inputs_are_typed_defaulted_and_never_unknown() -> None:
    assert check_inputs(SPECS, {"region": "North", "n": 3}) == {"region": "North", "n": 3, "rate": 0.5}
    assert check_inputs(SPECS, {"region": "N", "rate": 2, "flags": []})["rate"] == 2  # an integer is a number
    assert refused(lambda: check_inputs(SPECS, {})) == (400, "INVALID_INPUT", "inputs.region")
    assert refused(lambda: check_inputs(SPECS, {"region": 5})) == (400, "INVALID_INPUT", "inputs.region")
    assert refused(lambda: check_inputs(SPECS, {"region": "N", "n": 1.5})) == (400, "INVALID_INPUT", "inputs.n")
    assert refused(lambda: check_inputs(SPECS, {"region": "N", "n": True})) == (400, "INVALID_INPUT", "inputs.n")
    assert refused(lambda: check_inputs(SPECS, {"region": "N", "rate": False})) == (400, "INVALID_INPUT", "inputs.rate")
    assert refused(lambda: check_inputs(SPECS, {"region": "N", "x": 1})) == (400, "INVALID_INPUT", "inputs.x")


def test_an_agents_tools_are_cut_to_the_apps_and_a_tool_node_needs_its_tool() -> None:
    # http.weather is not configured on this app: an agent naming it simply does not get it.
    assert allowed_tools(Pinned(tools={TOOL, "http.weather"})) == [TOOL]
    assert allowed_tools(Pinned(tool_nodes=[("nodes.0.tool", TOOL)])) == [TOOL]
    status, code, field = refused(lambda: allowed_tools(Pinned(tool_nodes=[("nodes.2.tool", "http.weather")])))
    assert (status, code, field) == (409, "TOOL_NOT_CONFIGURED", "nodes.2.tool")
