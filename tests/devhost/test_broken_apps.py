"""Broken apps and bad command lines: a clear message and a non-zero exit, never a half-started host."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.devhost.hostproc import APPS_DIR, REPO_ROOT, DevHostProcess


def _run(app_dir: Path, tmp_path: Path) -> tuple[int, str]:
    return DevHostProcess(app_dir, tmp_path / "data").run_to_exit()


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        ("broken_no_script", ["function_app.py not found", "Python v2 model needs function_app.py"]),
        (
            "broken_import",
            [
                "Importing",
                "function_app.py failed",
                "Traceback (most recent call last)",
                "helper_module.py",
                "KeyError: 'MISSING_SETTING_FOR_TEST'",
            ],
        ),
        ("broken_no_app", ["Could not find top level function app instances"]),
        ("broken_two_apps", ["More than one top level function app instances", "app, other_app"]),
        ("broken_duplicate", ["Function names must be unique", "'status' and 'Status'"]),
        ("broken_duplicate_exact", ["Function hello does not have a unique function name"]),
        ("broken_route", ["Function 'items': invalid route template", "unknown route constraint 'integer'"]),
        # The Python worker's FunctionLoadError texts (azure-functions-runtime functions.py, validate_function_params).
        (
            "broken_unbound_param",
            [
                "FunctionLoadError: cannot load the hello function: the following parameters are declared in Python "
                "but not in the function definition (function.json or function decorators):  {'tenant'}"
            ],
        ),
        (
            "broken_context_name",
            [
                'FunctionLoadError: cannot load the work function: the "context" parameter is expected to be of type '
                "azure.functions.Context, got \"<class 'azure.functions._durable_functions.OrchestrationContext'>\""
            ],
        ),
        (
            "broken_client_binding",
            [
                "FunctionLoadError: cannot load the work function: Extra parameters in binding definition \u2014 the "
                "following parameters are declared as bindings but are not present in Python: {'client'}"
            ],
        ),
    ],
)
def test_broken_app_exits_non_zero_with_a_clear_message(app: str, expected: list[str], tmp_path: Path) -> None:
    code, out = _run(APPS_DIR / app, tmp_path)
    assert code == 1, out
    assert "error: the function app in" in out
    assert "cannot be loaded" in out
    for text in expected:
        assert text in out, out
    assert "Host started" not in out


def test_missing_app_directory_is_a_usage_error(tmp_path: Path) -> None:
    code, out = _run(tmp_path / "nowhere", tmp_path)
    assert code == 2
    assert "does not exist" in out


def test_port_in_use_is_reported(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "devhost",
                "serve",
                "--app",
                str(APPS_DIR / "http_basic"),
                "--port",
                str(port),
                "--data",
                str(tmp_path / "data"),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 3
    assert f"port {port} on 127.0.0.1 is already in use" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--port", "70000"], "--port must be between 0 and 65535"), (["--grace", "-1"], "--grace must not be negative")],
)
def test_bad_arguments_are_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "devhost", "serve", "--app", str(APPS_DIR / "http_basic"), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr


def test_second_host_on_the_same_data_directory_is_refused(tmp_path: Path) -> None:
    first = DevHostProcess(APPS_DIR / "http_basic", tmp_path / "data").start()
    try:
        code, out = DevHostProcess(
            APPS_DIR / "http_basic", tmp_path / "data", log_path=tmp_path / "second.log"
        ).run_to_exit()
    finally:
        first.stop()
    assert code == 1
    assert "error: the durable engine cannot start:" in out
    assert "in use by another devhost engine" in out
    assert "Traceback" not in out
