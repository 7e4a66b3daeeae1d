"""checkov's Bicep checks report zero failures; every skip in the Bicep carries its reason inline."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.infra.bicep import INFRA, REPO, bicep_files

TOOLS = REPO / ".venv-tools"
CHECKOV = TOOLS / "bin" / "checkov"
SKIP = re.compile(r"//\s*checkov:skip=([A-Z0-9_]+)(?::\s*(.*))?$")


def _checkov() -> Path:
    """The isolated checkov, installed on first use with the Makefile's recipe (``make tools``)."""
    if not CHECKOV.exists():
        done = subprocess.run(["make", "-s", "tools"], cwd=REPO, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, f"'make tools' failed:\n{done.stdout}\n{done.stderr}"
    assert CHECKOV.exists(), "make tools did not install checkov into .venv-tools"
    return CHECKOV


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    out = subprocess.run(
        [str(_checkov()), "-d", str(INFRA), "--framework", "bicep", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert out.stdout.strip(), f"checkov printed nothing:\n{out.stderr[-2000:]}"
    data = json.loads(out.stdout)
    # One framework gives one report object (a list when several ran).
    return data[0] if isinstance(data, list) else data


@pytest.mark.timeout(1500)
def test_checkov_reports_zero_failed_checks(report: dict[str, Any]) -> None:
    summary = report["summary"]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}:{c['file_line_range'][0]})"
        for c in report["results"]["failed_checks"]
    ]
    assert summary["failed"] == 0, "checkov failures:\n" + "\n".join(failed)
    assert summary["parsing_errors"] == 0
    # Sanity: checkov really looked at the templates (the raw resources, not only module calls).
    assert summary["passed"] >= 25
    assert summary["resource_count"] >= 40


def test_every_skip_is_justified_inline() -> None:
    skips = 0
    for path in bicep_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = SKIP.search(line)
            if match:
                skips += 1
                reason = (match.group(2) or "").strip()
                assert len(reason) >= 30, f"{path.name}:{number}: checkov skip {match.group(1)} needs a real reason"
            else:
                assert "checkov:skip" not in line, f"{path.name}:{number}: malformed checkov skip"
    assert skips > 0


@pytest.mark.timeout(1500)
def test_skips_in_the_report_are_the_inline_ones(report: dict[str, Any]) -> None:
    inline = {
        match.group(1)
        for path in bicep_files()
        for line in path.read_text().splitlines()
        if (match := SKIP.search(line))
    }
    skipped = report["results"]["skipped_checks"]
    assert len(skipped) == report["summary"]["skipped"]
    assert {c["check_id"] for c in skipped} == inline, "a skip comment that matches no check, or a skip from elsewhere"
