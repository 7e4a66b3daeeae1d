"""Whole jobs on a devhost whose real provider talks to llama.cpp's server (Gemma 3 270M).

The model is tiny and answers badly; the point is that the app handles a real server: planning gets
past the refused output mode, every step's tokens are counted (estimated, as the server's streams
carry no usage, and marked so), and whatever the model writes ends the job with a clear outcome.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient
from tests.realmodel.server import MODEL_NAME, LlamaServer

QUESTION = "Which region had the most returns in Q3?"
# Per step: enough for a small plan, tight enough for 2 shared cores.
CONSTRAINTS = {"max_tokens": 320, "timeout_ms": 180_000}


@pytest.fixture
def host_for(llama: LlamaServer, tmp_path: Path) -> Iterator[Any]:
    hosts: list[DevHostProcess] = []

    def start(mode: str) -> JobClient:
        env = {
            "LLM_PROVIDER": "openai",
            "OPENAI_BASE_URL": llama.base_url,
            "OPENAI_MODEL": MODEL_NAME,
            "LLM_OUTPUT_MODE": mode,
            "MODEL_PRICES": json.dumps({MODEL_NAME: {"input_per_million": 0, "output_per_million": 0}}),
            "SQL_PROVIDER": "sqlite",
            "PARTIAL_OUTPUT_PATH": str(tmp_path / f"partial-{mode}.sqlite3"),
        }
        host = DevHostProcess(REPO_ROOT, tmp_path / f"host-{mode}", env=env)
        hosts.append(host)
        host.start()
        return JobClient(host)

    yield start
    for host in hosts:
        host.stop()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["auto"])
def test_a_job_over_the_real_server_ends_clearly_with_every_token_counted(host_for: Any, mode: str) -> None:
    jobs: JobClient = host_for(mode)
    job_id = jobs.submit(QUESTION, constraints=CONSTRAINTS)
    view = jobs.wait(job_id, timeout_s=480, allow_waiting=True, until={"completed", "failed", "waiting_for_user"})
    usage = view["usage"]
    steps = view.get("steps") or []
    print(
        f"\n| {mode} | {QUESTION} | {view['status']} | {len(steps)} steps "
        f"({', '.join(s['kind'] + ':' + s['status'] for s in steps)}) | "
        f"{usage['total']['total_tokens']} tokens counted (estimated={usage['total']['estimated']}) | "
        f"{(view.get('error') or {}).get('message', '')[:160]}"
    )
    # Planning reached the model and its tokens count, estimated because the stream had no usage.
    assert usage["planning"]["total_tokens"] > 0 and usage["planning"]["estimated"] is True
    assert usage["total"]["total_tokens"] >= usage["planning"]["total_tokens"]
    if view["status"] == "failed":
        # A bad output is the model's fault, said plainly: never the server's traceback or a bare 500.
        message = json.dumps(view.get("error"))
        assert "Traceback" not in message and "Error code: 500" not in message, message
        assert "INTERNAL_ERROR" not in message, message
    else:
        for step in steps:
            if step["status"] in ("completed", "failed") and step["kind"] != "consult_rag":
                assert usage["by_step"][step["id"]]["total_tokens"] > 0, step
