"""A failing activity: the host log line and the failure details carry the app's traceback and its chained cause.

The Python worker reports the whole chain as the stack (azure-functions-runtime utils/tracing.py,
marshall_exception_trace); the host logs "Exception while executing function: ... Result: Failure
Exception: ... Stack: ...". The frames through which devhost called the function are not the app's and are left out.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.engine import Engine
from tests.devhost.conftest import EngineRunner, complete, sdk_input

APP = """
import azure.durable_functions as df

app = df.DFApp()


def lookup(key):
    return {}[key]


@app.activity_trigger(input_name="key")
def sync_fails(key: str) -> str:
    try:
        return lookup(key)
    except KeyError as exc:
        raise RuntimeError(f"no setting {key}") from exc


@app.activity_trigger(input_name="key")
async def async_fails(key: str) -> str:
    try:
        return lookup(key)
    except KeyError as exc:
        raise RuntimeError(f"no setting {key}") from exc


@app.orchestration_trigger(context_name="context")
def run(context: df.DurableOrchestrationContext):
    return (yield context.call_activity(context.get_input(), "colour"))
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    root.mkdir()
    (root / "function_app.py").write_text(textwrap.dedent(APP))
    (root / "host.json").write_text('{"version": "2.0"}')
    return root


def _failed_event(status: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in status["historyEvents"] if e["EventType"] == "TaskFailed")


@pytest.mark.parametrize("activity", ["sync_fails", "async_fails"])
def test_failed_activity_reports_the_app_traceback_with_its_cause(
    run_engine: EngineRunner, app_dir: Path, activity: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(engine: Engine) -> dict[str, Any]:
        iid = await engine.start_instance("run", None, sdk_input(activity))
        await complete(engine, iid)
        status = await engine.get_status(iid, show_history=True, show_history_output=True)
        assert status is not None
        return status

    with caplog.at_level(logging.INFO, logger="devhost.host"):
        status = run_engine(body, app_dir=app_dir)
    assert status["runtimeStatus"] == "Failed"
    failed = _failed_event(status)
    assert failed["Reason"] == f"Activity function '{activity}' failed: RuntimeError: no setting colour"
    details = failed["Details"]
    for text in (
        "KeyError: 'colour'",
        "The above exception was the direct cause of the following exception:",
        'function_app.py", line ',
        f"in {activity}",
        "in lookup",
        "RuntimeError: no setting colour",
    ):
        assert text in details, details
    assert "devhost" not in details and "concurrent" not in details and "asyncio" not in details, details
    assert details.startswith("Traceback (most recent call last):")
    # The orchestration's output carries the same details (the SDK appends them to the reason).
    assert "direct cause" in status["output"] and "devhost" not in status["output"]

    line = next(r.getMessage() for r in caplog.records if "Exception while executing function" in r.getMessage())
    assert line.startswith(f"Exception while executing function: Functions.{activity} (Id=")
    assert "Result: Failure\nException: RuntimeError: no setting colour\nStack: Traceback" in line
    assert "KeyError: 'colour'" in line and "direct cause" in line
    assert "devhost" not in line.split("Stack:", 1)[1]
