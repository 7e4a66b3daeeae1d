"""serve --grpc-port: a bad value, a port in use, and an app directory without function_app.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devhost.cli import main
from tests.devhost.hostproc import DevHostProcess

pytestmark = pytest.mark.slow


def test_grpc_port_out_of_range_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--app", str(tmp_path), "--grpc-port", "70000"]) == 2
    assert "--grpc-port must be between 0 and 65535" in capsys.readouterr().err


def test_grpc_port_in_use_exits_3(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        host = DevHostProcess(app, tmp_path / "data", no_auth=True, extra_args=["--grpc-port", str(port)])
        code, output = host.run_to_exit(timeout_s=120)
    assert code == 3, output
    assert f"--grpc-port {port}" in output and "pick another with --grpc-port" in output


def test_without_grpc_port_an_app_needs_its_script(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    code, output = DevHostProcess(app, tmp_path / "data", no_auth=True).run_to_exit(timeout_s=120)
    assert code == 1 and "function_app.py" in output
