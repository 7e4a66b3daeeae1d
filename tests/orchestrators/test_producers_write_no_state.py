"""The producers of steps (orchestrators/*.py) never write the run's state: they call RunRecord's methods."""

from __future__ import annotations

import ast
from pathlib import Path

ORCHESTRATORS = Path(__file__).resolve().parents[2] / "orchestrators"
# Calls that change a list or a dict in place (``run.state.steps.append(step)`` writes the state too).
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "sort", "reverse"}


def _state_field(node: ast.expr) -> str | None:
    """``<anything>.state.<field>`` (or ``state.<field>``, a local alias), through any subscripts: its text."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Attribute):
        return None
    owner = node.value
    if (isinstance(owner, ast.Attribute) and owner.attr == "state") or (
        isinstance(owner, ast.Name) and owner.id == "state"
    ):
        return ast.unparse(node)
    return None


def _state_writes(path: Path) -> list[str]:
    """Every write of a state field in one module: assignments, augmented ones, deletes and in-place calls."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets += target.elts if isinstance(target, ast.Tuple) else [target]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        found += [(getattr(node, "lineno", 0), text) for t in targets if (text := _state_field(t)) is not None]
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
        "step.state = 'succeeded'\n"  # a step's own state is the producer's to set
        "x = run.state.steps.index(s)\n"  # reads are fine
    )
    assert _state_writes(module) == [
        "1: run.state.status",
        "2: self.run.state.usage",
        "3: run.state.steps",
        "4: run.state.turns",
        "5: state.plan_status",
        "6: run.state.steps",
        "7: run.state.quote",
    ]
