"""host.json limits: function timeout, maxOrchestrationActions, activity concurrency, default version."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from devhost.durable.engine import Engine
from tests.devhost.conftest import APPS, EngineRunner, complete, sdk_input

LIMITS_APP = APPS / "durable_limits"


def test_activity_function_timeout(run_engine: EngineRunner, tmp_path: Path) -> None:
    app_dir = tmp_path / "timeout_app"
    app_dir.mkdir()
    shutil.copy(LIMITS_APP / "function_app.py", app_dir / "function_app.py")
    host = json.loads((LIMITS_APP / "host.json").read_text(encoding="utf-8"))
    host["functionTimeout"] = "00:00:00.3"
    (app_dir / "host.json").write_text(json.dumps(host), encoding="utf-8")

    async def body(engine: Engine) -> None:
        iid = await engine.start_instance("timeout_orch", None, None)
        status = await complete(engine, iid)
        assert status["runtimeStatus"] == "Failed"
        expected = "Activity function 'hang' failed: FunctionTimeoutException: Timeout value of 0.3 seconds"
        assert expected in status["output"]

    run_engine(body, app_dir=app_dir)


def test_max_orchestration_actions(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        assert (await complete(engine, await engine.start_instance("too_many", None, sdk_input(5))))["output"] == 5
        status = await complete(engine, await engine.start_instance("too_many", None, sdk_input(6)))
        assert status["runtimeStatus"] == "Failed"
        assert "Maximum amount of orchestration actions (5) has been reached" in status["output"]

    run_engine(body, app_dir=LIMITS_APP)


def test_blocked_activity_does_not_stall_other_instances(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        release: threading.Event = engine.app.find("activity", "block").user_function.__globals__["release"]  # type: ignore[union-attr]
        release.clear()
        blocked = await engine.start_instance("blocker", None, None)
        # With two activity workers, one held by 'block', the greeter still runs to completion.
        greeter = await engine.start_instance("greeter", None, None)
        status = await complete(engine, greeter)
        assert status["output"] == ["Hello a!", "Hello b!", "Hello c!"]
        assert (await engine.get_status(blocked) or {})["runtimeStatus"] == "Running"
        release.set()
        assert (await complete(engine, blocked))["output"] is True

    run_engine(body, app_dir=LIMITS_APP)


def test_versions_default_and_explicit(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        status = await complete(engine, await engine.start_instance("version_orch", None, None))
        assert status["output"] == ["1.0", "1.0", "0.9"]
        explicit = await engine.start_instance("version_orch", None, None, version="2.0")
        assert (await complete(engine, explicit))["output"] == ["2.0", "1.0", "0.9"]

    run_engine(body, app_dir=LIMITS_APP)


def test_hub_name_and_database_file(run_engine: EngineRunner) -> None:
    async def body(engine: Engine) -> None:
        await asyncio.sleep(0)
        assert engine.hub_name == "LimitsHub"
        assert engine.db_path.name == "durable-LimitsHub.sqlite3" and engine.db_path.exists()

    run_engine(body, app_dir=LIMITS_APP)


STOP_SCRIPT = """
import asyncio, sys
from pathlib import Path
from devhost.durable.engine import Engine
from devhost.functions.loader import load_app

async def main():
    engine = Engine(load_app(Path(sys.argv[1])), Path(sys.argv[2]))
    await engine.start()
    iid = await engine.start_instance("blocker", None, None)
    while engine.activity_runner.active == 0:
        await asyncio.sleep(0.01)
    await engine.stop(grace_s=0.1)
    print("stopped", iid, flush=True)

asyncio.run(main())
"""


def test_stop_does_not_wait_for_a_hung_sync_activity(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    # 'block' would hold its thread for 60 s; the process must still exit right after stop().
    done = subprocess.run(
        [sys.executable, "-c", STOP_SCRIPT, str(LIMITS_APP), str(tmp_path / "data")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stopped ")
