"""Pure helpers of a workflow walk: which nodes a node starts, conditions, templates, an agent's structured output.

No I/O and no clock: an output schema is checked with the work bound only (a replay must reach the same verdict).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from shared.definitions.models import Condition, ConditionNode, LoopNode, ParallelNode, StepNode

TEMPLATE_REF = re.compile(r"\{([^{}]*)\}")
# What a template shows of one value, and what a node's output summary shows in the view.
MAX_TEMPLATE_VALUE = 4000


def started_by(node: Any) -> Iterator[str]:
    """The nodes a node starts itself: a condition's then/else, a parallel node's branches, a loop's body."""
    if isinstance(node, ConditionNode):
        yield from [*node.then, *node.else_]
    elif isinstance(node, ParallelNode):
        yield from node.branches
    elif isinstance(node, LoopNode):
        yield from node.body


def kind_of(node: Any) -> str:
    """A node's step kind in the view: a step node shows its executor kind (approvals and edits use it)."""
    if isinstance(node, StepNode):
        return node.step
    return str(node.kind)


def evaluate(cond: Condition, left: Any) -> bool:
    """``left op right`` (a comparison of mismatched types is false, never an error)."""
    right = cond.right
    try:
        if cond.op == "exists":
            return left is not None
        if cond.op == "truthy":
            return bool(left)
        if cond.op == "eq":
            return bool(left == right)
        if cond.op == "ne":
            return bool(left != right)
        if cond.op == "contains":
            return right in left if isinstance(left, str | list | dict) else False
        ops = {"gt": left > right, "ge": left >= right, "lt": left < right, "le": left <= right}
        return bool(ops[cond.op])
    except TypeError:
        return False


def as_text(value: Any) -> str:
    """A value as template text, cut to what a template shows of one value."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:MAX_TEMPLATE_VALUE]


def short(value: Any) -> str | None:
    """What the view shows of a node's output: at most 200 characters."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = str(text)
    return text if len(text) <= 200 else text[:199] + "…"
