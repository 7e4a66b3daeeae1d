"""The offline writer's claims over HTTP on the embedded defaults: every one verified; the CLI prints them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

MIXED = "Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    proc = DevHostProcess(REPO_ROOT, tmp_path_factory.mktemp("claims-offline"))
    proc.start(timeout_s=180)
    yield proc
    proc.stop()


def test_the_offline_answer_claims_are_all_verified_and_shown_by_the_cli(host: DevHostProcess) -> None:
    jobs = JobClient(host)
    view = jobs.wait(jobs.submit(MIXED), timeout_s=180)
    assert view["status"] == "completed", view.get("error")
    answer = view["answer"]
    claims = answer["claims"]
    steps = {s["kind"]: s for s in view["steps"]}
    cited = [e for c in claims for e in c["evidence"]]
    kinds = {"sql" if e.get("column") else "document" for e in cited}
    assert kinds == {"sql", "document"}, claims
    assert all(c["check"]["status"] == "verified" for c in claims), [c["check"] for c in claims]
    assert answer["claims_summary"]["text"] == f"verified {len(claims)} of {len(claims)}"
    # Each figure is in the answer as written, and each quoted span is the passage's own text.
    assert all(c["figure"] in answer["text"] for c in claims if c["figure"])
    chunks = {c["source_id"]: c["content"] for c in steps["consult_rag"]["output"]["chunks"]}
    for claim in claims:
        [evidence, *_] = claim["evidence"]
        if evidence["source_id"] in chunks and evidence["start"] is not None:
            assert chunks[evidence["source_id"]][evidence["start"] : evidence["end"]] == claim["text"]

    assert host.keys is not None
    cli = [sys.executable, "-m", "devhost", "jobs", "show", view["id"], "--url", host.base_url]
    cli += ["--key", host.keys.function]
    shown = subprocess.run(cli, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert f"claims: verified {len(claims)} of {len(claims)}" in shown.stdout, shown.stdout + shown.stderr
    as_json = subprocess.run([*cli, "--json"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(as_json.stdout)["answer"]["claims"] == claims
