"""host.json Durable settings devhost does not follow: one line at start saying what it does instead."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from devhost.functions.loader import load_app
from tests.devhost.hostproc import DevHostProcess

APP = """
import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="hello")
def hello(req: func.HttpRequest) -> str:
    return "hello"
"""


def _app(tmp_path: Path, durable: dict[str, Any]) -> Path:
    root = tmp_path / "app"
    root.mkdir()
    (root / "function_app.py").write_text(APP)
    (root / "host.json").write_text(json.dumps({"version": "2.0", "extensions": {"durableTask": durable}}))
    return root


def _notes(root: Path, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="devhost.loader"):
        load_app(root)
    return [r.getMessage() for r in caplog.records if r.name == "devhost.loader"]


@pytest.mark.parametrize(
    ("provider", "label"),
    [
        ("AzureStorage", "Azure Storage"),
        ("Netherite", "Netherite"),
        ("mssql", "MSSQL"),
        ("azureManaged", "Durable Task Scheduler"),
    ],
)
def test_storage_provider_is_named_with_what_devhost_does_instead(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, provider: str, label: str
) -> None:
    root = _app(tmp_path, {"storageProvider": {"type": provider, "connectionStringName": "X"}})
    assert _notes(root, caplog) == [
        f"host.json storageProvider '{provider}' ({label}): devhost keeps Durable state in SQLite in its data "
        f"directory instead and ignores the provider's settings; no {label} backend is contacted."
    ]


def test_unknown_storage_provider(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (note,) = _notes(_app(tmp_path, {"storageProvider": {"type": "Redis"}}), caplog)
    assert note.startswith("host.json storageProvider type 'Redis' is none the extension knows")


def test_hub_name_from_a_missing_setting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEVHOST_TEST_HUB", raising=False)
    monkeypatch.delenv("WEBSITE_SITE_NAME", raising=False)
    root = _app(tmp_path, {"hubName": "%DEVHOST_TEST_HUB%"})
    assert _notes(root, caplog) == [
        "host.json hubName '%DEVHOST_TEST_HUB%': app setting DEVHOST_TEST_HUB is not set (the extension would keep "
        "the name as written, which Azure Storage refuses); devhost uses task hub 'TestHubName' instead."
    ]
    monkeypatch.setenv("DEVHOST_TEST_HUB", "MyHub")
    assert _notes(root, caplog) == []
    assert load_app(root).host.hub_name == "MyHub"


def test_nothing_to_say_for_a_plain_host_json(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert _notes(_app(tmp_path, {"hubName": "PlainHub"}), caplog) == []


def test_the_line_is_printed_at_start(tmp_path: Path) -> None:
    root = _app(tmp_path, {"storageProvider": {"type": "mssql"}})
    host = DevHostProcess(root, tmp_path / "data").start()
    try:
        out = host.output()
    finally:
        host.stop()
    line = "host.json storageProvider 'mssql' (MSSQL): devhost keeps Durable state in SQLite"
    assert line in out
    assert out.index(line) < out.index("Host started")
