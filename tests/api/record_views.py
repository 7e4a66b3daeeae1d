"""Record job views for the contract test: ``.venv/bin/python -m tests.api.record_views [SCENARIO ...]``.

Runs the replay scenarios (tests/replay/record.py: every mode, run and fork) on devhost and writes, per job,
what ``api/view.build_view`` is given (the Durable status with its history, and a run's part histories) and the
view it answered then, to ``tests/api/views/<scenario>.json``. tests/api/test_view_contract.py builds the view
again from the same input and asks for the same JSON: a client must see no difference when the view changes
shape in code. Re-record only when the view is meant to change (``--refresh``: rebuild the views from the recorded
inputs, for an additive change).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from api.view import build_view
from devhost.storage.azurite import Azurite
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.replay.record import NEEDS_STORE, SCENARIOS

VIEWS = Path(__file__).with_name("views")
LINKS = {"self": "http://127.0.0.1:7071/api/jobs/JOB", "status": "http://127.0.0.1:7071/api/jobs/JOB"}
RETENTION_DAYS = 7.0


def durable_status(host: DevHostProcess, instance_id: str) -> dict[str, Any]:
    """The status as ``api/common.owned_status`` reads it: the SDK's ``to_json`` plus ``historyEvents``."""
    params = {"showHistory": "true", "showHistoryOutput": "true", "showInput": "true", **host.system_code}
    resp = httpx.get(host.webhook(f"instances/{instance_id}"), params=params, timeout=60)
    resp.raise_for_status()
    status = DurableOrchestrationStatus.from_json(resp.json())
    data: dict[str, Any] = status.to_json()
    data["historyEvents"] = getattr(status, "historyEvents", None) or data.get("history") or []
    return data


class _Client:
    """Just enough of the Durable client for ``api.costs.part_histories``."""

    def __init__(self, host: DevHostProcess) -> None:
        self.host = host

    async def get_status(self, instance_id: str, **_: Any) -> Any:
        data = durable_status(self.host, instance_id)
        return type("Part", (), {"historyEvents": data["historyEvents"]})()


def inputs_of(host: DevHostProcess, job_id: str) -> dict[str, Any]:
    """What build_view is given for this job."""
    from api.costs import part_histories

    status = durable_status(host, job_id)
    parts = asyncio.run(part_histories(_Client(host), job_id, status))
    return {"status": status, "parts": parts}


def view_of(recorded: dict[str, Any]) -> dict[str, Any]:
    """The view of a recorded input (as the HTTP answer carries it: JSON text, read back)."""
    body = build_view(
        recorded["status"],
        LINKS,
        log_cursor=recorded.get("log_cursor", 0),
        log_limit=recorded.get("log_limit", 100),
        partials=lambda _job, _step: None,
        retention_days=RETENTION_DAYS,
        parts=recorded["parts"],
    )
    return dict(json.loads(json.dumps(body)))


def record(names: list[str]) -> None:
    """Run the named scenarios (all when empty) and write their views."""
    VIEWS.mkdir(exist_ok=True)
    for name in names or list(SCENARIOS):
        env, drive = SCENARIOS[name]
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            if name in NEEDS_STORE:
                azurite = stack.enter_context(Azurite(Path(tmp) / "azurite"))
                env = {**env, "AzureWebJobsStorage": azurite.connection_string}
            base = {"JOB_RETRY_FIRST_INTERVAL_MS": "50", "ARTIFACT_PATH": str(Path(tmp) / "artifacts.sqlite3")}
            host = DevHostProcess(REPO_ROOT, Path(tmp) / "data", env={**base, **env})
            host.start()
            try:
                job_id = drive(JobClient(host))
                recorded = inputs_of(host, job_id)
            finally:
                host.stop()
        recorded["view"] = view_of(recorded)
        path = VIEWS / f"{name}.json"
        path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{path.relative_to(REPO_ROOT)}: {recorded['view']['status']}, {len(recorded['view']['steps'])} steps")


def refresh() -> None:
    """Build every recorded view again from its recorded input: after an additive change to the view, meant as one
    (the diff of the fixtures shows exactly what a client now sees besides what it saw)."""
    for path in sorted(VIEWS.glob("*.json")):
        recorded = json.loads(path.read_text(encoding="utf-8"))
        recorded["view"] = view_of(recorded)
        path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--refresh"]:
        refresh()
    else:
        record(sys.argv[1:])
