"""The builder's graph operations (web/builder.js) on their own, run by Node: the checks a connection passes
before it edits the draft (cycle, duplicate, edge type) and what removing a node or an edge takes away.

Node is on every machine that runs the suite (Azurite comes from npm). builder.js and graph.js are copied
beside a package.json that makes them ES modules, as the browser loads them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

WEB = Path(__file__).resolve().parents[2] / "web"

SCRIPT = """
import * as b from './builder.js';
const cases = JSON.parse(process.argv[2]);
const out = cases.map(([op, wf, args]) => {
  if (op === 'problem') return b.connectProblem(wf, ...args);
  if (op === 'type') return b.edgeType(...args);
  b[op](wf, ...args);
  return wf;
});
process.stdout.write(JSON.stringify(out));
"""

LOOPED = {
    "start": "a",
    "nodes": [
        {"id": "a", "kind": "tool"},
        {"id": "l", "kind": "loop", "after": ["a"], "body": ["b", "c"]},
        {"id": "b", "kind": "tool"},
        {"id": "c", "kind": "tool"},
        {"id": "d", "kind": "condition", "after": ["l"], "then": ["e"], "else": ["f"]},
        {"id": "e", "kind": "tool"},
        {"id": "f", "kind": "tool"},
    ],
}


@pytest.fixture(scope="module")
def run_builder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: it comes with the Azurite install (make)")
    root = tmp_path_factory.mktemp("builder")
    for name in ("builder.js", "graph.js"):
        shutil.copy(WEB / name, root / name)
    (root / "package.json").write_text('{"type": "module"}')
    (root / "run.js").write_text(SCRIPT)

    def run(*cases: tuple[str, Any, list[Any]]) -> list[Any]:
        done = subprocess.run(
            [node, "run.js", json.dumps(cases)], cwd=root, capture_output=True, text=True, timeout=30, check=True
        )
        return list(json.loads(done.stdout))

    return run


def test_a_connection_is_checked_before_it_edits(run_builder: Any) -> None:
    cycle, through_body, duplicate, wrong_type, self_edge, unknown, fine = run_builder(
        ("problem", LOOPED, ["e", "a", "after"]),
        ("problem", LOOPED, ["c", "l", "after"]),
        ("problem", LOOPED, ["l", "b", "body"]),
        ("problem", LOOPED, ["a", "e", "branch"]),
        ("problem", LOOPED, ["a", "a", "after"]),
        ("problem", LOOPED, ["a", "zz", "after"]),
        ("problem", LOOPED, ["a", "e", "after"]),
    )
    assert cycle["code"] == "CYCLE" and "(e → a → l → d → e)" in cycle["message"]
    # A loop's repeat edge is no step of a ring, but its body edges are.
    assert through_body["code"] == "CYCLE" and "(c → l → b → c)" in through_body["message"]
    assert duplicate == {"code": "DUPLICATE_EDGE", "message": "l → b is already an edge (body)."}
    assert wrong_type["code"] == "INVALID_EDGE" and "Only a parallel node has branch edges" in wrong_type["message"]
    assert self_edge["code"] == "CYCLE" and unknown["code"] == "UNKNOWN_NODE"
    assert fine is None


def test_auto_edges_follow_the_source_kind(run_builder: Any) -> None:
    kinds = ["parallel", "condition", "loop", "tool", "human"]
    got = run_builder(
        *[("type", None, [{"kind": k}, "auto"]) for k in kinds], ("type", None, [{"kind": "condition"}, "else"])
    )
    assert got == ["branch", "then", "body", "after", "after", "else"]


def test_connect_and_remove_edit_the_list_that_holds_the_edge(run_builder: Any) -> None:
    after, branch, body_cut, else_cut, after_cut, gone = run_builder(
        ("connect", {"nodes": [{"id": "a", "kind": "tool"}, {"id": "b", "kind": "tool"}]}, ["a", "b", "after"]),
        ("connect", {"nodes": [{"id": "p", "kind": "parallel", "branches": []}, {"id": "b"}]}, ["p", "b", "branch"]),
        ("removeEdge", json.loads(json.dumps(LOOPED)), [{"from": "b", "to": "c", "type": "body"}]),
        ("removeEdge", json.loads(json.dumps(LOOPED)), [{"from": "d", "to": "f", "type": "else"}]),
        ("removeEdge", json.loads(json.dumps(LOOPED)), [{"from": "l", "to": "d", "type": "after"}]),
        ("removeNode", json.loads(json.dumps(LOOPED)), ["a"]),
    )
    assert after["nodes"][1] == {"id": "b", "kind": "tool", "after": ["a"]}
    assert branch["nodes"][0]["branches"] == ["b"]
    assert body_cut["nodes"][1]["body"] == ["b"]
    # An emptied optional list goes; a list the kind needs stays (empty).
    assert "else" not in else_cut["nodes"][4] and "after" not in after_cut["nodes"][4]
    # A removed node leaves no edge naming it, and no start.
    assert [n["id"] for n in gone["nodes"]] == ["l", "b", "c", "d", "e", "f"]
    assert "after" not in gone["nodes"][0] and "start" not in gone


def test_a_repeat_edge_is_not_removed_alone(run_builder: Any) -> None:
    (kept,) = run_builder(("removeEdge", json.loads(json.dumps(LOOPED)), [{"from": "c", "to": "l", "type": "repeat"}]))
    assert kept == LOOPED
