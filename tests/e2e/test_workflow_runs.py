"""Workflow and team runs end to end on a devhost process: definitions saved through the API in Azurite, runs
started through ``/api/{workflows,teams}/{id}/runs`` and followed through the job API, on the offline model.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.runs.shapes import change, human, report_nodes


@pytest.fixture(scope="module")
def host(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "runs" + uuid.uuid4().hex[:12],
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
    }
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("runs-host"), env=env)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def jobs(host: DevHostProcess) -> JobClient:
    return JobClient(host)


def save(jobs: JobClient, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a definition, or update it to a new version when it exists."""
    resp = jobs.http.post(f"/api/{plural}", json=body)
    if resp.status_code == 409 and resp.json()["error"]["code"] == "DEFINITION_EXISTS":
        resp = jobs.http.put(f"/api/{plural}/{body['id']}", json=body)
    assert resp.status_code in (200, 201), resp.text
    return dict(resp.json())


def run(jobs: JobClient, plural: str, def_id: str, **body: Any) -> str:
    resp = jobs.http.post(f"/api/{plural}/{def_id}/runs", json=body)
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def shown(view: dict[str, Any]) -> dict[str, str]:
    return {s["id"]: s["state"] for s in view["steps"]}


# What several tests need is made once per module by a fixture, so that any test also runs alone.


@pytest.fixture(scope="module")
def report_run(jobs: JobClient) -> dict[str, Any]:
    """The finished view of one run of ``returns-report``: step, condition, tool and agent (summariser) nodes."""
    save(
        jobs,
        "agents",
        {"id": "summariser", "name": "Summariser", "instructions": "Summarise in one line.", "tools": ["consult_rag"]},
    )
    save(
        jobs,
        "workflows",
        {
            "id": "returns-report",
            "name": "Returns report",
            "inputs": {"topic": {"type": "string"}, "old": {"type": "number", "required": False, "default": 80}},
            "nodes": [
                *report_nodes(),
                {
                    "id": "summary",
                    "kind": "agent",
                    "agent": "summariser",
                    "after": ["growth"],
                    "input": {"prompt": {"template": "What does the policy say about {input.topic}?"}},
                },
            ],
            "outputs": {"percent": {"from": "growth.data.percent_change"}, "summary": {"from": "summary.text"}},
        },
    )
    return jobs.wait(run(jobs, "workflows", "returns-report", inputs={"topic": "refunds after 30 days"}))


@pytest.fixture(scope="module")
def fan_run(jobs: JobClient) -> dict[str, Any]:
    """The finished view of one run of ``fan``: a parallel node whose ``bad`` branch fails, joined anyway."""
    save(
        jobs,
        "workflows",
        {
            "id": "fan",
            "name": "Fan",
            "nodes": [
                {"id": "split", "kind": "parallel", "branches": ["good", "bad"]},
                change("good", {"value": 80}),
                change("bad", {"value": 0}),
                {"id": "merge", "kind": "join", "after": ["good", "bad"], "on_failure": "continue"},
            ],
            "outputs": {"failed": {"from": "merge.failed"}},
        },
    )
    return jobs.wait(run(jobs, "workflows", "fan"))


@pytest.fixture(scope="module")
def typed(jobs: JobClient) -> str:
    """A workflow with one required integer input ``n``."""
    body = {
        "id": "typed",
        "name": "Typed",
        "inputs": {"n": {"type": "integer"}},
        "nodes": [change("c", {"from": "input.n"})],
    }
    return str(save(jobs, "workflows", body)["id"])


@pytest.fixture(scope="module")
def solo_team(jobs: JobClient) -> str:
    """A sequential team of one agent that reads the documents."""
    save(jobs, "agents", {"id": "solo", "name": "Solo", "instructions": "Work.", "tools": ["consult_rag"]})
    save(jobs, "teams", {"id": "one", "name": "One", "agents": ["solo"], "strategy": {"type": "sequential"}})
    return "one"


@pytest.fixture(scope="module")
def gate(jobs: JobClient) -> str:
    """A workflow whose first node asks a person (its runs wait for an answer)."""
    body = {
        "id": "gate",
        "name": "Gate",
        "nodes": [
            human("ask", "Go on?", ["yes", "no"]),
            change("after_ask", {"value": 50}, after=["ask"]),
        ],
    }
    return str(save(jobs, "workflows", body)["id"])


def test_a_workflow_of_step_condition_tool_and_agent_nodes_runs_as_a_job(
    jobs: JobClient, report_run: dict[str, Any]
) -> None:
    view, run_id = report_run, report_run["id"]
    assert view["status"] == "completed", view.get("error")
    assert view["run"]["outputs"]["percent"] == 25.0 and view["run"]["outputs"]["summary"]
    assert shown(view) == {
        "docs": "succeeded",
        "found": "succeeded",
        "growth": "succeeded",
        "nothing": "skipped",
        "summary": "succeeded",
    }
    by_id = {s["id"]: s for s in view["steps"]}
    # The view shows each node's attempts and the output its activity returned, as for a planned step.
    assert by_id["growth"]["attempts"] == 1 and by_id["growth"]["output"]["data"]["percent_change"] == 25.0
    assert by_id["docs"]["output"]["chunks"] and by_id["summary"]["tool_input"] == "summariser v1"
    listed = jobs.http.get("/api/jobs").json()["jobs"]
    assert any(j["id"] == run_id and j["question"] == "workflow returns-report v1" for j in listed)


def test_bad_inputs_are_400_naming_the_field(jobs: JobClient, typed: str) -> None:
    for body, field in (
        ({}, "inputs.n"),
        ({"n": "five"}, "inputs.n"),
        ({"n": True}, "inputs.n"),
        ({"n": 1, "x": 2}, "inputs.x"),
    ):
        resp = jobs.http.post(f"/api/workflows/{typed}/runs", json={"inputs": body})
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["code"] == "INVALID_INPUT" and resp.json()["error"]["field"] == field
    resp = jobs.http.post(f"/api/workflows/{typed}/runs", json={"inputs": {"n": 1}, "version": 9})
    assert resp.status_code == 404 and resp.json()["error"]["field"] == "version"
    assert jobs.http.post("/api/workflows/ghost/runs", json={}).status_code == 404


def test_the_body_cannot_set_what_the_api_pins_and_the_app_bounds_tools_and_models(jobs: JobClient, typed: str) -> None:
    # A run's definition, pins and tools are set by the API alone: the body cannot carry them.
    extras: list[dict[str, Any]] = [
        {"run": {"kind": "workflow", "id": "x", "version": 1}},
        {"tools": ["x.y"]},
        {"pins": {}},
    ]
    for extra in extras:
        resp = jobs.http.post(f"/api/workflows/{typed}/runs", json={"inputs": {"n": 1}, **extra})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "INVALID_REQUEST", resp.text
    # Nor can a job's body turn itself into a run.
    resp = jobs.http.post("/api/jobs", json={"question": "q", "run": {"kind": "workflow", "id": "x", "version": 1}})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "INVALID_REQUEST", resp.text
    # An agent whose model the job does not allow is refused at start, naming the field.
    save(jobs, "agents", {"id": "picky", "name": "Picky", "instructions": "x", "model": {"model": "gpt-big"}})
    save(
        jobs,
        "workflows",
        {
            "id": "picky-flow",
            "name": "P",
            "nodes": [{"id": "a", "kind": "agent", "agent": "picky", "input": {"prompt": {"value": "hi"}}}],
        },
    )
    resp = jobs.http.post("/api/workflows/picky-flow/runs", json={"constraints": {"allowed_models": ["gpt-small"]}})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "MODEL_NOT_ALLOWED"
    assert resp.json()["error"]["field"] == "constraints.allowed_models"


def test_a_human_node_waits_and_a_pinned_run_ignores_a_new_version(jobs: JobClient) -> None:
    first: dict[str, Any] = {
        "id": "gated",
        "name": "Gated",
        "nodes": [
            human("ask", "Go on?", ["yes", "no"]),
            change("after_ask", {"value": 50}, after=["ask"]),
        ],
        "outputs": {"said": {"from": "ask.answer"}, "percent": {"from": "after_ask.data.percent_change"}},
    }
    save(jobs, "workflows", first)
    run_id = run(jobs, "workflows", "gated")
    waiting = jobs.wait(run_id, {"waiting_for_user"})["waiting"]
    assert waiting["question_id"] == "ask-q1" and waiting["options"] == ["yes", "no"]
    # The definition changes while the run waits: the run keeps version 1.
    second = {**first, "nodes": [first["nodes"][0], change("after_ask", {"value": 20}, after=["ask"])]}
    assert save(jobs, "workflows", second)["version"] == 2
    # Delete is refused while the run is in flight.
    resp = jobs.http.delete("/api/workflows/gated")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "DEFINITION_IN_USE"
    assert jobs.answer(run_id, "yes").status_code == 202
    view = jobs.wait(run_id)
    assert view["status"] == "completed"
    # limits: tests/e2e/test_run_limits.py; graph and inputs: tests/jobs/answers_flow/test_view_runs.py
    assert {k: v for k, v in view["run"].items() if k not in ("limits", "graph", "inputs")} == {
        "kind": "workflow",
        "id": "gated",
        "version": 1,
        "outputs": {"said": "yes", "percent": 100.0},
    }
    # A new run takes version 2.
    later = jobs.wait(run(jobs, "workflows", "gated"), {"waiting_for_user"})
    assert jobs.answer(later["id"], "yes").status_code == 202
    assert jobs.wait(later["id"])["run"]["outputs"] == {"said": "yes", "percent": 400.0}


def test_a_parallel_branch_with_a_failing_member(fan_run: dict[str, Any]) -> None:
    view = fan_run
    assert view["status"] == "completed", view.get("error")
    assert shown(view) == {"split": "succeeded", "good": "succeeded", "bad": "failed", "merge": "succeeded"}
    assert view["run"]["outputs"] == {"failed": ["bad"]}
    bad = next(s for s in view["steps"] if s["id"] == "bad")
    assert bad["error"]["code"] == "INVALID_INPUT"


@pytest.mark.parametrize(
    "strategy",
    [
        {"type": "sequential"},
        {"type": "parallel", "aggregator": "editor"},
        {"type": "supervisor", "supervisor": "editor", "max_rounds": 2},
    ],
)
def test_each_team_strategy_runs_on_the_offline_model(jobs: JobClient, strategy: dict[str, Any]) -> None:
    for agent_id in ("researcher", "writer", "editor"):
        member = {
            "id": agent_id,
            "name": agent_id,
            "instructions": f"You are the {agent_id}.",
            "tools": ["consult_rag"],
        }
        save(jobs, "agents", member)
    team_id = f"crew-{strategy['type']}"
    save(jobs, "teams", {"id": team_id, "name": "Crew", "agents": ["researcher", "writer"], "strategy": strategy})
    run_id = run(jobs, "teams", team_id, inputs={"task": "What does the returns policy say about refunds?"})
    view = jobs.wait(run_id, timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    assert view["steps"] and all(s["state"] in ("succeeded", "skipped") for s in view["steps"])


def test_a_team_run_needs_its_task(jobs: JobClient, solo_team: str) -> None:
    resp = jobs.http.post(f"/api/teams/{solo_team}/runs", json={"inputs": {}})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "inputs.task"


def test_the_built_in_ask_workflow_is_todays_job(jobs: JobClient) -> None:
    run_id = run(jobs, "workflows", "ask", inputs={"question": "What does the returns policy say about refunds?"})
    view = jobs.wait(run_id)
    assert view["status"] == "completed" and view["plan"]["status"] == "planned"
    assert view["run"] is None and view["answer"]["text"]
    assert view["question"] == "What does the returns policy say about refunds?"
    resp = jobs.http.post("/api/workflows/ask/runs", json={"inputs": {"question": "q", "mode": "wild"}})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "inputs.mode"
    entries = jobs.http.get("/api/logs", params={"workflow": "ask", "run": run_id}).json()["entries"]
    assert entries and all(e["run"]["id"] == "ask" for e in entries)


def test_the_built_in_ask_workflow_is_listed_read_only(jobs: JobClient) -> None:
    listed = jobs.http.get("/api/workflows").json()["workflows"]
    ask = next(w for w in listed if w["id"] == "ask")
    assert ask["built_in"] is True and ask["latest_version"] is None and listed[0] == ask
    shown = jobs.http.get("/api/workflows/ask").json()
    assert shown["built_in"] is True and shown["versions"] == []
    # Its inputs are the ones its runs take: a required question and an optional mode.
    assert set(shown["definition"]["inputs"]) == {"question", "mode"}
    assert shown["definition"]["inputs"]["mode"]["required"] is False
    body = {"id": "ask", "name": "Mine", "nodes": [change("c", {"value": 1})]}
    writes = [
        jobs.http.put("/api/workflows/ask", json=body),
        jobs.http.delete("/api/workflows/ask"),
        jobs.http.post("/api/workflows", json=body),
    ]
    for resp in writes:
        assert resp.status_code == 409, resp.text
        assert resp.json()["error"]["code"] == "DEFINITION_BUILT_IN" and resp.json()["error"]["field"] == "id"
    # Only workflows have it: an agent may be called ask.
    assert all(not a.get("built_in") for a in jobs.http.get("/api/agents").json()["agents"])


def cli(host: DevHostProcess, *args: str) -> subprocess.CompletedProcess[str]:
    assert host.keys is not None
    command = [sys.executable, "-m", "devhost", *args, "--url", host.base_url, "--key", host.keys.function]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False)


def test_the_cli_runs_a_workflow_and_a_team_and_follows_them(
    host: DevHostProcess, jobs: JobClient, solo_team: str, gate: str
) -> None:
    save(
        jobs,
        "workflows",
        {
            "id": "cli-flow",
            "name": "CLI",
            "inputs": {"old": {"type": "number"}},
            "nodes": [change("c", {"from": "input.old"})],
            "outputs": {"percent": {"from": "c.data.percent_change"}},
        },
    )
    done = cli(host, "workflows", "run", "cli-flow", "--input", "old=80", "--no-input")
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"percent": 25.0' in done.stdout and "cli-flow v1" in done.stdout
    bad = cli(host, "workflows", "run", "cli-flow", "--input", "old=eighty", "--no-input")
    assert bad.returncode == 2 and "inputs.old" in bad.stdout + bad.stderr
    team = cli(host, "teams", "run", solo_team, "--task", "What does the returns policy say?", "--no-input")
    assert team.returncode == 0, team.stdout + team.stderr
    waits = cli(host, "workflows", "run", gate, "--no-input")
    assert waits.returncode == 4, waits.stdout + waits.stderr  # waits for a person: exit 4, as ask does


def test_logs_across_runs_with_filters_paging_and_the_active_runs(
    jobs: JobClient, report_run: dict[str, Any], fan_run: dict[str, Any], gate: str
) -> None:
    # Three runs at least: the report, the fan and one left waiting at the gate.
    waiting = jobs.wait(run(jobs, "workflows", gate), {"waiting_for_user"})

    def logs(**params: Any) -> dict[str, Any]:
        resp = jobs.http.get("/api/logs", params=params)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    fan = logs(workflow="fan", run=fan_run["id"])["entries"]
    assert {(e["node"], e["state"]) for e in fan} == {
        ("split", "succeeded"),
        ("good", "succeeded"),
        ("bad", "failed"),
        ("merge", "succeeded"),
    }
    assert all(e["run"] == {"kind": "workflow", "id": "fan", "version": 1} for e in fan)
    failed = logs(workflow="fan", run=fan_run["id"], status="failed")["entries"]
    assert [(e["node"], e["error"]) for e in failed] == [("bad", "INVALID_INPUT")]
    by_agent = logs(agent="summariser")["entries"]
    assert by_agent and all(e["node"] == "summary" and e["kind"] == "agent" for e in by_agent)
    assert logs(agent="summariser", until="2000-01-01T00:00:00Z")["entries"] == []
    # Paging by runs: one run per page, the cursor leads to the older ones, never the same run twice.
    seen: list[str] = []
    page = logs(limit=1)
    for _ in range(4):
        runs = {e["run_id"] for e in page["entries"]}
        assert len(runs) <= 1 and not runs & set(seen)
        seen.extend(runs)
        if not page["next_cursor"]:
            break
        page = logs(limit=1, cursor=page["next_cursor"])
    assert len(seen) >= 3
    # The run left waiting is active, with its current step.
    active = logs(workflow=gate)["active"]
    assert any(
        a["run_id"] == waiting["id"] and a["status"] == "waiting_for_user" and a["current"]["node"] == "ask"
        for a in active
    )
    resp = jobs.http.get("/api/logs", params={"status": "exploded"})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "status"


def executions(host: DevHostProcess) -> Counter[str]:
    """How many times each activity started, over every life of the host (its log is appended)."""
    return Counter(re.findall(r"Executing 'Functions\.(\w+)'", host.output()))


def instance(host: DevHostProcess, instance_id: str) -> dict[str, Any]:
    resp = host.client.get(host.webhook(f"instances/{instance_id}"), params=host.system_code)
    return dict(resp.json()) if resp.status_code in (200, 202) else {}  # 202: still running


def until(check: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


SLOW_FAN = {
    "id": "fan-kill",
    "name": "Fan",
    "nodes": [
        {"id": "split", "kind": "parallel", "branches": ["fast", "slow"]},
        change("fast", {"value": 80}),
        {
            "id": "slow",
            "kind": "step",
            "step": "execute_azure_sql",
            "input": {"question": {"value": "How many orders were there in 2025?"}},
        },
        {"id": "merge", "kind": "join", "after": ["fast", "slow"]},
    ],
    "outputs": {"percent": {"from": "fast.data.percent_change"}, "rows": {"from": "slow.row_count"}},
}


def slow_host(azurite: Azurite, tmp_path: Path) -> DevHostProcess:
    """A host whose SQL writer's first model call takes a minute: that branch is in flight for long."""
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "DEFINITIONS_TABLE": "slow" + uuid.uuid4().hex[:12],
        "OFFLINE_LLM_FAULTS": "write_sql:DELAY:1:60000",
    }
    return DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start()


def test_cancelling_a_run_stops_its_branches_too(azurite: Azurite, tmp_path: Path) -> None:
    host = slow_host(azurite, tmp_path)
    try:
        jobs = JobClient(host)
        save(jobs, "workflows", SLOW_FAN)
        run_id = run(jobs, "workflows", "fan-kill")
        until(lambda: executions(host)["execute_azure_sql"] == 1, "the slow branch's SQL call to start")
        assert instance(host, f"{run_id}:slow")["runtimeStatus"] == "Running"
        assert jobs.cancel(run_id).status_code == 202
        until(lambda: instance(host, f"{run_id}:slow").get("runtimeStatus") == "Terminated", "the branch to stop")
        assert jobs.wait(run_id)["status"] == "cancelled"
    finally:
        host.stop()


def test_kill_during_a_fan_out_then_restart_reruns_only_the_branch_in_flight(azurite: Azurite, tmp_path: Path) -> None:
    host = slow_host(azurite, tmp_path)
    try:
        jobs = JobClient(host)
        save(jobs, "workflows", SLOW_FAN)
        run_id = run(jobs, "workflows", "fan-kill")
        until(lambda: executions(host)["execute_azure_sql"] == 1, "the slow branch's SQL call to start")
        until(lambda: instance(host, f"{run_id}:fast").get("runtimeStatus") == "Completed", "the fast branch")
        host.kill()
        host.extra_env.pop("OFFLINE_LLM_FAULTS")
        host.start()
        view = JobClient(host).wait(run_id, timeout_s=90)
        assert view["status"] == "completed", view.get("error")
        assert view["run"]["outputs"]["percent"] == 25.0 and view["run"]["outputs"]["rows"] == 1
        assert shown(view) == {"split": "succeeded", "fast": "succeeded", "slow": "succeeded", "merge": "succeeded"}
        ran = executions(host)
        # The finished branch's tool ran once in all; only the call in flight at the kill ran again.
        assert ran["call_tool"] == 1 and ran["execute_azure_sql"] == 2, ran
        assert ran["load_definition"] == 3, ran  # the root and each branch once: none of them loaded again
    finally:
        host.stop()


def test_the_run_examples_apply_and_run_from_the_cli(host: DevHostProcess, jobs: JobClient) -> None:
    examples = REPO_ROOT / "examples" / "runs"
    for plural, name in (("agents", "agents.yaml"), ("workflows", "workflow.yaml"), ("teams", "team.yaml")):
        done = cli(host, plural, "apply", "-f", str(examples / name))
        assert done.returncode == 0, done.stdout + done.stderr
    waits = cli(host, "workflows", "run", "returns-brief", "--input", "region=North", "--no-input")
    assert waits.returncode == 4, waits.stdout + waits.stderr
    run_id = re.search(r"run (\w+) of workflow", waits.stdout)
    assert run_id is not None
    waiting = jobs.wait(run_id.group(1), {"waiting_for_user"})["waiting"]
    # The change from old=80 to the North region's 119 returns of 2025, as the sample database holds them.
    assert waiting["kind"] == "approval" and "48.75%" in waiting["question"]
    assert jobs.answer(run_id.group(1), "approve").status_code == 202
    view = jobs.wait(run_id.group(1), timeout_s=120)
    assert view["status"] == "completed", view.get("error")
    assert view["run"]["outputs"]["change"] == 48.75 and view["run"]["outputs"]["brief"]
    team = cli(
        host,
        "teams",
        "run",
        "returns-desk",
        "--task",
        "What does the returns policy say about refunds?",  # as README.md runs it
        "--no-input",
    )
    assert team.returncode == 0, team.stdout + team.stderr
    # The second member answers the task; the first one's answer is material, not words to look up.
    assert "refund" in team.stdout and "do not mention" not in team.stdout, team.stdout
