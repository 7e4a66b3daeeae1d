"""A fork's edit of its fork point's node: the node with the edited inputs as literal values, checked as any edit.

Used by the fork of a run (orchestrators/fork.py) and by a parallel branch a fork starts at one of its nodes
(orchestrators/workflow.py), which loads its workflow itself.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from orchestrators.outcomes import JobStop
from shared.executors import StepInputError, check_edits, lookup_kinds
from shared.jobs.contracts import ErrorCode


def edited_node(node: Any, edits: dict[str, Any]) -> Any:
    """The fork point's node with a fork's input edits as literal values (checked again here, as any edit).

    A step node (or a lookup tool node) takes its step kind's editable fields, an agent node its prompt; the walk
    then resolves, validates, guards and (SQL) asks approval for the node's input as for any run.
    """
    from shared.definitions.models import AgentNode, StepNode, ToolNode, Value
    from shared.jobs.fork import NODE_EDIT_MODELS

    if isinstance(node, StepNode) or (isinstance(node, ToolNode) and node.tool in lookup_kinds()):
        kind = node.step if isinstance(node, StepNode) else node.tool
        try:
            checked = check_edits(kind, edits)
        except StepInputError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"the fork's edit of {node.id!r}: {exc.message}", node.id) from exc
        mappings = {**node.input, **{k: Value(value=v) for k, v in checked.items()}}
        if "question" in checked and "sql" not in checked:
            mappings.pop("sql", None)  # a new question without new SQL: the statement is drafted again
        return node.model_copy(update={"input": mappings})
    if isinstance(node, AgentNode):
        try:
            prompt = NODE_EDIT_MODELS["agent"].model_validate(edits).model_dump()["prompt"]
        except ValidationError as exc:
            raise JobStop(ErrorCode.BAD_REQUEST, f"the fork's edit of {node.id!r}: {exc}"[:600], node.id) from exc
        return node.model_copy(update={"input": {**node.input, "prompt": Value(value=prompt)}})
    raise JobStop(ErrorCode.BAD_REQUEST, f"a {getattr(node, 'kind', '?')} node takes no input edits", None)
