"""run_python over the real local sandbox (bubblewrap) and the real local artifact store.

Needs bubblewrap and ``.venv-sandbox`` (``make sandbox``): skipped without them, failed when ``SANDBOX_REQUIRED=1``
(``make test`` sets it), like tests/sandbox.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from shared.executors.run_python import _safe_file
from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.providers.sql.catalog import load_catalog
from shared.runtime.artifacts import SqliteArtifactStore, reset_artifact_stores
from shared.runtime.settings import Settings
from shared.sandbox.base import SandboxFile
from shared.sandbox.local import LocalSandbox

TABLE = {"columns": ["month", "revenue"], "rows": [["2025-01", 100.0], ["2025-02", 110.0], ["2025-03", 132.0]]}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GROWTH_AND_CHART = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
first, last = float(sales["revenue"].iloc[0]), float(sales["revenue"].iloc[-1])
result = {"growth_rate": round(last / first - 1, 4), "months": len(sales)}
print("growth", result["growth_rate"])
plt.plot(sales["month"], sales["revenue"])
plt.savefig("revenue.png")
sales.to_csv("revenue.csv", index=False)
"""


@pytest.fixture(scope="module", autouse=True)
def isolating() -> None:
    if not LocalSandbox().available():
        reason = "the local sandbox cannot isolate here (bubblewrap, user namespaces or `make sandbox` missing)"
        if os.environ.get("SANDBOX_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def clients(tmp_path: Path) -> Clients:
    reset_artifact_stores()
    settings = Settings(sandbox_provider="local", artifact_store="local", artifact_path=tmp_path / "a.sqlite3")
    return Clients(settings, catalog=load_catalog())


def run(clients: Clients, code: str, *, mode: str = "run", **context: Any) -> dict[str, Any]:
    payload = {
        "task_id": "j1:s2:1",
        "executor_type": "run_python",
        "task": {"question": "revenue growth", "code": code, "inputs": {"sales": "s1"}},
        "execution_context": {
            "job_id": "j1",
            "step_id": "s2",
            "allowed_tools": ["python.run"],
            "python_inputs": {"sales": TABLE},
            "python_mode": mode,
            **context,
        },
    }
    return run_executor(payload, expected_type="run_python", clients=clients)


def test_sql_rows_become_a_number_and_a_chart_kept_as_artifacts(clients: Clients) -> None:
    out = run(clients, GROWTH_AND_CHART)
    assert out["status"] == "success", out["error"]
    result = out["result"]
    assert result["result"] == {"growth_rate": 0.32, "months": 3}
    assert "growth 0.32" in result["stdout"]
    assert result["sandbox"]["provider"] == "local" and result["sandbox"]["wall_ms"] > 0
    names = {f["name"]: f for f in result["files"]}
    assert set(names) == {"revenue.png", "revenue.csv"}
    assert names["revenue.png"]["media_type"] == "image/png" and names["revenue.csv"]["media_type"] == "text/csv"
    # Only references travel in the result; the bytes are in the store, under the job.
    assert "data_b64" not in str(result)
    store = SqliteArtifactStore(clients.settings.artifact_path)
    found = store.get("j1", names["revenue.png"]["ref"])
    assert found is not None and found[1].startswith(PNG_MAGIC) and found[0].size == names["revenue.png"]["size"]
    assert store.get("another-job", names["revenue.png"]["ref"]) is None
    csv = store.get("j1", names["revenue.csv"]["ref"])
    assert csv is not None and csv[1].decode().splitlines()[0] == "month,revenue"


def test_a_draft_run_keeps_no_file_and_says_what_it_would_write(clients: Clients) -> None:
    out = run(clients, "open('chart.png', 'wb').write(b'x' * 10)\nresult = 1", mode="draft")
    assert out["status"] == "success"
    assert out["result"]["files"] == [] and out["result"]["draft"] is True
    assert out["result"]["files_written"] == [{"name": "chart.png", "media_type": "image/png", "size": 10}]
    assert SqliteArtifactStore(clients.settings.artifact_path).get("j1", "s2-a1-0") is None


def test_bad_code_is_a_failed_step_with_the_errors_last_lines(clients: Clients) -> None:
    out = run(clients, "x = 1\ny = sales['nope']\n")
    assert out["status"] == "failed" and out["error"]["code"] == "TOOL_ERROR"
    assert "KeyError" in out["error"]["message"] and "nope" in out["error"]["message"]
    assert "bootstrap" not in out["error"]["message"]
    assert out["result"]["sandbox"]["status"] == "error"


def test_an_endless_loop_ends_at_the_time_left_in_the_jobs_sandbox_budget(clients: Clients) -> None:
    out = run(clients, "while True:\n    pass\n", sandbox_seconds_left=1.0)
    assert out["status"] == "failed" and out["error"]["code"] == "TOOL_ERROR"
    assert out["result"]["sandbox"]["status"] in ("timeout", "limit")


def test_sandbox_time_is_priced_into_the_steps_usage(clients: Clients) -> None:
    priced = Clients(clients.settings.model_copy(update={"sandbox_price_per_hour": 3600.0}), catalog=load_catalog())
    out = run(priced, "result = 2 + 2")
    wall_ms = out["result"]["sandbox"]["wall_ms"]
    assert out["usage"]["estimated_cost"] == pytest.approx(wall_ms / 1000, rel=0.01)


def test_file_names_and_media_types_are_decided_here_not_by_the_code() -> None:
    data = base64.b64encode(b"<script>alert(1)</script>").decode()
    named = [
        SandboxFile(name="../../etc/page.html", media_type="text/html", size=25, data_b64=data),
        SandboxFile(name="chart.PNG", media_type="text/html", size=25, data_b64=data),
        SandboxFile(name="...", media_type="image/png", size=25, data_b64=data),
    ]
    assert [_safe_file(f, i)[:2] for i, f in enumerate(named)] == [
        ("page.html", "application/octet-stream"),
        ("chart.PNG", "image/png"),
        ("file-2", "application/octet-stream"),
    ]
