"""Importing the function app touches nothing: no files, no connections, no settings errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, function_app
functions = function_app.app.get_functions()
print(json.dumps(sorted((f.get_function_name(), f.get_trigger().type) for f in functions)))
"""


def test_import_builds_nothing_even_with_broken_settings(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LLM_PROVIDER": "no-such-provider",  # invalid: must only fail when settings are first used
        "SQLITE_DATABASE_PATH": str(tmp_path / "db" / "sample.db"),
        "LOCAL_INDEX_PATH": str(tmp_path / "index" / "docs.sqlite3"),
        "PARTIAL_OUTPUT_PATH": str(tmp_path / "partial.sqlite3"),
        "AZURE_OPENAI_ENDPOINT": "https://unreachable.invalid",
    }
    env.pop("FUNCTIONS_CORETOOLS_ENVIRONMENT", None)  # as on Azure
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    functions = dict(json.loads(result.stdout.strip().splitlines()[-1]))
    assert functions["job_orchestrator"] == "orchestrationTrigger"
    for activity in ("plan", "consult_rag", "execute_azure_sql", "generate_response", "supervise"):
        assert functions[activity] == "activityTrigger"
    assert functions["submit_job"] == "httpTrigger"
    assert list(tmp_path.iterdir()) == []  # no database, index or store was created


def test_import_under_core_tools_or_devhost_fails_on_bad_settings(tmp_path: Path) -> None:
    # FUNCTIONS_CORETOOLS_ENVIRONMENT=true is what `func start` and devhost tell the worker: fail the start.
    env = {**os.environ, "FUNCTIONS_CORETOOLS_ENVIRONMENT": "true", "SQL_MAX_ROWS": "abc"}
    env["PARTIAL_OUTPUT_PATH"] = str(tmp_path / "partial.sqlite3")
    result = subprocess.run(
        [sys.executable, "-c", "import function_app"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("shared.runtime.settings.ConfigError: invalid setting SQL_MAX_ROWS: "), result.stderr
    assert list(tmp_path.iterdir()) == []
