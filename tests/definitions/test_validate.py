"""Validation on save, one check at a time: every error names its path, node and a stable code."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.definitions.catalog import Catalog, app_catalog
from shared.definitions.issues import DefinitionInvalid, DefinitionTooLarge, Issue
from shared.definitions.models import MAX_DEFINITION_BYTES, Definition
from shared.definitions.validate import check, parse, validate
from shared.runtime.settings import Settings


class Saved:
    """A resolver over definitions held in a dict (the store is tested against Azurite on its own)."""

    def __init__(self, *items: tuple[str, dict[str, Any]]) -> None:
        self.items: dict[tuple[str, str], list[Definition]] = {}
        for kind, data in items:
            self.add(kind, data)

    def add(self, kind: str, data: dict[str, Any]) -> None:
        self.items.setdefault((kind, data["id"]), []).append(parse(kind, data))

    def find(self, kind: str, def_id: str, version: int | None) -> Definition | None:
        versions = self.items.get((kind, def_id), [])
        if version is None:
            return versions[-1] if versions else None
        return versions[version - 1] if 0 < version <= len(versions) else None


CATALOG = app_catalog(Settings())
WRITER = {"id": "writer", "name": "Writer", "instructions": "Write a short report."}
ANALYST = {
    "id": "analyst",
    "name": "Analyst",
    "instructions": "Analyse sales.",
    "tools": ["execute_azure_sql", "function.growth_rate"],
    "output_schema": {
        "type": "object",
        "properties": {"score": {"type": "number"}, "summary": {"type": "string"}},
        "required": ["score", "summary"],
    },
}
SAVED = Saved(("agent", WRITER), ("agent", ANALYST))


def wf(*nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "flow", "name": "Flow", "inputs": {"region": {"type": "string"}}, "nodes": list(nodes), **extra}


def ask(node_id: str = "ask", **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": "agent", "agent": "analyst", "input": {"prompt": {"from": "input.region"}}, **extra}


def issues(kind: str, data: dict[str, Any], resolver: Saved = SAVED, catalog: Catalog = CATALOG) -> list[Issue]:
    with pytest.raises(DefinitionInvalid) as caught:
        check(kind, data, resolver, catalog)
    return caught.value.issues


def one(kind: str, data: dict[str, Any], resolver: Saved = SAVED) -> Issue:
    found = issues(kind, data, resolver)
    assert len(found) == 1, found
    return found[0]


# ----- valid definitions --------------------------------------------------------------------------------------


GOOD_FLOW = wf(
    ask("ask"),
    {
        "id": "sql",
        "kind": "step",
        "step": "execute_azure_sql",
        "after": ["ask"],
        "input": {"question": {"template": "Sales in {input.region}, summary {ask.summary}"}},
    },
    {"id": "check", "kind": "condition", "after": ["sql"], "if": {"left": "ask.score", "op": "gt", "right": 0.5},
     "then": ["fan"], "else": ["human"]},
    {"id": "human", "kind": "human", "question": {"value": "Go on?"}, "options": ["yes", "no"]},
    {"id": "fan", "kind": "parallel", "branches": ["a", "b"]},
    {"id": "a", "kind": "agent", "agent": "writer", "input": {"prompt": {"from": "ask.summary"}}},
    {"id": "b", "kind": "tool", "tool": "function.growth_rate", "input": {"values": {"value": [1, 2, 3]}}},
    {"id": "join", "kind": "join", "after": ["a", "b"], "on_failure": "continue"},
    {"id": "polish", "kind": "loop", "after": ["join"], "body": ["critic", "fix"], "max_iterations": 3,
     "until": {"left": "critic.text", "op": "contains", "right": "OK"}},
    {"id": "critic", "kind": "agent", "agent": "writer", "input": {"prompt": {"from": "a.text"}}},
    {"id": "fix", "kind": "agent", "agent": "writer", "input": {"prompt": {"from": "critic.text"}}},
    outputs={"report": {"from": "fix.text"}, "rows": {"from": "sql.rows"}},
)  # fmt: skip


def test_a_workflow_with_every_node_kind_is_valid() -> None:
    definition, text = check("workflow", GOOD_FLOW, SAVED, CATALOG)
    assert definition.id == "flow"
    assert '"kind":"loop"' in text and text.isascii()


def test_agents_and_teams_are_valid() -> None:
    check("agent", ANALYST, SAVED, CATALOG)
    team = {"id": "t", "name": "T", "agents": ["analyst"], "strategy": {"type": "parallel", "aggregator": "writer"}}
    check("team", team, SAVED, CATALOG)


# ----- shape (pydantic), with union tags out of the paths --------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (wf({"id": "x", "kind": "nope"}), "nodes.0.kind"),
        (wf(ask(input={"prompt": {"from": "NOT A REF"}})), "nodes.0.input.prompt.from"),
        (wf(ask(agent="Bad Id")), "nodes.0.agent"),
        (wf(ask(colour="red")), "nodes.0.colour"),
        ({**wf(ask()), "nodes": []}, "nodes"),
        (wf({"id": "l", "kind": "loop", "body": ["x"], "max_iterations": 99}), "nodes.0.max_iterations"),
    ],
)
def test_shape_errors_name_the_field(data: dict[str, Any], path: str) -> None:
    found = issues("workflow", data)
    assert found[0].path == path and found[0].code == "INVALID_FIELD", found
    assert "mapping:" not in found[0].message


def test_a_team_strategy_error_names_the_field_without_the_tag() -> None:
    found = issues("team", {"id": "t", "name": "T", "agents": ["writer"], "strategy": {"type": "parallel"}})
    assert [i.path for i in found] == ["strategy.aggregator"]


def test_a_definition_over_the_size_limit_is_too_large() -> None:
    big = {**WRITER, "description": "d" * 1000, "instructions": "x" * 30_000}
    many = wf(*[ask(f"n{i}", title="t" * 200, after=[f"n{i - 1}"] if i else []) for i in range(64)])
    for node in many["nodes"]:
        node["input"] = {f"f{j}": {"template": "y" * 3000} for j in range(2)}
    check("agent", big, SAVED, CATALOG)  # big texts are fine
    with pytest.raises(DefinitionTooLarge) as caught:
        check("workflow", many, SAVED, CATALOG)
    assert caught.value.size > MAX_DEFINITION_BYTES


# ----- agents ----------------------------------------------------------------------------------------------------


def test_unknown_tools() -> None:
    found = issues("agent", {**WRITER, "tools": ["consult_rag", "teleport", "http.nope", "consult_rag"]})
    assert [(i.path, i.code) for i in found] == [
        ("tools.1", "UNKNOWN_TOOL"),
        ("tools.2", "UNKNOWN_TOOL"),
        ("tools.3", "DUPLICATE_TOOL"),
    ]
    assert "consult_rag" in found[0].message and "not configured" in found[1].message


def test_an_output_schema_must_be_a_valid_object_schema() -> None:
    bad = one("agent", {**WRITER, "output_schema": {"type": "object", "properties": {"a": {"type": "nope"}}}})
    assert bad.code == "INVALID_SCHEMA" and bad.path.startswith("output_schema.properties.a")
    scalar = one("agent", {**WRITER, "output_schema": {"type": "string"}})
    assert (scalar.path, scalar.code) == ("output_schema", "INVALID_SCHEMA")


def test_a_provider_the_app_does_not_configure() -> None:
    issue = one("agent", {**WRITER, "model": {"provider": "azure_openai", "model": "gpt-4.1"}})
    assert (issue.path, issue.code) == ("model.provider", "PROVIDER_NOT_CONFIGURED")
    check("agent", {**WRITER, "model": {"provider": "offline"}}, SAVED, CATALOG)


# ----- teams -----------------------------------------------------------------------------------------------------


def test_team_references() -> None:
    data = {
        "id": "t",
        "name": "T",
        "agents": ["writer", "ghost", "writer"],
        "strategy": {"type": "supervisor", "supervisor": "writer", "max_rounds": 3},
    }
    found = issues("team", data)
    assert [(i.path, i.code) for i in found] == [
        ("agents.1", "UNKNOWN_AGENT"),
        ("agents.2", "DUPLICATE_MEMBER"),
        ("strategy.supervisor", "ROLE_IS_MEMBER"),
    ]
    lost = one("team", {**data, "agents": ["analyst"], "strategy": {"type": "parallel", "aggregator": "nobody"}})
    assert (lost.path, lost.code) == ("strategy.aggregator", "UNKNOWN_AGENT")


# ----- workflow graph --------------------------------------------------------------------------------------------


def test_unknown_node_references() -> None:
    found = issues("workflow", wf(ask(after=["ghost"]), start="nowhere"))
    assert [(i.path, i.code) for i in found] == [("start", "UNKNOWN_NODE"), ("nodes.0.after.0", "UNKNOWN_NODE")]
    assert found[1].node == "ask"


def test_duplicate_and_reserved_ids() -> None:
    found = issues("workflow", wf(ask("a"), ask("a", after=["a"]), ask("input")))
    assert [(i.path, i.code) for i in found] == [("nodes.1.id", "DUPLICATE_NODE"), ("nodes.2.id", "RESERVED_ID")]


def test_a_cycle_without_a_loop_node() -> None:
    issue = one("workflow", wf(ask("a"), ask("b", after=["a", "c"]), ask("c", after=["b"])))
    assert (issue.code, issue.node, issue.path) == ("CYCLE", "b", "nodes.1.after")
    assert "b → c → b" in issue.message and "loop" in issue.message


def test_a_back_edge_inside_a_loop_body_is_bounded() -> None:
    loop = {"id": "l", "kind": "loop", "after": ["a"], "body": ["b", "c"], "max_iterations": 2}
    check("workflow", wf(ask("a"), loop, ask("b", after=["c"]), ask("c")), SAVED, CATALOG)


def test_unreachable_nodes() -> None:
    found = issues("workflow", wf(ask("a"), ask("b"), ask("c", after=["b"])))
    assert [(i.path, i.code, i.node) for i in found] == [
        ("nodes.1", "UNREACHABLE_NODE", "b"),
        ("nodes.2", "UNREACHABLE_NODE", "c"),
    ]
    # With b as the start, a is the one cut off.
    assert [i.node for i in issues("workflow", wf(ask("a"), ask("b"), ask("c", after=["b"]), start="b"))] == ["a"]


def test_join_and_loop_shapes() -> None:
    found = issues("workflow", wf(ask("a"), {"id": "j", "kind": "join", "after": ["a"]}))
    assert [(i.path, i.code) for i in found] == [("nodes.1.after", "INVALID_GRAPH")]
    loops = wf(
        ask("a"),
        {"id": "l1", "kind": "loop", "after": ["a"], "body": ["b", "l1"], "max_iterations": 2},
        {"id": "l2", "kind": "loop", "after": ["a"], "body": ["b"], "max_iterations": 2},
        ask("b"),
    )
    assert [(i.path, i.code) for i in issues("workflow", loops)] == [
        ("nodes.1.body.1", "INVALID_GRAPH"),
        ("nodes.2.body.0", "INVALID_GRAPH"),
    ]


# ----- references and types --------------------------------------------------------------------------------------


def test_unknown_agent_and_version() -> None:
    issue = one("workflow", wf(ask(agent="ghost")))
    assert (issue.path, issue.code, issue.node) == ("nodes.0.agent", "UNKNOWN_AGENT", "ask")
    pinned = one("workflow", wf(ask(version=2)))
    assert "version 2" in pinned.message


def test_unknown_step_kind_and_tool_node() -> None:
    found = issues(
        "workflow",
        wf(
            {"id": "s", "kind": "step", "step": "plan", "input": {}},
            {"id": "t", "kind": "tool", "tool": "http.nope", "after": ["s"]},
        ),
    )
    assert [(i.path, i.code) for i in found] == [("nodes.0.step", "UNKNOWN_STEP"), ("nodes.1.tool", "UNKNOWN_TOOL")]
    assert "consult_rag" in found[0].message


def test_step_inputs_follow_the_registry_models() -> None:
    given = {"top_k": {"value": "many"}, "mode": {"value": 1}}
    node = {"id": "s", "kind": "step", "step": "consult_rag", "input": given}
    found = issues("workflow", wf(node))
    assert [(i.path, i.code) for i in found] == [
        ("nodes.0.input.top_k", "TYPE_MISMATCH"),
        ("nodes.0.input.mode", "UNKNOWN_FIELD"),
        ("nodes.0.input.query", "MISSING_INPUT"),
    ]
    assert "expects integer or null, but the value is string" in found[0].message


def test_type_mismatch_between_an_output_and_an_input() -> None:
    node = {"id": "w", "kind": "agent", "agent": "writer", "after": ["ask"], "input": {"prompt": {"from": "ask.score"}}}
    issue = one("workflow", wf(ask(), node))
    assert (issue.path, issue.code, issue.node) == ("nodes.1.input.prompt", "TYPE_MISMATCH", "w")
    assert "expects string, but ask.score is number" in issue.message


def test_references_to_unknown_inputs_fields_and_nodes() -> None:
    found = issues(
        "workflow",
        wf(
            ask("a", input={"prompt": {"from": "input.country"}}),
            ask("b", after=["a"], input={"prompt": {"from": "a.nothing"}}),
            ask("c", after=["b"], input={"prompt": {"template": "{ghost.text} and {input.region}"}}),
        ),
    )
    assert [(i.path, i.code) for i in found] == [
        ("nodes.0.input.prompt.from", "UNKNOWN_INPUT"),
        ("nodes.1.input.prompt.from", "UNKNOWN_FIELD"),
        ("nodes.2.input.prompt.template", "UNKNOWN_NODE"),
    ]
    assert "summary" in found[1].message  # the known fields are listed


def test_a_node_may_read_only_nodes_that_run_before_it() -> None:
    reader = ask("c", after=["a"], input={"prompt": {"from": "b.summary"}})
    found = issues("workflow", wf(ask("a"), ask("b", after=["a"]), reader))
    assert [(i.path, i.code, i.node) for i in found] == [("nodes.2.input.prompt.from", "NOT_UPSTREAM", "c")]


def test_condition_types() -> None:
    def cond(left: str, op: str, right: Any) -> dict[str, Any]:
        return {"id": "c", "kind": "condition", "after": ["ask"], "if": {"left": left, "op": op, "right": right}}

    assert one("workflow", wf(ask(), cond("ask.score", "eq", "high"))).path == "nodes.1.if.right"
    assert one("workflow", wf(ask(), cond("ask.score", "contains", "x"))).path == "nodes.1.if.op"
    assert one("workflow", wf(ask(), cond("ask.missing", "truthy", None))).code == "UNKNOWN_FIELD"
    check("workflow", wf(ask(), cond("ask.score", "ge", 1)), SAVED, CATALOG)


def test_sub_workflows_typed_inputs_and_outputs() -> None:
    saved = copy.deepcopy(SAVED)
    saved.add("workflow", {**wf(ask()), "id": "inner", "outputs": {"score": {"from": "ask.score"}}})
    call = {"id": "sub", "kind": "workflow", "workflow": "inner", "input": {"region": {"value": 3}}}
    use = ask("use", after=["sub"], input={"prompt": {"from": "sub.score"}})
    found = issues("workflow", wf(call, use), saved)
    assert [(i.path, i.code) for i in found] == [
        ("nodes.0.input.region", "TYPE_MISMATCH"),
        ("nodes.1.input.prompt", "TYPE_MISMATCH"),
    ]
    missing = one("workflow", wf({**call, "input": {}}), saved)
    assert (missing.path, missing.code) == ("nodes.0.input.region", "MISSING_INPUT")
    ghost = one("workflow", wf({**call, "workflow": "ghost"}), saved)
    assert ghost.code == "UNKNOWN_WORKFLOW"


def test_sub_workflows_may_not_call_each_other_in_a_ring() -> None:
    saved = copy.deepcopy(SAVED)
    saved.add("workflow", {**wf({"id": "back", "kind": "workflow", "workflow": "flow", "input": {}}), "id": "inner"})
    saved.add("workflow", wf(ask()))  # the saved "flow", before this update
    issue = one("workflow", wf({"id": "sub", "kind": "workflow", "workflow": "inner", "input": {}}), saved)
    assert issue.code == "SUB_WORKFLOW_CYCLE" and "flow → inner → flow" in issue.message


def test_workflow_outputs_are_checked() -> None:
    issue = one("workflow", wf(ask(), outputs={"x": {"from": "ask.nope"}}))
    assert (issue.path, issue.code) == ("outputs.x.from", "UNKNOWN_FIELD")


def test_validate_takes_a_catalog_of_its_own() -> None:
    # A catalog where no step kind exists: the same workflow now names an unknown step.
    node = {"id": "s", "kind": "step", "step": "consult_rag", "input": {"query": {"value": "q"}}}
    definition = parse("workflow", wf(node))
    assert [i.code for i in validate(definition, SAVED, Catalog())] == ["UNKNOWN_STEP"]


def test_a_broken_graph_still_reports_unknown_references_but_no_types() -> None:
    found = issues("workflow", wf(ask("a", agent="ghost"), ask("b", after=["c"]), ask("c", after=["b"])))
    assert [(i.path, i.code) for i in found] == [("nodes.1.after", "CYCLE"), ("nodes.0.agent", "UNKNOWN_AGENT")]


def test_loops_are_entered_and_left_through_the_loop_node() -> None:
    loop = {"id": "l", "kind": "loop", "after": ["a"], "body": ["b"], "max_iterations": 2}
    found = issues("workflow", wf(ask("a"), loop, ask("b"), ask("c", after=["b"])))
    assert [(i.path, i.code, i.node) for i in found] == [("nodes.3.after.0", "INVALID_GRAPH", "c")]
    assert "wait for the loop" in found[0].message
    # A body node waiting for a node that runs only after the loop.
    late = issues("workflow", wf(ask("a"), loop, ask("b", after=["c"]), ask("c", after=["l"])))
    assert ("nodes.2.after.0", "INVALID_GRAPH") in [(i.path, i.code) for i in late]
    check("workflow", wf(ask("a"), loop, ask("b", after=["a"]), ask("c", after=["l"])), SAVED, CATALOG)


def test_a_human_node_must_be_answerable_and_defaults_fit_their_input() -> None:
    human = {"id": "h", "kind": "human", "question": {"value": "ok?"}}
    issue = one("workflow", wf(human))
    assert (issue.path, issue.code) == ("nodes.0.options", "INVALID_FIELD")
    check("workflow", wf({**human, "free_text": True}), SAVED, CATALOG)
    late = one("workflow", wf({**human, "options": ["yes", "no"], "on_timeout": "maybe"}))
    assert (late.path, late.code) == ("nodes.0.on_timeout", "INVALID_FIELD") and "'maybe'" in late.message
    check("workflow", wf({**human, "options": ["yes", "no"], "on_timeout": "no"}), SAVED, CATALOG)
    bad = one(
        "workflow", {**wf(ask()), "inputs": {"region": {"type": "string"}, "n": {"type": "integer", "default": "x"}}}
    )
    assert (bad.path, bad.code) == ("inputs.n.default", "TYPE_MISMATCH")
