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

from api.catalog import build_catalog

WEB = Path(__file__).resolve().parents[2] / "web"

SCRIPT = """
import * as b from './builder.js';
import * as g from './graph.js';
import { readFileSync } from 'node:fs';
// The node kinds as GET /api/catalog publishes them: which fields are edges is the server's, not the console's.
g.setNodeKinds(JSON.parse(readFileSync('node_kinds.json', 'utf8')));
const cases = JSON.parse(process.argv[2]);
const out = cases.map(([op, wf, args]) => {
  if (op === 'problem') return b.connectProblem(wf, ...args);
  if (op === 'type') return b.edgeType(...args);
  if (op === 'edges') return g.graphEdges(wf);
  if (op === 'hint') return b.builderHint();
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


# A throwaway node kind with edge fields of its own: a "race" starts its "runners" (a new edge type) and, like a
# loop, walks its "laps" in order and back. Only the catalog knows it; builder.js and graph.js are not changed.
RACE = {
    "kind": "race",
    "schema": {},
    "edges": [
        {"field": "after", "type": "after", "direction": "in", "label": "after", "auto": False, "required": False},
        {
            "field": "runners",
            "type": "runner",
            "direction": "out",
            "label": "runners",
            "auto": True,
            "required": True,
        },
        {"field": "laps", "type": "lap", "direction": "chain", "label": "laps", "auto": False, "required": False},
    ],
    "summary_field": "track",
}


def node_kinds() -> list[dict[str, Any]]:
    """The catalog's node kinds (built by the server's own code), with the throwaway kind added."""
    kinds = list(build_catalog()["node_kinds"])
    return [*kinds, RACE]


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
    (root / "node_kinds.json").write_text(json.dumps(node_kinds()))

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


def test_the_edges_are_the_catalogs(run_builder: Any) -> None:
    """Every edge of the graph comes from the catalog's edge fields, derived from the node models."""
    (edges,) = run_builder(("edges", LOOPED, []))
    assert sorted((e["from"], e["to"], e["type"]) for e in edges) == sorted(
        [
            ("a", "l", "after"),
            ("l", "b", "body"),
            ("b", "c", "body"),
            ("c", "l", "repeat"),
            ("l", "d", "after"),
            ("d", "e", "then"),
            ("d", "f", "else"),
        ]
    )


def test_a_throwaway_node_kind_draws_and_edits_its_edges_with_no_console_change(run_builder: Any) -> None:
    race = {
        "nodes": [
            {"id": "r", "kind": "race", "runners": ["x"], "laps": ["y", "z"]},
            {"id": "x", "kind": "tool"},
            {"id": "y", "kind": "tool"},
            {"id": "z", "kind": "tool"},
            {"id": "w", "kind": "tool"},
        ]
    }
    edges, auto, hint, wrong, added, lap_cut, gone = run_builder(
        ("edges", race, []),
        ("type", None, [{"kind": "race"}, "auto"]),
        ("hint", None, []),
        ("problem", race, ["x", "w", "runner"]),
        ("connect", json.loads(json.dumps(race)), ["r", "w", "runner"]),
        ("removeEdge", json.loads(json.dumps(race)), [{"from": "y", "to": "z", "type": "lap"}]),
        ("removeNode", json.loads(json.dumps(race)), ["x"]),
    )
    assert sorted((e["from"], e["to"], e["type"]) for e in edges) == [
        ("r", "x", "runner"),
        ("r", "y", "lap"),
        ("y", "z", "lap"),
        ("z", "r", "repeat"),
    ]
    assert auto == "runner" and "from a race node a runner edge" in hint
    assert wrong["code"] == "INVALID_EDGE" and "Only a race node has runner edges" in wrong["message"]
    assert added["nodes"][0]["runners"] == ["x", "w"]
    # An emptied optional list goes; a required one stays, empty.
    assert "laps" in lap_cut["nodes"][0] and lap_cut["nodes"][0]["laps"] == ["y"]
    assert gone["nodes"][0]["runners"] == []
