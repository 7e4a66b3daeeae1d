"""The catalog publishes the server's rules from their one source: a new kind shows up with no other change."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

import shared.executors as registry
from api.catalog import build_catalog
from shared.definitions.models import NODE_KINDS
from shared.executors import executor_types, register, step_kinds
from shared.jobs.agent import TOOL_NAME
from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode, ExecutorInput, ExecutorOutput
from shared.jobs.plan import ORCHESTRATOR_KINDS


class TicketTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ticket: str = Field(min_length=1, max_length=80, title="Ticket number")
    notes: str | None = Field(default=None, max_length=4000, title="Notes for the desk", description="Optional.")
    priority: int = Field(default=3, ge=1, le=5, title="Priority")
    tags: list[str] = Field(default_factory=list)


@pytest.fixture
def throwaway_kind() -> Iterator[str]:
    executor_types()  # load the shipped executors first
    saved = dict(registry._REGISTRY)

    @register(
        "open_ticket", description="Open a support ticket.", uses_llm=False, input_model=TicketTask, text_field="ticket"
    )
    def run(inp: ExecutorInput, clients: object) -> ExecutorOutput:
        return ExecutorOutput(status="success", result={})

    build_catalog.cache_clear()
    yield "open_ticket"
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    build_catalog.cache_clear()


def _kinds() -> dict[str, dict[str, Any]]:
    return {k["kind"]: k for k in build_catalog()["step_kinds"]}


def test_a_new_step_kind_is_published_with_its_editable_fields(throwaway_kind: str) -> None:
    entry = _kinds()[throwaway_kind]
    assert entry["description"] == "Open a support ticket."
    assert entry["input_schema"] == TicketTask.model_json_schema()
    # Lists and maps are not form fields; strings by length, integers with their bounds.
    assert entry["editable_fields"] == [
        {"name": "ticket", "label": "Ticket number", "required": True, "input": "line", "max_length": 80},
        {
            "name": "notes",
            "label": "Notes for the desk",
            "required": False,
            "hint": "Optional.",
            "input": "text",
            "max_length": 4000,
        },
        {"name": "priority", "label": "Priority", "required": False, "input": "int", "minimum": 1, "maximum": 5},
    ]


def test_every_plan_step_kind_is_listed_and_the_internal_ones_are_not() -> None:
    build_catalog.cache_clear()
    assert set(_kinds()) == set(step_kinds()) | set(ORCHESTRATOR_KINDS)
    assert "plan" not in _kinds() and "supervise" not in _kinds()
    assert _kinds()["ask_user"]["orchestrated"] is True
    assert _kinds()["execute_azure_sql"]["runs_sql"] is True


def test_the_shipped_kinds_say_how_each_field_is_edited() -> None:
    sql = _kinds()["execute_azure_sql"]["editable_fields"]
    assert [(f["name"], f["input"], f["label"]) for f in sql] == [
        ("question", "text", "Step question"),
        ("sql", "sql", "Step SQL"),
    ]
    code = {f["name"]: f["input"] for f in _kinds()["run_python"]["editable_fields"]}
    assert code == {"question": "line", "code": "code"}  # inputs (a map) is not a form field


def test_codes_statuses_nodes_and_the_tool_pattern_come_from_their_sources() -> None:
    catalog = build_catalog()
    assert {c["code"] for c in catalog["error_codes"] if c["retryable"]} == {c.value for c in RETRYABLE_CODES}
    assert {c["code"] for c in catalog["error_codes"]} == {c.value for c in ErrorCode}
    assert [n["kind"] for n in catalog["node_kinds"]] == list(NODE_KINDS)
    defs = catalog["node_schema"]["$defs"]
    for node in catalog["node_kinds"]:
        name = node["schema"]["$ref"].rsplit("/", 1)[-1]
        assert defs[name]["properties"]["kind"]["const"] == node["kind"]
    assert catalog["tool_name_pattern"] == TOOL_NAME and re.fullmatch(TOOL_NAME, "function.growth_rate")
    assert "waiting_for_user" in catalog["job_statuses"] and set(catalog["terminal_statuses"]) <= set(
        catalog["job_statuses"]
    )
    assert [q["kind"] for q in catalog["question_kinds"]] == ["approval", "error", "clarify", "cost"]


def test_the_definition_forms_choices_come_from_the_models() -> None:
    from pydantic import ValidationError

    from shared.definitions.models import Condition, InputSpec, Team

    choices = build_catalog()["definitions"]
    # Every listed choice is one the model takes, and a choice the model refuses is not listed.
    for op in choices["condition_ops"]:
        Condition(left="input.x", op=op)
    for kind in choices["input_types"]:
        InputSpec(type=kind)
    for strategy in choices["team_strategies"]:
        body = {"type": strategy} | ({"supervisor": "boss"} if strategy == "supervisor" else {})
        try:
            Team.model_validate({"id": "t", "name": "T", "agents": ["a"], "strategy": body})
        except ValidationError as exc:
            assert all(e["loc"][:2] != ("strategy", "type") and "union_tag" not in e["type"] for e in exc.errors())
    assert {"eq", "exists"} <= set(choices["condition_ops"]) and "matches" not in choices["condition_ops"]
    assert choices["team_strategies"] == ["sequential", "parallel", "supervisor"]


def _catalog_edges(workflow: dict[str, Any]) -> set[tuple[str, str]]:
    """The edges a client draws from the catalog's edge fields (graph.js's rule), without the repeat edges."""
    fields = {k["kind"]: k["edges"] for k in build_catalog()["node_kinds"]}
    edges: set[tuple[str, str]] = set()
    for node in workflow["nodes"]:
        for spec in fields[node["kind"]]:
            listed = node.get(spec["field"], [])
            if spec["direction"] == "in":
                edges |= {(a, node["id"]) for a in listed}
            elif spec["direction"] == "out":
                edges |= {(node["id"], b) for b in listed}
            elif listed:
                edges |= {(node["id"], listed[0]), *zip(listed, listed[1:], strict=False)}
    return edges


def test_the_published_edges_are_the_server_graphs() -> None:
    """The catalog's edge fields (from the models' metadata) draw the very edges the server's graph checks."""
    from shared.definitions.graph import Graph
    from shared.definitions.models import Workflow

    wf: dict[str, Any] = {
        "id": "w",
        "name": "W",
        "nodes": [
            {"id": "a", "kind": "tool", "tool": "function.x"},
            {"id": "p", "kind": "parallel", "after": ["a"], "branches": ["b", "c"]},
            {"id": "b", "kind": "step", "step": "consult_rag"},
            {"id": "c", "kind": "agent", "agent": "writer"},
            {"id": "j", "kind": "join", "after": ["b", "c"]},
            {"id": "k", "kind": "condition", "after": ["j"], "if": {"left": "j.results", "op": "truthy"}},
            {"id": "l", "kind": "loop", "after": ["k"], "body": ["m", "n"], "max_iterations": 2},
            {"id": "m", "kind": "human", "question": {"value": "ok?"}},
            {"id": "n", "kind": "workflow", "workflow": "sub"},
        ],
    }
    wf["nodes"][5].update({"then": ["l"], "else": ["a"]})
    graph = Graph.of(Workflow.model_validate(wf))
    assert _catalog_edges(wf) == {(a, b) for a, targets in graph.edges.items() for b in targets}
    kinds = {k["kind"]: k for k in build_catalog()["node_kinds"]}
    # Every node kind's kind-specific summary field is one of its model's fields.
    assert {k: v["summary_field"] for k, v in kinds.items() if v["summary_field"]} == {
        "agent": "agent",
        "step": "step",
        "tool": "tool",
        "workflow": "workflow",
    }
    assert [e["type"] for e in kinds["condition"]["edges"]] == ["after", "then", "else"]


def test_a_node_model_with_an_edge_field_publishes_it() -> None:
    """An Edge marked field of a (throwaway) node model is published with its type, direction and need."""
    from typing import Annotated, Literal

    from api.catalog import node_graph
    from shared.definitions.models import Edge, NodeId, Summary
    from shared.definitions.models import JoinNode as Base

    class RaceNode(Base):
        kind: Literal["race"]  # type: ignore[assignment]
        track: Annotated[str, Summary()] = "oval"
        runners: Annotated[list[NodeId], Edge("runner", "out", "runners", auto=True)] = Field(min_length=1)

    got = node_graph(RaceNode)
    assert got["summary_field"] == "track"
    assert got["edges"][-1] == {
        "field": "runners",
        "type": "runner",
        "direction": "out",
        "label": "runners",
        "auto": True,
        "required": True,
    }


def test_the_reference_syntax_is_the_validators() -> None:
    """What the catalog says of references is what the server's validation reads: renaming by it keeps them valid."""
    from shared.definitions.validate import TEMPLATE_REF

    refs = build_catalog()["references"]
    assert refs["fields"] == ["from", "left"] and refs["template_fields"] == ["template"]
    assert refs["template_pattern"] == TEMPLATE_REF.pattern
    assert re.fullmatch(refs["pattern"], "sales.rows.0") and not re.fullmatch(refs["pattern"], "Sales")
    assert "sales.rows".split(refs["separator"])[0] == "sales" and refs["input"] == "input"


def test_each_step_kind_says_the_shape_of_its_result() -> None:
    """A client renders a step's result by its shape (the result model validation also uses), not by its name."""
    shapes = {k["kind"]: k["result"] for k in build_catalog()["step_kinds"]}
    assert shapes["execute_azure_sql"] == "sql" and shapes["consult_rag"] == "documents"
    assert shapes["generate_response"] == "answer" and shapes["ask_user"] is None


def test_the_providers_and_the_team_schema_come_from_the_models() -> None:
    from shared.definitions.models import ModelChoice, Team

    catalog = build_catalog()
    for provider in catalog["definitions"]["providers"]:
        ModelChoice(provider=provider)
    assert catalog["definitions"]["providers"] == ["offline", "azure_openai", "openai"]
    assert catalog["team_schema"] == Team.model_json_schema()


def test_each_label_group_lists_its_enums_values_with_a_text() -> None:
    from typing import get_args

    from shared.jobs.models import ApprovalPolicy, JobRequest, JobStatus

    labels = build_catalog()["labels"]
    # The values are the enums' (a value the server adds is listed), each with a text of its own today.
    assert list(labels["job_status"]) == list(get_args(JobStatus))
    assert list(labels["mode"]) == list(get_args(JobRequest.model_fields["mode"].annotation))
    assert list(labels["approval.sql"]) == list(get_args(ApprovalPolicy.model_fields["sql"].annotation))
    for group in labels.values():
        assert all(text and text != value for value, text in group.items())
    assert labels["job_status"]["waiting_for_user"] == "Waiting for you"
    # A form's buttons are the options of the question it asks, as the catalog's question_kinds list them.
    options = {q["kind"]: [o["value"] for o in q["options"]] for q in build_catalog()["question_kinds"]}
    assert list(labels["answer.sql"]) == list(labels["answer.code"]) == options["approval"]
    assert list(labels["answer.step_error"]) == options["error"]


def test_a_value_with_no_text_is_labelled_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    from api import catalog

    monkeypatch.setitem(catalog.LABEL_TEXT, "mode", {})
    assert catalog.labels()["mode"] == {"deterministic": "deterministic", "hybrid": "hybrid", "agent": "agent"}
