"""The producers of steps (orchestrators/*.py) never write the run's state: they call RunRecord's methods."""

from __future__ import annotations

import ast
from pathlib import Path

ORCHESTRATORS = Path(__file__).resolve().parents[2] / "orchestrators"
# Calls that change a list or a dict in place (``run.state.steps.append(step)`` writes the state too).
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "sort", "reverse"}


def _is_state(node: ast.expr) -> bool:
    """``<anything>.state``: the run's state (a step's ``state`` is a string: nothing to write through)."""
    return isinstance(node, ast.Attribute) and node.attr == "state"


def _aliases(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Local names bound to a state (``state = run.state``) and to one of its fields (``steps = run.state.steps``)."""
    states: set[str] = {"state"}
    fields: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if _is_state(value):
                states.add(node.targets[0].id)
            elif isinstance(value, ast.Attribute) and _is_state(value.value):
                fields.add(node.targets[0].id)
    return states, fields


def _state_field(node: ast.expr, states: set[str], fields: set[str], in_place: bool = False) -> str | None:
    """The text of a state field that writing to ``node`` (or changing it in place) writes, or None."""
    text = ast.unparse(node)
    while isinstance(node, ast.Subscript):
        node, in_place = node.value, True
    if isinstance(node, ast.Attribute):
        owner = node.value
        if _is_state(owner) or (isinstance(owner, ast.Name) and owner.id in states):
            return text
    if isinstance(node, ast.Name) and node.id in fields and in_place:
        return text
    return None


def _state_writes(path: Path) -> list[str]:
    """Every write of a state field in one module: assignments, augmented ones, deletes and in-place calls."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    states, fields = _aliases(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        in_place = False
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets += target.elts if isinstance(target, ast.Tuple) else [target]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets, in_place = [node.func.value], True
        for target in targets:
            if (text := _state_field(target, states, fields, in_place)) is not None:
                found.append((getattr(node, "lineno", 0), text))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_no_producer_writes_the_runs_state() -> None:
    offenders = {p.name: lines for p in sorted(ORCHESTRATORS.glob("*.py")) if (lines := _state_writes(p))}
    assert offenders == {}


def test_the_check_sees_each_way_of_writing(tmp_path: Path) -> None:
    module = tmp_path / "producer.py"
    module.write_text(
        "run.state.status = 'running'\n"
        "self.run.state.usage += u\n"
        "run.state.steps[0] = s\n"
        "loop.turns = run.state.turns = 3\n"
        "state.plan_status = 'agent'\n"
        "run.state.steps.append(s)\n"
        "del run.state.quote\n"
        "mine = self.run.state\n"
        "mine.waiting = None\n"
        "steps = run.state.steps\n"
        "steps[1] = s\n"
        "steps.insert(0, s)\n"
        "steps = []\n"  # rebinding a local is no write
        "step.state = 'succeeded'\n"  # a step's own state is the producer's to set
        "x = run.state.steps.index(s)\n"  # reads are fine
    )
    assert _state_writes(module) == [
        "1: run.state.status",
        "2: self.run.state.usage",
        "3: run.state.steps[0]",
        "4: run.state.turns",
        "5: state.plan_status",
        "6: run.state.steps",
        "7: run.state.quote",
        "9: mine.waiting",
        "11: steps[1]",
        "12: steps",
    ]
