"""``serve --sync normal|full`` reaches the engine's SQLite connection and is shown in the banner."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from devhost.durable.engine import Engine
from devhost.functions.loader import load_app
from tests.conftest import HostFactory
from tests.devhost.conftest import BASIC_APP
from tests.devhost.hostproc import APPS_DIR, DevHostProcess


def test_default_is_normal_and_full_is_passed_to_sqlite(devhost_factory: HostFactory) -> None:
    default = devhost_factory("http_client")
    assert "durability: SQLite WAL, synchronous=NORMAL: commits survive a host crash (kill -9)" in default.output()
    full = devhost_factory("http_client", extra_args=["--sync", "full"])
    assert "durability: SQLite WAL, synchronous=FULL: commits survive a host crash (kill -9), power loss" in (
        full.output()
    )
    status = full.client.get("/admin/host/status", headers=full.admin_headers)
    assert status.status_code == 200 and status.json()["state"] == "Running"


def test_unknown_sync_mode_is_a_usage_error(tmp_path: Path) -> None:
    host = DevHostProcess(APPS_DIR / "http_client", tmp_path / "data", extra_args=["--sync", "off"])
    code, out = host.run_to_exit()
    assert code == 2
    assert "argument --sync: invalid choice: 'off' (choose from 'normal', 'full')" in out


@pytest.mark.parametrize(("synchronous", "expected"), [("NORMAL", "NORMAL"), ("full", "FULL")])
def test_engine_opens_sqlite_with_the_requested_level(tmp_path: Path, synchronous: str, expected: str) -> None:
    async def main() -> str:
        engine = Engine(load_app(BASIC_APP), tmp_path / "data", synchronous=synchronous)
        await engine.start()
        try:
            return engine.synchronous_level()
        finally:
            await engine.stop()

    assert asyncio.run(main()) == expected
