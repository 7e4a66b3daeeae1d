"""Validation on save: every problem of a definition, each with its JSON path, node id, stable code and message.

The field-by-field shape comes from the pydantic models; here come the checks across fields and across
definitions: unknown references (agents, tools, step kinds, sub-workflows, nodes, inputs), cycles not
bounded by a loop node, nodes the start does not reach, and mappings whose source type does not fit the
field they fill. Nothing here does I/O beyond the ``Resolver`` it is given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import ValidationError

from shared.definitions import graph
from shared.definitions.catalog import (
    AGENT_NODE_INPUT,
    AGENT_TEXT_OUTPUT,
    CONDITION_OUTPUT,
    HUMAN_OUTPUT,
    JOIN_OUTPUT,
    LOOP_OUTPUT,
    PARALLEL_OUTPUT,
    TOOL_OUTPUT,
    Catalog,
)
from shared.definitions.issues import DefinitionInvalid, DefinitionTooLarge, Issue
from shared.definitions.limits import team_limit_issues, workflow_limit_issues
from shared.definitions.models import (
    INPUT,
    MAX_DEFINITION_BYTES,
    MODELS,
    NODE_KINDS,
    Agent,
    AgentNode,
    Condition,
    ConditionNode,
    Definition,
    HumanNode,
    JoinNode,
    LoopNode,
    Ref,
    StepNode,
    Team,
    Template,
    ToolNode,
    Value,
    Workflow,
    WorkflowNode,
)
from shared.definitions.models import (
    TEMPLATE_REF as TEMPLATE_REF_PATTERN,
)
from shared.definitions.types import ANY, JsonSchema, compatible, describe, field_schema, object_schema, types_of
from shared.runtime.schema_safety import schema_problems

# Sub-workflows nest at most this deep (a run is a tree of sub-orchestrations).
MAX_NESTING = 8
TEMPLATE_REF = re.compile(TEMPLATE_REF_PATTERN)


class Resolver(Protocol):
    """Finds saved definitions: a version, or the latest one when ``version`` is None."""

    def find(self, kind: str, def_id: str, version: int | None) -> Definition | None:
        """The definition, or None when there is no such (live) definition or version."""


def canonical_json(data: Any) -> str:
    """The compact ASCII JSON a definition is measured and stored as (sorted keys: equal content, equal text)."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=True)


# --- Shape ------------------------------------------------------------------------------------------------


def issue_path(loc: Iterable[Any], error_type: str = "", ctx: dict[str, Any] | None = None) -> str:
    """A pydantic location as a JSON path, without union tags (node kinds, strategy types, mapping shapes)."""
    parts = [str(p) for p in loc]
    if len(parts) > 2 and parts[0] == "nodes" and parts[2] in NODE_KINDS:
        del parts[2]
    if len(parts) > 1 and parts[0] == "strategy" and parts[1] in ("sequential", "parallel", "supervisor"):
        del parts[1]
    parts = [p for p in parts if ":" not in p]
    if error_type == "union_tag_invalid" and ctx:  # the tag itself is the offending field
        parts.append(str(ctx.get("discriminator", "kind")).strip("'"))
    return ".".join(parts)


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind == "union_tag_invalid":
        return f"must be one of {error['ctx']['expected_tags']}"
    return str(error["msg"]).replace("Input should be", "must be").replace("Value error, ", "")


def parse(kind: str, data: Any) -> Definition:
    """The typed definition of ``kind``; DefinitionInvalid lists every shape problem."""
    if not isinstance(data, dict):
        raise DefinitionInvalid([Issue("", "INVALID_FIELD", f"a {kind} definition must be a JSON object")])
    if data.get("kind", kind) != kind:
        raise DefinitionInvalid([Issue("kind", "INVALID_FIELD", f"kind must be {kind!r} here")])
    try:
        return MODELS[kind].model_validate(data)
    except ValidationError as exc:
        issues = []
        for error in exc.errors(include_url=False):
            path = issue_path(error["loc"], error["type"], error.get("ctx"))
            issues.append(Issue(path, "INVALID_FIELD", f"{path or 'the definition'} {_message(error)}"))
        raise DefinitionInvalid(issues) from None


def check_size(definition: Definition) -> str:
    """The stored text of a definition; DefinitionTooLarge over the limit."""
    text = canonical_json(definition.model_dump(mode="json", by_alias=True, exclude_defaults=True))
    if len(text) > MAX_DEFINITION_BYTES:
        raise DefinitionTooLarge(len(text))
    return text


# --- Entry point ------------------------------------------------------------------------------------------


def validate(definition: Definition, resolver: Resolver, catalog: Catalog) -> list[Issue]:
    """Every problem of a (shape-valid) definition against the saved ones and the app; empty when it is good."""
    if isinstance(definition, Agent):
        return AgentCheck(definition, catalog).run()
    if isinstance(definition, Team):
        return _check_team(definition, resolver) + team_limit_issues(definition, catalog.run_limits)
    return WorkflowCheck(definition, resolver, catalog).run() + _run_limit_issues(definition, resolver, catalog)


def _run_limit_issues(workflow: Workflow, resolver: Resolver, catalog: Catalog) -> list[Issue]:
    """The workflow's static worst case against the app's run limits (shared/definitions/limits.py)."""
    return workflow_limit_issues(workflow, resolver, catalog.run_limits)


def check(kind: str, data: Any, resolver: Resolver, catalog: Catalog) -> tuple[Definition, str]:
    """Parse, measure and validate a definition; its stored text, or DefinitionInvalid / DefinitionTooLarge."""
    definition = parse(kind, data)
    text = check_size(definition)
    issues = validate(definition, resolver, catalog)
    if issues:
        raise DefinitionInvalid(issues)
    return definition, text


# --- Agents -----------------------------------------------------------------------------------------------


class AgentCheck:
    """The checks of one agent."""

    def __init__(self, agent: Agent, catalog: Catalog) -> None:
        self.agent = agent
        self.catalog = catalog
        self.issues: list[Issue] = []

    def run(self) -> list[Issue]:
        """Every problem of the agent."""
        self._tools()
        self._schema()
        provider = self.agent.model.provider
        if provider is not None and provider not in ("offline", self.catalog.llm_provider):
            self.issues.append(
                Issue(
                    "model.provider",
                    "PROVIDER_NOT_CONFIGURED",
                    f"provider {provider!r} is not configured on this app (LLM_PROVIDER is "
                    f"{self.catalog.llm_provider!r}; 'offline' is always there)",
                )
            )
        return self.issues

    def _tools(self) -> None:
        seen: set[str] = set()
        for index, name in enumerate(self.agent.tools):
            path = f"tools.{index}"
            if name in seen:
                self.issues.append(Issue(path, "DUPLICATE_TOOL", f"tool {name!r} is listed twice"))
            seen.add(name)
            problem = tool_problem(name, self.catalog)
            if problem:
                self.issues.append(Issue(path, "UNKNOWN_TOOL", problem))

    def _schema(self) -> None:
        schema = self.agent.output_schema
        if schema is None:
            return
        problems = schema_issues("output_schema", schema)
        if problems:
            self.issues.extend(problems)
            return
        if types_of(schema) != {"object"}:
            self.issues.append(
                Issue("output_schema", "INVALID_SCHEMA", 'output_schema must describe an object ("type": "object")')
            )


def schema_issues(prefix: str, schema: Any) -> list[Issue]:
    """Why a schema in a definition may not be saved: not a valid JSON Schema, or not safe to run (see
    shared/runtime/schema_safety.py: local references only, RE2 patterns, bounded size), each with its path."""
    issues = []
    for problem in schema_problems(schema):
        code = "INVALID_SCHEMA" if problem.invalid else "UNSAFE_SCHEMA"
        issues.append(Issue(problem.at(prefix), code, f"{problem.at(prefix)}: {problem.message}"))
    return issues


def tool_problem(name: str, catalog: Catalog) -> str | None:
    """Why an agent or tool node may not name this tool (None: it may)."""
    if name in catalog.step_inputs:
        return None
    if "." not in name:
        known = ", ".join(catalog.step_kinds())
        return f"{name!r} is neither a step kind ({known}) nor a family tool (<family>.<name>)"
    return catalog.tool_problem(name)


def agent_output(agent: Agent) -> JsonSchema:
    """What an agent node produces: the agent's output schema, or its text."""
    return agent.output_schema if agent.output_schema is not None else AGENT_TEXT_OUTPUT


# --- Teams ------------------------------------------------------------------------------------------------


def _check_team(team: Team, resolver: Resolver) -> list[Issue]:
    issues: list[Issue] = []
    seen: set[str] = set()
    for index, member in enumerate(team.agents):
        if member in seen:
            issues.append(Issue(f"agents.{index}", "DUPLICATE_MEMBER", f"agent {member!r} is a member twice"))
        seen.add(member)
        if resolver.find("agent", member, None) is None:
            issues.append(Issue(f"agents.{index}", "UNKNOWN_AGENT", f"there is no agent {member!r}"))
    strategy = team.strategy
    role = getattr(strategy, "aggregator", None) or getattr(strategy, "supervisor", None)
    field = "aggregator" if getattr(strategy, "aggregator", None) else "supervisor"
    if role is not None:
        path = f"strategy.{field}"
        if resolver.find("agent", role, None) is None:
            issues.append(Issue(path, "UNKNOWN_AGENT", f"there is no agent {role!r}"))
        if role in seen:
            issues.append(Issue(path, "ROLE_IS_MEMBER", f"the {field} {role!r} must not also be a member"))
    return issues


# --- Workflows --------------------------------------------------------------------------------------------


# JSON type of a literal, by Python type (bool before int: True is an int too).
_LITERAL_TYPES: tuple[tuple[type | None, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _literal_schema(value: Any) -> JsonSchema:
    if value is None:
        return {"type": "null"}
    for python_type, kind in _LITERAL_TYPES:
        if python_type is not None and isinstance(value, python_type):
            return {"type": kind}
    return ANY


def _comparable(right: JsonSchema, left: JsonSchema) -> bool:
    """Whether a literal may be compared with a value of schema ``left`` (any two numbers may)."""
    numbers = {"number", "integer"}
    kinds, other = types_of(right) or set(), types_of(left) or set()
    return (bool(kinds) and kinds <= numbers and bool(other & numbers)) or compatible(right, left)


class WorkflowCheck:
    """The checks of one workflow: graph, references, types."""

    def __init__(self, workflow: Workflow, resolver: Resolver, catalog: Catalog, depth: int = 0) -> None:
        self.wf = workflow
        self.resolver = resolver
        self.catalog = catalog
        self.depth = depth
        self.issues: list[Issue] = []
        self.index = {node.id: i for i, node in reversed(list(enumerate(workflow.nodes)))}
        self.nodes = {node.id: node for node in reversed(workflow.nodes)}
        self.graph = graph.Graph.of(workflow)
        self.outputs: dict[str, JsonSchema] = {}
        self.typed = True

    def add(self, path: str, code: str, message: str, node: str | None = None) -> None:
        """Record one issue."""
        self.issues.append(Issue(path, code, message, node))

    def node_path(self, node_id: str, rest: str = "") -> str:
        """The JSON path of a node (or of one of its fields)."""
        base = f"nodes.{self.index[node_id]}"
        return f"{base}.{rest}" if rest else base

    def run(self) -> list[Issue]:
        """Every problem of the workflow."""
        self.issues.extend(graph.structure_issues(self.wf, self.graph))
        # On a broken graph, what runs before what means little: only the references to other definitions,
        # step kinds and tools are checked, not the mappings.
        self.typed = not self.issues
        self._input_defaults()
        self.outputs = {node.id: self.output_of(node) for node in self.wf.nodes}
        for node in self.wf.nodes:
            self._node(node)
        if self.typed:
            for name, mapping in self.wf.outputs.items():
                self.mapping(f"outputs.{name}", mapping, ANY, None)
        return self.issues

    # --- what each node produces and needs -------------------------------------------------------------

    def output_of(self, node: Any) -> JsonSchema:
        """The output schema of a node (unknown references give any)."""
        if isinstance(node, AgentNode):
            agent = self.resolver.find("agent", node.agent, node.version)
            return agent_output(agent) if isinstance(agent, Agent) else ANY
        if isinstance(node, StepNode):
            return self.catalog.step_outputs.get(node.step, ANY)
        if isinstance(node, WorkflowNode):
            sub = self.resolver.find("workflow", node.workflow, node.version)
            if not isinstance(sub, Workflow) or self.depth >= MAX_NESTING or sub.id == self.wf.id:
                return ANY
            return WorkflowCheck(sub, self.resolver, self.catalog, self.depth + 1).output_schema()
        fixed: dict[type, JsonSchema] = {
            ToolNode: TOOL_OUTPUT,
            HumanNode: HUMAN_OUTPUT,
            ConditionNode: CONDITION_OUTPUT,
            JoinNode: JOIN_OUTPUT,
            LoopNode: LOOP_OUTPUT,
        }
        return fixed.get(type(node), PARALLEL_OUTPUT)

    def output_schema(self) -> JsonSchema:
        """The schema of this workflow's outputs, as a sub-workflow node produces them."""
        self.outputs = {node.id: self.output_of(node) for node in self.wf.nodes}
        fields: dict[str, JsonSchema] = {}
        for name, mapping in self.wf.outputs.items():
            fields[name] = self.source_schema(mapping, None) or ANY
        return object_schema(fields)

    def _node(self, node: Any) -> None:
        if isinstance(node, AgentNode):
            self._agent_node(node)
        elif isinstance(node, StepNode):
            self._step_node(node)
        elif isinstance(node, ToolNode):
            self._tool_node(node)
        elif isinstance(node, HumanNode):
            self._human_node(node)
        elif isinstance(node, WorkflowNode):
            self._workflow_node(node)
        elif isinstance(node, ConditionNode):
            self.condition(self.node_path(node.id, "if"), node.if_, node.id)
        elif isinstance(node, LoopNode) and node.until is not None:
            self.condition(self.node_path(node.id, "until"), node.until, node.id)

    def _human_node(self, node: HumanNode) -> None:
        if not node.options and not node.free_text:
            message = f"human node {node.id!r} needs options or free_text: true, or nobody can answer it"
            self.add(self.node_path(node.id, "options"), "INVALID_FIELD", message, node.id)
        if node.on_timeout is not None and not node.free_text and node.on_timeout not in node.options:
            message = f"human node {node.id!r}: on_timeout {node.on_timeout!r} is not one of its options"
            self.add(self.node_path(node.id, "on_timeout"), "INVALID_FIELD", message, node.id)
        if self.typed:
            self.mapping(self.node_path(node.id, "question"), node.question, {"type": "string"}, node.id)

    def _input_defaults(self) -> None:
        for name, spec in self.wf.inputs.items():
            if spec.default is not None and not compatible(_literal_schema(spec.default), {"type": spec.type}):
                found = describe(_literal_schema(spec.default))
                message = f"the default of input {name!r} is {found}, not {spec.type}"
                self.add(f"inputs.{name}.default", "TYPE_MISMATCH", message)

    def _agent_node(self, node: AgentNode) -> None:
        if self.resolver.find("agent", node.agent, node.version) is None:
            which = f"version {node.version} of agent" if node.version else "agent"
            self.add(self.node_path(node.id, "agent"), "UNKNOWN_AGENT", f"there is no {which} {node.agent!r}", node.id)
        self.inputs(node.id, node.input, AGENT_NODE_INPUT)

    def _step_node(self, node: StepNode) -> None:
        schema = self.catalog.step_inputs.get(node.step)
        if schema is None:
            known = ", ".join(self.catalog.step_kinds())
            self.add(
                self.node_path(node.id, "step"),
                "UNKNOWN_STEP",
                f"unknown step kind {node.step!r}; known: {known}",
                node.id,
            )
            return
        self.inputs(node.id, node.input, schema)

    def _tool_node(self, node: ToolNode) -> None:
        problem = tool_problem(node.tool, self.catalog)
        if problem:
            self.add(self.node_path(node.id, "tool"), "UNKNOWN_TOOL", problem, node.id)
            return
        schema = self.catalog.step_inputs.get(node.tool) or self.catalog.tool_input(node.tool)
        self.inputs(node.id, node.input, schema if schema is not None else {"type": "object"})

    def _workflow_node(self, node: WorkflowNode) -> None:
        path = self.node_path(node.id, "workflow")
        sub = self.resolver.find("workflow", node.workflow, node.version)
        if sub is None or not isinstance(sub, Workflow):
            which = f"version {node.version} of workflow" if node.version else "workflow"
            self.add(path, "UNKNOWN_WORKFLOW", f"there is no {which} {node.workflow!r}", node.id)
            return
        chain = self.nesting(sub, [self.wf.id])
        if chain:
            self.add(path, "SUB_WORKFLOW_CYCLE", f"workflows call each other in a ring: {' → '.join(chain)}", node.id)
            return
        fields = {name: {"type": spec.type} for name, spec in sub.inputs.items()}
        required = [name for name, spec in sub.inputs.items() if spec.required and spec.default is None]
        self.inputs(node.id, node.input, object_schema(fields, required))

    def nesting(self, sub: Workflow, chain: list[str]) -> list[str]:
        """The ring of workflow ids when ``sub`` leads back to one in ``chain`` (or nests too deep); else []."""
        chain = [*chain, sub.id]
        if sub.id in chain[:-1]:
            return chain
        if len(chain) > MAX_NESTING:
            return [*chain, "… (nested too deep)"]
        for node in sub.nodes:
            if isinstance(node, WorkflowNode):
                inner = self.resolver.find("workflow", node.workflow, node.version)
                if isinstance(inner, Workflow):
                    found = self.nesting(inner, chain)
                    if found:
                        return found
        return []

    # --- mappings, references, conditions ----------------------------------------------------------------

    def inputs(self, node_id: str, given: dict[str, Any], target: JsonSchema) -> None:
        """Check a node's input mappings against the schema of what it accepts."""
        if not self.typed:
            return
        props = target.get("properties") if isinstance(target.get("properties"), dict) else None
        for name, mapping in given.items():
            path = self.node_path(node_id, f"input.{name}")
            if props is not None and name not in props and target.get("additionalProperties") is not True:
                known = ", ".join(sorted(props)) or "none"
                self.add(path, "UNKNOWN_FIELD", f"node {node_id!r} takes no input {name!r} (inputs: {known})", node_id)
                continue
            want = field_schema(target, [name])
            self.mapping(path, mapping, want if isinstance(want, dict) else ANY, node_id)
        for name in target.get("required", []) if isinstance(target.get("required"), list) else []:
            if name not in given:
                path = self.node_path(node_id, f"input.{name}")
                self.add(path, "MISSING_INPUT", f"node {node_id!r} needs input {name!r}", node_id)

    def mapping(self, path: str, mapping: Any, target: JsonSchema, node_id: str | None) -> None:
        """Check one mapping: its references resolve (upstream of the node) and its type fits ``target``."""
        source = self.source_schema(mapping, node_id, path)
        if source is None:
            return
        if not compatible(source, target):
            what = mapping.from_ if isinstance(mapping, Ref) else "the value"
            self.add(
                path,
                "TYPE_MISMATCH",
                f"{path} expects {describe(target)}, but {what} is {describe(source)}",
                node_id,
            )

    def source_schema(self, mapping: Any, node_id: str | None, path: str | None = None) -> JsonSchema | None:
        """The schema of what a mapping produces (None after recording an issue, when ``path`` is given)."""
        if isinstance(mapping, Value):
            return _literal_schema(mapping.value)
        if isinstance(mapping, Template):
            ok = True
            for ref in TEMPLATE_REF.findall(mapping.template):
                ok = self.reference(ref.strip(), node_id, f"{path}.template" if path else None) is not None and ok
            return {"type": "string"} if ok else None
        if isinstance(mapping, Ref):
            return self.reference(mapping.from_, node_id, f"{path}.from" if path else None)
        return ANY

    def reference(self, ref: str, node_id: str | None, path: str | None) -> JsonSchema | None:
        """The schema of a reference ``input.x`` / ``node.field``, recording why it does not resolve."""
        head, *rest = ref.split(".")
        problem: str | None = None
        code = "UNKNOWN_FIELD"
        if head == INPUT:
            schema, problem, code = self._input_ref(rest)
        elif head not in self.nodes:
            schema, problem, code = (
                ANY,
                f"{ref!r} names no node and no input (nodes: {', '.join(self.nodes)})",
                "UNKNOWN_NODE",
            )
        elif node_id is not None and not self.graph.runs_before(head, node_id):
            schema, problem, code = (
                ANY,
                f"node {node_id!r} reads {ref!r}, but {head!r} does not run before it",
                "NOT_UPSTREAM",
            )
        else:
            found = field_schema(self.outputs.get(head, ANY), rest)
            schema, problem = (found, None) if isinstance(found, dict) else (ANY, f"{ref!r}: {found}")
        if problem is not None:
            if path is not None:
                self.add(path, code, problem, node_id)
            return None
        return schema

    def _input_ref(self, rest: list[str]) -> tuple[JsonSchema, str | None, str]:
        if not rest:
            fields = {name: {"type": spec.type} for name, spec in self.wf.inputs.items()}
            return object_schema(fields), None, ""
        spec = self.wf.inputs.get(rest[0])
        if spec is None:
            known = ", ".join(self.wf.inputs) or "none"
            return ANY, f"the workflow has no input {rest[0]!r} (inputs: {known})", "UNKNOWN_INPUT"
        found = field_schema({"type": spec.type}, rest[1:])
        if isinstance(found, str):
            return ANY, f"input.{rest[0]}: {found}", "UNKNOWN_FIELD"
        return found, None, ""

    def condition(self, path: str, cond: Condition, node_id: str) -> None:
        """Check a condition: its left side resolves, and the operator and right side fit its type."""
        if not self.typed:
            return
        left = self.reference(cond.left, node_id, f"{path}.left")
        if left is None or cond.op in ("exists", "truthy"):
            return
        kinds = types_of(left)
        if kinds is None:
            return
        if cond.op in ("gt", "ge", "lt", "le") and not kinds & {"number", "integer", "string"}:
            self.add(
                f"{path}.op",
                "TYPE_MISMATCH",
                f"{cond.op} compares numbers or strings, {cond.left} is {describe(left)}",
                node_id,
            )
        elif cond.op == "contains" and not kinds & {"string", "array", "object"}:
            self.add(
                f"{path}.op",
                "TYPE_MISMATCH",
                f"contains needs a string, list or object, {cond.left} is {describe(left)}",
                node_id,
            )
        elif cond.op != "contains" and not _comparable(_literal_schema(cond.right), left):
            self.add(
                f"{path}.right",
                "TYPE_MISMATCH",
                f"{cond.left} is {describe(left)}, it cannot be compared with {describe(_literal_schema(cond.right))}",
                node_id,
            )
