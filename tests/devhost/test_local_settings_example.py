"""Copying local.settings.example.json to local.settings.json must not move the app to another task hub."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from devhost.functions.loader import read_host_config

REPO_ROOT = Path(__file__).resolve().parents[2]


def _hub(root: Path, monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> str:
    monkeypatch.delenv("TASKHUB_NAME", raising=False)
    monkeypatch.delenv("WEBSITE_SITE_NAME", raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return read_host_config(root).hub_name


def test_copying_the_example_keeps_the_task_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(REPO_ROOT / "host.json", tmp_path / "host.json")
    without = _hub(tmp_path, monkeypatch, {})
    example = json.loads((REPO_ROOT / "local.settings.example.json").read_text(encoding="utf-8"))
    with_example = _hub(tmp_path, monkeypatch, example["Values"])
    assert with_example == without == "TestHubName"


def test_another_hub_name_is_another_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(REPO_ROOT / "host.json", tmp_path / "host.json")
    assert _hub(tmp_path, monkeypatch, {"TASKHUB_NAME": "OtherHub"}) == "OtherHub"
