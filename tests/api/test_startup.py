"""Start-up errors on devhost (issue 8 §3): bad app settings and a bad local.settings.json are named in a line or two.

devhost sets ``FUNCTIONS_CORETOOLS_ENVIRONMENT=true`` as ``func start`` does, and the app checks its settings
at import only then; on Azure (no flag) the same settings answer 503 CONFIG_ERROR (tests/api/test_edge.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from devhost.functions.loader import load_local_settings
from devhost.functions.model import AppLoadError
from tests.devhost.hostproc import APPS_DIR, REPO_ROOT, DevHostProcess


def error_lines(out: str) -> list[str]:
    """The lines from devhost's ``error:`` line on."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    return lines[start:]


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SQL_MAX_ROWS", "abc", "valid integer"),
        ("LLM_PROVIDER", "llama", "'offline', 'azure_openai' or 'openai'"),
        ("MODEL_PRICES", '{"my-model": 0.4}', '"input_per_million"'),
    ],
)
def test_bad_setting_stops_devhost_naming_it(tmp_path: Path, name: str, value: str, says: str) -> None:
    code, out = DevHostProcess(REPO_ROOT, tmp_path / "data", env={name: value}).run_to_exit()
    assert code == 1, out
    first, second = error_lines(out)[:2]
    assert first.startswith("error: the function app in") and "cannot be loaded" in first
    assert f"ConfigError: invalid setting {name}: " in second and says in second, out
    assert "Host started" not in out


def app_with_local_settings(tmp_path: Path, content: bytes) -> Path:
    app = tmp_path / "app"
    shutil.copytree(APPS_DIR / "http_basic", app)
    (app / "local.settings.json").write_bytes(content)
    return app


LATIN1 = '{"Values": {"GREETING": "café"}}'.encode("latin-1")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (LATIN1, "is not UTF-8 text (byte 0xe9 at offset"),
        (b'{"Values": {"A": "b",}}', "is not valid JSON"),
        (b'{"Values": {"A": 1, "B": {"x": 1}, "C": "ok"}}', "not a string: A, B"),
        (b'{"Values": ["A=b"]}', '"Values" must be an object'),
        (b'["Values"]', "must contain a JSON object"),
    ],
)
def test_bad_local_settings_file_is_one_clear_line(tmp_path: Path, content: bytes, says: str) -> None:
    app = app_with_local_settings(tmp_path, content)
    code, out = DevHostProcess(app, tmp_path / "data").run_to_exit()
    assert code == 1, out
    lines = error_lines(out)
    assert len(lines) == 2 and says in lines[1], out
    assert "local.settings.json" in lines[1]
    assert "Traceback" not in out


def test_loader_names_the_problem_without_starting_a_host(tmp_path: Path) -> None:
    (tmp_path / "local.settings.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(AppLoadError, match="not UTF-8 text"):
        load_local_settings(tmp_path)


def test_string_values_and_nulls_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGE_TEST_SETTING", raising=False)
    body = {"Values": {"EDGE_TEST_SETTING": "x", "EDGE_TEST_UNSET": None}}
    (tmp_path / "local.settings.json").write_text(json.dumps(body), encoding="utf-8-sig")
    load_local_settings(tmp_path)
    assert os.environ["EDGE_TEST_SETTING"] == "x"
    assert "EDGE_TEST_UNSET" not in os.environ
    monkeypatch.delenv("EDGE_TEST_SETTING")
