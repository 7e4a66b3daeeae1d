"""The replay gate: replay recorded orchestration histories against today's code, before a deploy.

``python -m devhost replay [--app DIR] [PATH ...]`` loads the app as the host does (without serving it),
then re-runs each recorded instance's orchestrator over its whole history through the SDK, the way an
episode does, and diffs what it schedules against what the history recorded. A PATH is a recorded
fixture (a JSON file, or a folder of them) or a devhost state folder (``.devhost``), whose in-flight
instances are replayed. Each instance whose replay would fail is named with the reason; exit code 1 then.

The rule is the engine's: actions are flattened depth-first (WhenAll/WhenAny replaced by their children)
and compared in sequence-number order with the history's scheduling events; a different action type or
name, or a recorded action the replay no longer schedules, is the non-determinism that would break a job
in flight. A finished instance must finish again; a running one must not finish without new events.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devhost.durable.actions import describe, flatten
from devhost.functions.model import AppLoadError

# History event type that records a scheduled action → the action types it records.
SCHEDULING_EVENTS = {4: (0, 1, 8), 7: (2, 3), 10: (5,), 14: (7, 9)}
OUT_OF_PROC_MARKER = "$OutOfProcData$:"
# Actions that take no sequence number, so the history holds no scheduling event for them.
UNNUMBERED = {4, 6}
# Instance statuses whose history may still grow: the ones a deploy can break.
IN_FLIGHT = ("Running", "Suspended")
EXIT_OK, EXIT_BROKEN, EXIT_USAGE = 0, 1, 2

Handle = Callable[[str], str]


@dataclass(frozen=True)
class Recorded:
    """One instance's recorded orchestration: the history the SDK replays, and where it came from."""

    instance_id: str
    orchestrator: str
    runtime_status: str
    input: str | None
    history: list[dict[str, Any]]
    source: str
    parent_instance_id: str | None = None


@dataclass(frozen=True)
class Replay:
    """What a replay produced: the orchestrator's state and the first mismatch, if any."""

    state: dict[str, Any]
    mismatch: str | None


@dataclass(frozen=True)
class Verdict:
    """The gate's word on one instance: ``problem`` is None when its replay would succeed."""

    recorded: Recorded
    problem: str | None

    @property
    def ok(self) -> bool:
        """True when today's code replays the instance unchanged."""
        return self.problem is None


def recorded_actions(history: list[dict[str, Any]]) -> list[tuple[int, str | None, int]]:
    """(action type, name, sequence id) of every action the history scheduled, in sequence order."""
    out: list[tuple[int, str | None, int]] = []
    for event in history:
        types = SCHEDULING_EVENTS.get(event["EventType"])
        if types is None:
            continue
        name = event.get("Name") if event["EventType"] in (4, 7) else None
        out.append((types[0], name, int(event["EventId"])))
    return sorted(out, key=lambda r: r[2])


def _not_deterministic(recorded: str, seq: int, index: int, instead: str) -> str:
    return (
        "Non-deterministic workflow detected: a previous execution of this orchestration scheduled "
        f"{recorded} (sequence ID {seq}, action #{index}), but the current replay execution {instead}. "
        "Orchestrator code must be deterministic; was it changed while this instance was running?"
    )


def first_mismatch(recorded: list[tuple[int, str | None, int]], replayed: list[dict[str, Any]]) -> str | None:
    """The first numbered action that differs from the recorded one, said as the engine says it."""
    numbered = [a for a in replayed if a.get("actionType") not in UNNUMBERED]
    for i, (rec_type, rec_name, seq) in enumerate(recorded):
        if i >= len(numbered):
            return _not_deterministic(describe(rec_type, rec_name), seq, i, "hasn't scheduled it")
        action = numbered[i]
        act_type = int(action.get("actionType", -1))
        act_name = action.get("functionName") if act_type in (0, 1, 2, 3) else None
        # The history cannot tell CallActivity from CallActivityWithRetry (nor the two sub-orchestration calls).
        same_type = act_type == rec_type or {act_type, rec_type} <= {0, 1} or {act_type, rec_type} <= {2, 3}
        if not same_type or (rec_name or "").lower() != (act_name or "").lower():
            instead = f"scheduled {describe(act_type, act_name)} there instead"
            return _not_deterministic(describe(rec_type, rec_name), seq, i, instead)
    return None


def context_json(recorded: Recorded) -> str:
    """The context the host hands the SDK: the whole recorded history, every event already played."""
    history = [{**event, "IsPlayed": True} for event in recorded.history]
    return json.dumps(
        {
            "history": history,
            # The stored input is JSON text of the value the host passes.
            "input": json.loads(recorded.input) if recorded.input is not None else None,
            "instanceId": recorded.instance_id,
            "isReplaying": True,
            "parentInstanceId": recorded.parent_instance_id,
            "upperSchemaVersion": 1,
            "upperSchemaVersionNew": 2,
        }
    )


def replay(recorded: Recorded, handle: Handle) -> Replay:
    """Run the orchestrator over the recorded history and diff what it schedules against what was recorded."""
    try:
        state = json.loads(handle(context_json(recorded)))
    except Exception as exc:  # an orchestrator that raised: its state rides in the message, as the host reads it
        text = str(exc)
        at = text.find(OUT_OF_PROC_MARKER)
        state = json.loads(text[at + len(OUT_OF_PROC_MARKER) :]) if at >= 0 else {"error": text}
    replayed = flatten(state.get("actions") or [], [])
    scheduled = recorded_actions(recorded.history)
    mismatch = first_mismatch(scheduled, replayed)
    extra = [a for a in replayed if a.get("actionType") not in UNNUMBERED][len(scheduled) :]
    if mismatch is None and extra and recorded.runtime_status not in IN_FLIGHT:
        action = extra[0]
        mismatch = (
            "Non-deterministic workflow detected: the recorded execution had finished, but the current replay "
            f"execution scheduled {describe(int(action['actionType']), action.get('functionName'))} after it."
        )
    return Replay(state, mismatch)


def judge(recorded: Recorded, handle: Handle) -> Verdict:
    """Replay one instance and say what, if anything, would break it."""
    result = replay(recorded, handle)
    if result.mismatch is not None:
        return Verdict(recorded, result.mismatch)
    error = result.state.get("error")
    finished = _finished(recorded.history)
    if error and recorded.runtime_status != "Failed":
        return Verdict(recorded, f"the orchestrator now fails on this history: {str(error)[:500]}")
    if finished and not result.state.get("isDone"):
        return Verdict(recorded, "the recorded execution had finished, but the replay no longer finishes")
    if not finished and result.state.get("isDone") and not error:
        return Verdict(recorded, "the recorded execution is still running, but the replay finishes without it")
    return Verdict(recorded, None)


def _finished(history: list[dict[str, Any]]) -> bool:
    # ExecutionCompleted (1), ExecutionFailed (2) or ExecutionTerminated (3) closes a recorded execution.
    return any(e.get("EventType") in (1, 2, 3) for e in history)


def load_fixture(path: Path) -> Recorded:
    """A recorded fixture: ``{orchestrator, instance_id, runtime_status, input, history}`` as JSON."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return Recorded(
        instance_id=str(data["instance_id"]),
        orchestrator=str(data["orchestrator"]),
        runtime_status=str(data["runtime_status"]),
        input=data.get("input"),
        history=list(data["history"]),
        source=str(path),
        parent_instance_id=data.get("parent_instance_id"),
    )


def stored_instances(db_path: Path, statuses: Sequence[str] = IN_FLIGHT) -> list[Recorded]:
    """The instances of one devhost store (read-only, beside a running host) in the given statuses."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        marks = ",".join("?" for _ in statuses)
        rows = db.execute(
            f"SELECT instance_id, name, status, input, parent_id FROM instances WHERE status IN ({marks}) ORDER BY ord",
            tuple(statuses),
        ).fetchall()
        out = []
        for instance_id, name, status, input_text, parent_id in rows:
            if instance_id.startswith("@"):  # an entity: nothing to replay
                continue
            bodies = db.execute("SELECT body FROM history WHERE instance_id=? ORDER BY idx", (instance_id,))
            history = [json.loads(b) for (b,) in bodies]
            if history:  # a pending instance has run nothing yet
                out.append(Recorded(instance_id, name, status, input_text, history, str(db_path), parent_id))
        return out
    finally:
        db.close()


def collect(paths: Iterable[Path], statuses: Sequence[str] = IN_FLIGHT) -> list[Recorded]:
    """Every recorded instance under the given fixture files, fixture folders and devhost state folders."""
    out: list[Recorded] = []
    for path in paths:
        if path.is_file() and path.suffix == ".sqlite3":
            out.extend(stored_instances(path, statuses))
        elif path.is_file():
            out.append(load_fixture(path))
        elif path.is_dir() and any(path.glob("durable-*.sqlite3")):
            for db_path in sorted(path.glob("durable-*.sqlite3")):
                out.extend(stored_instances(db_path, statuses))
        elif path.is_dir():
            out.extend(load_fixture(p) for p in sorted(path.glob("*.json")))
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    return out


def orchestrator_handles(app_dir: Path) -> dict[str, Handle]:
    """The app's orchestrator functions by durable name (lower-case), loaded as the host loads them."""
    from devhost.functions.loader import load_app  # noqa: PLC0415 - loading an app imports it: only when asked

    previous = Path.cwd()
    os.chdir(app_dir)  # the SDK reads host.json from the working directory, as under the worker
    try:
        app = load_app(app_dir)
    finally:
        os.chdir(previous)
    return {(fn.durable_name or fn.name).lower(): fn.user_function for fn in app.functions if fn.kind == "orchestrator"}


def gate(handles: dict[str, Handle], instances: Iterable[Recorded]) -> list[Verdict]:
    """Judge every instance against the app's orchestrators."""
    verdicts = []
    for recorded in instances:
        handle = handles.get(recorded.orchestrator.lower())
        if handle is None:
            problem = f"the app has no orchestrator named '{recorded.orchestrator}' any more"
            verdicts.append(Verdict(recorded, problem))
        else:
            verdicts.append(judge(recorded, handle))
    return verdicts


def gate_durabletask(module_name: str, app_dir: Path, instances: Iterable[Recorded]) -> list[Verdict]:
    """Judge every instance under the ``durabletask`` SDK's executor, with the orchestrators of a ported module."""
    # Imported only when asked: durabletask (and grpc) are the gRPC line's, not every app's.
    from devhost.durable.sidecar import replay as across  # noqa: PLC0415

    ported = across.orchestrators(across.load_module(module_name, app_dir))
    verdicts = []
    for recorded in instances:
        fn = ported.get(recorded.orchestrator.lower())
        if fn is None:
            problem: str | None = f"{module_name} has no orchestrator named '{recorded.orchestrator}'"
        else:
            failed = recorded.runtime_status == "Failed"
            problem = across.judge(recorded.instance_id, recorded.history, fn, failed)
        verdicts.append(Verdict(recorded, problem))
    return verdicts


def report(verdicts: Sequence[Verdict]) -> str:
    """One line per instance and a summary, for a terminal or a CI log."""
    lines = []
    for v in verdicts:
        r = v.recorded
        where = f"{r.instance_id} ({r.orchestrator}, {r.runtime_status}, {len(r.history)} events) from {r.source}"
        lines.append(f"ok      {where}" if v.ok else f"BREAKS  {where}\n        {v.problem}")
    broken = sum(not v.ok for v in verdicts)
    lines.append(f"{len(verdicts) - broken} of {len(verdicts)} instances replay unchanged; {broken} would break.")
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    """The ``replay`` command of ``python -m devhost``."""
    p = sub.add_parser(
        "replay",
        help="replay recorded histories against the app's current code; name each instance a deploy would break",
    )
    p.add_argument(
        "paths", nargs="*", help="fixture JSON files or folders, or devhost state folders (default: the app's .devhost)"
    )
    p.add_argument("--app", default=".", help="app root containing function_app.py (default: cwd)")
    p.add_argument("--all", action="store_true", help="in a state folder, replay finished instances too")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument(
        "--durabletask",
        metavar="MODULE",
        default=None,
        help=(
            "replay under the durabletask SDK's executor (the gRPC line) with the orchestrators of MODULE (a dotted "
            "name importable from --app; each named as the recorded orchestration), instead of the app's own"
        ),
    )


def main(args: argparse.Namespace) -> int:
    """Run the gate; exit 0 when every instance replays, 1 when one would break, 2 on a usage error."""
    app_dir = Path(args.app).resolve()
    paths = [Path(p).resolve() for p in args.paths] or [app_dir / ".devhost"]
    statuses: tuple[str, ...] = IN_FLIGHT + (("Completed", "Failed", "Terminated") if args.all else ())
    try:
        instances = collect(paths, statuses)
    except (OSError, ValueError, KeyError, sqlite3.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.durabletask:
        try:
            verdicts = gate_durabletask(args.durabletask, app_dir, instances)
        except ImportError as exc:
            print(f"error: --durabletask {args.durabletask}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    else:
        try:
            handles = orchestrator_handles(app_dir)
        except AppLoadError as exc:
            print(f"error: the app at {app_dir} does not load: {exc}", file=sys.stderr)
            return EXIT_USAGE
        verdicts = gate(handles, instances)
    if args.json:
        out = [
            {
                "instance_id": v.recorded.instance_id,
                "orchestrator": v.recorded.orchestrator,
                "status": v.recorded.runtime_status,
                "source": v.recorded.source,
                "ok": v.ok,
                "problem": v.problem,
            }
            for v in verdicts
        ]
        print(json.dumps(out, indent=1))
    else:
        print(report(verdicts))
    return EXIT_OK if all(v.ok for v in verdicts) else EXIT_BROKEN
