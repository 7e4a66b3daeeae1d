"""Barriers of the artifacts route, each on its own: ownership (Easy Auth principal), the job id keying the
store, the ref's shape, and headers that keep a file written by model code from running in the console.

The route handler and the artifact store are the app's real ones; the Durable client answers ``get_status``
with the SDK's own ``DurableOrchestrationStatus`` for the jobs this test declares.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from api.artifacts import artifact
from api.errors import guarded
from shared.jobs.models import ORCHESTRATOR_NAME
from shared.runtime.artifacts import ArtifactRef, get_artifact_store, make_ref, reset_artifact_stores
from shared.runtime.settings import get_settings, reset_settings
from tests.api.test_definitions import principal

REF = make_ref("s2", 1, 0)


class Jobs:
    """Job id -> owner id; get_status answers as the Durable client does (None for an unknown id)."""

    def __init__(self, owners: dict[str, str]) -> None:
        self.owners = owners

    async def get_status(self, job_id: str, **_: Any) -> DurableOrchestrationStatus | None:
        owner = self.owners.get(job_id)
        if owner is None:
            return None
        job_input = json.dumps({"job_id": job_id, "owner": {"id": owner, "name": owner}})
        return DurableOrchestrationStatus(
            name=ORCHESTRATOR_NAME,
            instanceId=job_id,
            input=job_input,
            createdTime="2026-01-01T00:00:00Z",
            lastUpdatedTime="2026-01-01T00:00:01Z",
            runtimeStatus="Completed",
        )


@pytest.fixture
def store_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ARTIFACT_STORE", "local")
    monkeypatch.setenv("ARTIFACT_PATH", str(tmp_path / "artifacts.sqlite3"))
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "true")
    reset_settings()
    reset_artifact_stores()
    yield
    reset_settings()
    reset_artifact_stores()


def put(job_id: str, name: str, media_type: str, data: bytes, ref: str = REF) -> None:
    meta = ArtifactRef(name=name, media_type=media_type, size=len(data), ref=ref)
    get_artifact_store(get_settings()).put(job_id, meta, data)


def get(job_id: str, ref: str, user: str = "alice") -> func.HttpResponse:
    req = func.HttpRequest(
        method="GET", url=f"http://localhost/api/jobs/{job_id}/artifacts/{ref}", headers=principal(user), body=b""
    )
    client: Any = Jobs({"job-a": "alice", "job-b": "bob"})
    return asyncio.run(guarded("get_artifact", lambda: artifact(req, client, job_id, ref)))


def code(resp: func.HttpResponse) -> tuple[int, str, str | None]:
    err = json.loads(resp.get_body())["error"]
    return resp.status_code, err["code"], err.get("field")


def test_another_users_job_answers_like_a_missing_one(store_env: None) -> None:
    put("job-b", "chart.png", "image/png", b"\x89PNG bob's")
    assert get("job-b", REF, user="bob").status_code == 200
    assert code(get("job-b", REF, user="alice"))[:2] == (404, "JOB_NOT_FOUND")


def test_a_ref_of_another_job_is_not_found_in_this_one(store_env: None) -> None:
    put("job-b", "chart.png", "image/png", b"\x89PNG bob's")
    # alice owns job-a, but the bytes were kept under job-b: the store is keyed by the job id of the URL.
    assert code(get("job-a", REF, user="alice")) == (404, "ARTIFACT_NOT_FOUND", "ref")


@pytest.mark.parametrize(
    "ref",
    ["../job-b/s2-a1-0", "s2-a1-0/../../x", "..", "s2-a1-0%00", "S2-A1-0", "s2-a1-0.png", "x" * 80 + "-a1-0", ""],
)
def test_a_ref_that_is_not_a_ref_shape_is_refused_before_any_read(store_env: None, ref: str) -> None:
    put("job-a", "chart.png", "image/png", b"\x89PNG")
    assert code(get("job-a", ref)) == (400, "INVALID_REQUEST", "ref")


@pytest.mark.parametrize(
    ("name", "media_type"),
    [("page.html", "text/html"), ("chart.svg", "image/svg+xml"), ("data.csv", "text/csv"), ("x.js", "text/javascript")],
)
def test_a_file_that_could_run_in_a_browser_is_a_sandboxed_download(
    store_env: None, name: str, media_type: str
) -> None:
    put("job-a", name, media_type, b"<script>alert(1)</script>")
    resp = get("job-a", REF)
    assert resp.status_code == 200
    assert resp.mimetype == "application/octet-stream"
    assert resp.headers["Content-Disposition"].startswith("attachment;")
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in resp.headers["Content-Security-Policy"]


def test_an_image_is_inline_but_still_nosniff_and_sandboxed(store_env: None) -> None:
    put("job-a", "chart.png", "image/png", b"<html><script>alert(1)</script>")
    resp = get("job-a", REF)
    assert resp.mimetype == "image/png" and resp.headers["Content-Disposition"].startswith("inline;")
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in resp.headers["Content-Security-Policy"]


def test_the_file_name_cannot_break_out_of_its_header(store_env: None) -> None:
    put("job-a", 'a";\r\nSet-Cookie: x=1;"b.png', "image/png", b"\x89PNG")
    disposition = get("job-a", REF).headers["Content-Disposition"]
    assert disposition.count('"') == 2 and "\r" not in disposition and "\n" not in disposition
    assert ";" not in disposition.split("filename=", 1)[1]
