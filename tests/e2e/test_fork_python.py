"""A fork carries a run_python step over with its files: the fork serves them, and only those (devhost, sandbox)."""

from __future__ import annotations

from tests.e2e.test_python_over_devhost import PNG_MAGIC, QUESTION, chart_of, fetch, jobs
from tests.jobs.jobclient import JobClient

__all__ = ["jobs"]  # the module's host (with the local sandbox and artifact store), shared


def test_a_fork_serves_the_files_of_the_code_step_it_carried(jobs: JobClient) -> None:  # noqa: F811
    origin = jobs.wait(jobs.submit(QUESTION, tools=["python.run"]))
    assert origin["status"] == "completed", origin.get("error")
    chart = chart_of(origin, "s2")
    resp = jobs.http.post(f"/api/jobs/{origin['id']}/fork", json={"from_step": "s3", "changes": {}})
    assert resp.status_code == 202, resp.text
    fork = jobs.wait(resp.json()["id"])
    assert fork["status"] == "completed", fork.get("error")
    carried = next(s for s in fork["steps"] if s["id"] == "s2")
    assert carried["carried_over"] is True and carried["artifacts"] == origin["steps"][1]["artifacts"]
    got = fetch(jobs, fork["id"], chart["ref"])
    assert got.status_code == 200 and got.content.startswith(PNG_MAGIC) and len(got.content) == chart["size"]
    # Only the carried steps' files are the origin's: any other ref is looked up as the fork's own.
    missing = fetch(jobs, fork["id"], "s1-a1-0")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "ARTIFACT_NOT_FOUND"
