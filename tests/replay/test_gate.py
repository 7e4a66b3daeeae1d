"""The replay gate (``python -m devhost replay``) names each instance a code change would break.

In-process: for every kind of run recorded (agent mode with its parallel first attempts, hybrid supervision,
a Python step's approval, a team run), a change that would break jobs in flight is caught and one that
does not is let through. As a user runs it: the command over the project's fixtures, and over the
in-flight instances of a real devhost store before and after a breaking edit of the app.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.replay import gate, judge, load_fixture
from tests.devhost.hostproc import APPS_DIR, REPO_ROOT, DevHostProcess

HISTORIES = Path(__file__).with_name("histories")
Handle = Callable[[str], str]


@pytest.fixture(scope="module")
def handles(orchestrators: dict[str, Handle]) -> dict[str, Handle]:
    return orchestrators


def _reverse_tool_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Executor's calls of one turn now run in the reverse order."""
    from orchestrators.agent import AgentLoop

    original = AgentLoop.run_calls

    def reversed_calls(self: AgentLoop, calls: list[Any], turn: int) -> Any:
        return original(self, list(reversed(calls)), turn)

    monkeypatch.setattr(AgentLoop, "run_calls", reversed_calls)


def _no_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hybrid mode no longer asks the Supervisor after a lookup step."""
    from orchestrators.run.supervision import Supervision

    def keep_going(self: Supervision, *args: Any) -> Any:
        return None
        yield

    monkeypatch.setattr(Supervision, "supervise", keep_going)


def _no_code_approval(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_python no longer asks a person before running a draft that writes files."""
    from orchestrators.run.code import PythonStep

    def approved(self: PythonStep, task: dict[str, Any], written: Any) -> Any:
        return task
        yield

    monkeypatch.setattr(PythonStep, "approve", approved)


def _fork_plans_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork that would call the planner instead of loading what it carries over from its origin."""
    monkeypatch.setattr("orchestrators.fork.LOAD_FORK_BASE", "plan")


def _carried_rounds_load_their_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor team's fork that would read the agent of each round it carries over again."""
    from orchestrators.team import TeamRounds

    original = TeamRounds.team_step

    def team_step(self: TeamRounds, step_id: str, role: str, agent_id: str, prompt: str) -> Any:
        if step_id in self.carried:
            yield from self.walk.load("agent", agent_id, self.walk.pinned("agent", agent_id, None))
        return (yield from original(self, step_id, role, agent_id, prompt))

    monkeypatch.setattr(TeamRounds, "team_step", team_step)


def _carried_branch_part_runs_its_carried_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forked branch's part that would run its nodes before the fork point again (its edit still applied)."""
    from orchestrators.workflow import WorkflowWalk

    original = WorkflowWalk.carry_in

    def carry_in(self: WorkflowWalk, fork: Any) -> None:
        original(self, fork.model_copy(update={"steps": [], "outputs": {}}))

    monkeypatch.setattr(WorkflowWalk, "carry_in", carry_in)


BREAKING: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "fork_completed": _fork_plans_again,
    "fork_team_completed": _carried_rounds_load_their_agents,
    "fork_branch_part_completed": _carried_branch_part_runs_its_carried_nodes,
    "agent_completed": _reverse_tool_calls,
    "team_completed": _reverse_tool_calls,
    "hybrid_completed": _no_supervisor,
    "python_waiting_for_approval": _no_code_approval,
}


@pytest.mark.parametrize("name", sorted(BREAKING))
def test_each_kind_of_run_replays_and_a_breaking_change_is_named(
    name: str, handles: dict[str, Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = load_fixture(HISTORIES / f"{name}.json")
    (before,) = gate(handles, [recorded])
    assert before.ok, before.problem
    BREAKING[name](monkeypatch)
    after = judge(recorded, handles[recorded.orchestrator])
    assert not after.ok
    assert after.problem is not None and after.problem.startswith("Non-deterministic workflow detected")


def test_a_branch_fork_that_would_start_its_carried_branches_again_is_named(
    handles: dict[str, Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root of a fork inside a branch: the other branch (carried over) re-run as a part after the forked
    branch's part, a sub-orchestration the finished history does not have."""
    import orchestrators.fork

    recorded = load_fixture(HISTORIES / "fork_branch_completed.json")
    (before,) = gate(handles, [recorded])
    assert before.ok, before.problem
    original = orchestrators.fork._fork_in_branch

    def fork_in_branch(run: Any, base: Any, walk: Any) -> None:
        original(run, base, walk)
        walk.carried_parts.clear()

    monkeypatch.setattr(orchestrators.fork, "_fork_in_branch", fork_in_branch)
    after = judge(recorded, handles[recorded.orchestrator])
    assert after.problem == (
        "Non-deterministic workflow detected: the recorded execution had finished, but the current replay "
        "execution scheduled CallSubOrchestrator 'workflow_part' after it."
    )


def test_an_orchestrator_that_is_gone_is_named(handles: dict[str, Handle]) -> None:
    recorded = load_fixture(HISTORIES / "waiting_for_approval.json")
    (verdict,) = gate({k: v for k, v in handles.items() if k != "job_orchestrator"}, [recorded])
    assert verdict.problem == "the app has no orchestrator named 'job_orchestrator' any more"


def _replay(*args: str, app: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "devhost", "replay", "--app", str(app), *args]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_the_command_passes_the_projects_fixtures() -> None:
    done = _replay(str(HISTORIES))
    count = len(list(HISTORIES.glob("*.json")))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{count} of {count} instances replay unchanged; 0 would break." in done.stdout
    listed = json.loads(_replay(str(HISTORIES), "--json").stdout)
    assert len(listed) == count and all(v["ok"] for v in listed)


def test_a_missing_path_is_a_usage_error() -> None:
    done = _replay("no/such/folder")
    assert done.returncode == 2 and "no such file or folder" in done.stderr


@pytest.fixture()
def waiting_store(tmp_path: Path) -> Iterator[tuple[Path, Path, str]]:
    """A copy of the human-interaction sample with one instance waiting for its reply, its host stopped."""
    app = tmp_path / "app"
    shutil.copytree(APPS_DIR / "sample_human_interaction", app)
    data = tmp_path / "data"
    host = DevHostProcess(app, data, no_auth=True).start()
    try:
        resp = host.client.post("/api/verify", json={"phone": "+1 555 0100", "timeout_s": 3600})
        assert resp.status_code == 202, resp.text
        instance_id = str(resp.json()["id"])
        deadline = time.monotonic() + 60
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = host.client.get(f"/runtime/webhooks/durabletask/instances/{instance_id}").json()
            if (status.get("customStatus") or {}).get("waiting"):
                break
            time.sleep(0.05)
        assert (status.get("customStatus") or {}).get("waiting"), status
    finally:
        host.stop()
    yield app, data, instance_id


def test_the_command_names_the_in_flight_instance_an_edit_would_break(waiting_store: tuple[Path, Path, str]) -> None:
    app, data, instance_id = waiting_store
    done = _replay(str(data), app=app)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok      {instance_id} (verify_phone, Running" in done.stdout
    # The edit a team might deploy: an audit call before the challenge, so the history no longer lines up.
    script = app / "function_app.py"
    text = script.read_text(encoding="utf-8")
    edited = text.replace(
        '    code = yield context.call_activity("send_challenge", request["phone"])',
        '    yield context.call_activity("send_challenge", "audit")\n'
        '    code = yield context.call_activity("send_challenge", request["phone"])',
    )
    assert edited != text
    script.write_text(edited, encoding="utf-8")
    done = _replay(str(data), app=app)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"BREAKS  {instance_id} (verify_phone, Running" in done.stdout
    assert "0 of 1 instances replay unchanged; 1 would break." in done.stdout
    said = "scheduled CreateTimer (sequence ID 1, action #1), but the current replay execution scheduled CallActivity"
    assert f"{said} 'send_challenge' there instead" in done.stdout


# The same orchestrator ported to the durabletask SDK (the gRPC line), as a team moving to it would write it.
PORTED = """
import json
from datetime import timedelta

from durabletask import task


def verify_phone(ctx: task.OrchestrationContext, request):
    if isinstance(request, str):  # 1.x clients stored the input as JSON text
        request = json.loads(request)
    {audit}code = yield ctx.call_activity("send_challenge", input=request["phone"])
    timer = ctx.create_timer(ctx.current_utc_datetime + timedelta(seconds=request["timeout_s"]))
    attempts = 0
    while attempts < 3:
        ctx.set_custom_status({{"attempts": attempts, "waiting": True}})
        reply = ctx.wait_for_external_event("ChallengeResponse")
        winner = yield task.when_any([reply, timer])
        if winner == timer:
            return {{"approved": False, "reason": "timed out", "attempts": attempts}}
        attempts += 1
        if int(json.loads(reply.get_result())) == code:
            return {{"approved": True, "attempts": attempts}}
    return {{"approved": False, "reason": "too many attempts", "attempts": attempts}}
"""


def test_the_command_replays_a_history_under_the_durabletask_sdk(waiting_store: tuple[Path, Path, str]) -> None:
    """Across SDK lines: the 1.x history of an instance in flight, under durabletask's executor and a port."""
    app, data, instance_id = waiting_store
    (app / "ported.py").write_text(PORTED.format(audit=""), encoding="utf-8")
    done = _replay(str(data), "--durabletask", "ported", app=app)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok      {instance_id} (verify_phone, Running" in done.stdout
    # A port that calls something first no longer lines up with the history: durabletask's own words say why.
    audit = 'yield ctx.call_activity("audit", input=request["phone"])\n    '
    (app / "ported_audit.py").write_text(PORTED.format(audit=audit), encoding="utf-8")
    done = _replay(str(data), "--durabletask", "ported_audit", app=app)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"BREAKS  {instance_id} (verify_phone, Running" in done.stdout
    assert "NonDeterminismError: Failed to restore orchestration state due to a history mismatch" in done.stdout
    assert "name='send_challenge' and sequence number 1, but the current execution is instead trying to call audit" in (
        done.stdout
    )
    # A port missing the orchestrator is named too.
    (app / "empty_port.py").write_text("", encoding="utf-8")
    done = _replay(str(data), "--durabletask", "empty_port", app=app)
    assert done.returncode == 1 and "empty_port has no orchestrator named 'verify_phone'" in done.stdout
