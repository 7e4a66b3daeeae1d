"""History retention (api/maintenance.py): finished jobs older than the setting are purged, nothing else.

The purge function is driven directly against a devhost (horizons of seconds), then the app's own timer
runs it on devhost with a schedule of seconds and a retention of about a second.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import pytest

from api.maintenance import PurgeReport, purge_after, purge_finished_jobs
from api.view import history_purged_after
from tests.devhost.hostproc import APPS_DIR, REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

WEBHOOK = "/runtime/webhooks/durabletask"


def client_for(host: DevHostProcess) -> df.DurableOrchestrationClient:
    """An SDK client on the host's RPC endpoint (the binding a client function would get)."""
    urls = {"id": "INSTANCEID", "statusQueryGetUri": "", "sendEventPostUri": "", "terminatePostUri": ""}
    return df.DurableOrchestrationClient(
        json.dumps(
            {
                "taskHubName": "BenchNoop",
                "creationUrls": {"createNewInstancePostUri": "", "createAndWaitOnNewInstancePostUri": ""},
                "managementUrls": urls,
                "rpcBaseUrl": host.rpc_base_url(),
            }
        )
    )


def run_purge(host: DevHostProcess, now: datetime, retention: timedelta) -> PurgeReport:
    async def purge() -> PurgeReport:
        from azure.durable_functions.models.utils import http_utils

        try:
            return await purge_finished_jobs(client_for(host), now=now, retention=retention)
        finally:
            # The SDK's session belongs to this event loop; close it with it.
            closer = getattr(http_utils, "_close_session", None)
            if closer is not None:
                await closer()

    return asyncio.run(purge())


def start(host: DevHostProcess, name: str, body: Any) -> str:
    resp = host.client.post(f"{WEBHOOK}/orchestrators/{name}", json=body)
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def status(host: DevHostProcess, instance_id: str) -> str | None:
    resp = host.client.get(f"{WEBHOOK}/instances/{instance_id}")
    return None if resp.status_code == 404 else str(resp.json()["runtimeStatus"])


def settle(host: DevHostProcess, instance_id: str, wanted: str) -> None:
    deadline = time.monotonic() + 30
    while status(host, instance_id) != wanted:
        assert time.monotonic() < deadline, f"{instance_id} never reached {wanted}"
        time.sleep(0.02)


def batch(host: DevHostProcess) -> dict[str, str]:
    """One instance in each state: completed, failed, terminated, running (waiting for an event)."""
    ids = {
        "completed": start(host, "chain", {"steps": 1}),
        "failed": start(host, "chain", {}),  # no 'steps': the orchestrator raises
        "terminated": start(host, "parked", None),
        "running": start(host, "parked", None),
    }
    settle(host, ids["completed"], "Completed")
    settle(host, ids["failed"], "Failed")
    settle(host, ids["running"], "Running")
    settle(host, ids["terminated"], "Running")
    assert host.client.post(f"{WEBHOOK}/instances/{ids['terminated']}/terminate?reason=test").status_code == 202
    settle(host, ids["terminated"], "Terminated")
    return ids


@pytest.fixture
def host(tmp_path: Path) -> Any:
    proc = DevHostProcess(APPS_DIR / "bench_noop", tmp_path / "data", no_auth=True).start()
    yield proc
    proc.stop()


def test_purges_finished_instances_older_than_the_horizon_and_nothing_else(host: DevHostProcess) -> None:
    old = batch(host)
    time.sleep(1.1)
    horizon = datetime.now(UTC)
    time.sleep(0.1)
    new = batch(host)

    report = run_purge(host, now=horizon + timedelta(hours=1), retention=timedelta(hours=1))
    assert report.instances_deleted == 3
    assert report.horizon == horizon
    for kind in ("completed", "failed", "terminated"):
        assert status(host, old[kind]) is None, kind  # purged
    assert status(host, old["running"]) == "Running"  # never purged, however old
    assert {status(host, i) for i in new.values()} == {"Completed", "Failed", "Terminated", "Running"}

    # A second run finds nothing more; a run with the horizon after everything takes the newer finished ones.
    assert run_purge(host, now=horizon + timedelta(hours=1), retention=timedelta(hours=1)).instances_deleted == 0
    assert run_purge(host, now=datetime.now(UTC), retention=timedelta(0)).instances_deleted == 3
    assert status(host, new["running"]) == "Running" and status(host, old["running"]) == "Running"


def test_the_view_says_when_a_finished_job_is_purged() -> None:
    assert purge_after(datetime(2026, 1, 1, tzinfo=UTC), 30) == datetime(2026, 1, 31, tzinfo=UTC)
    assert history_purged_after("2026-01-01T10:00:00Z", "Completed", 30) == "2026-01-31T10:00:00Z"
    assert history_purged_after("2026-01-01T10:00:00Z", "Terminated", 0.5) == "2026-01-01T22:00:00Z"
    assert history_purged_after("2026-01-01T10:00:00Z", "Running", 30) is None  # only finished jobs are purged
    assert history_purged_after("garbage", "Completed", 30) is None


def test_the_apps_timer_purges_finished_jobs_on_devhost(tmp_path: Path) -> None:
    # Retention of about a second (fractions of a day are allowed), checked every second.
    env = {"JOB_HISTORY_RETENTION_DAYS": str(1.5 / 86_400), "JOB_HISTORY_PURGE_SCHEDULE": "*/1 * * * * *"}
    host = DevHostProcess(REPO_ROOT, tmp_path / "data", env=env).start()
    try:
        assert "purge_job_history: timerTrigger" in host.output()
        jobs = JobClient(host)
        job_id = jobs.submit("What does the returns policy say about refunds after 30 days?")
        view = jobs.wait(job_id)
        assert view["status"] == "completed"
        created = datetime.fromisoformat(view["created_at"].replace("Z", "+00:00"))
        expected = (created + timedelta(seconds=1.5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert view["history_purged_after"] == expected
        deadline = time.monotonic() + 30
        while jobs.http.get(f"/api/jobs/{job_id}").status_code != 404:
            assert time.monotonic() < deadline, host.output()[-3000:]
            time.sleep(0.1)
        assert "job history retention: purged" in host.output()
    finally:
        host.stop()
