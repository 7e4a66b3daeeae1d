"""What the code reads and what the Bicep sets must match, with docs/settings.md as the only exceptions."""

from __future__ import annotations

import json
import re
from pathlib import Path

from shared.runtime.settings import Settings
from tests.infra.bicep import REPO, app_setting_names, app_settings_vars

DOC = REPO / "docs" / "settings.md"
# Deployed code (everything .funcignore keeps): where an os.environ read would bypass Settings.
DEPLOYED = ["function_app.py", "api", "activities", "orchestrators", "shared"]
ENV_READ = re.compile(
    r"""(?:os\.environ\.get|os\.getenv|os\.environ\[|environ\.get)\(?\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""
)
HOW_TO_FIX = "see docs/settings.md: set it in infra/modules/functionapp.bicep or list it as optional"


def _doc_table(heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``## heading``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, re.M))


def settings_fields() -> set[str]:
    """Environment variables behind the fields of shared.runtime.settings.Settings."""
    return {name.upper() for name in Settings.model_fields}


def host_json_vars() -> set[str]:
    """``%NAME%`` references in host.json."""
    return set(re.findall(r"%([A-Za-z_][A-Za-z0-9_]*)%", json.dumps(json.loads((REPO / "host.json").read_text()))))


def direct_env_reads() -> dict[str, set[str]]:
    """Variables that deployed code reads from os.environ directly, by file."""
    found: dict[str, set[str]] = {}
    for entry in DEPLOYED:
        path = REPO / entry
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in files:
            names = set(ENV_READ.findall(file.read_text(encoding="utf-8")))
            if names:
                found[str(file.relative_to(REPO))] = names
    return found


def code_reads() -> set[str]:
    """Every setting the deployed code reads."""
    direct = set().union(*direct_env_reads().values()) if direct_env_reads() else set()
    return settings_fields() | host_json_vars() | direct


def test_the_doc_tables_are_present() -> None:
    assert _doc_table("Optional settings")
    assert _doc_table("Platform settings")
    assert _doc_table("Set by the Bicep, read by the app")


def test_every_setting_the_code_reads_is_set_by_bicep_or_documented_optional() -> None:
    optional = _doc_table("Optional settings")
    bicep = app_setting_names()
    unset = code_reads() - bicep
    assert not unset - optional, (
        f"read by the code but neither set by the Bicep nor optional: {sorted(unset - optional)}; {HOW_TO_FIX}"
    )
    assert not optional - unset, (
        f"listed as optional but set by the Bicep or not read at all: {sorted(optional - unset)}"
    )


def test_every_setting_the_bicep_sets_is_read() -> None:
    platform = _doc_table("Platform settings")
    bicep = app_setting_names()
    unread = bicep - code_reads()
    assert unread <= platform, f"set by the Bicep but read by nothing: {sorted(unread - platform)}"
    assert platform <= bicep, f"documented platform settings the Bicep does not set: {sorted(platform - bicep)}"
    assert not platform & settings_fields(), "a Settings field is not a platform setting"


def test_the_lists_match_exactly() -> None:
    optional = _doc_table("Optional settings")
    platform = _doc_table("Platform settings")
    assert code_reads() | platform == app_setting_names() | optional
    assert not optional & app_setting_names()


def test_the_doc_lists_exactly_the_app_settings_the_bicep_sets_for_the_code() -> None:
    assert _doc_table("Set by the Bicep, read by the app") == set(app_settings_vars()["appCodeSettings"])


def test_the_bicep_sets_no_secret_field() -> None:
    secret_fields = {
        name.upper() for name, field in Settings.model_fields.items() if "SecretStr" in str(field.annotation)
    }
    # With local auth disabled on the component, its connection string identifies it and grants nothing.
    allowed = {"APPLICATIONINSIGHTS_CONNECTION_STRING"}
    assert not (secret_fields - allowed) & app_setting_names()


def test_direct_environment_reads_are_only_platform_settings() -> None:
    platform = _doc_table("Platform settings")
    for file, names in direct_env_reads().items():
        assert names <= platform | settings_fields(), f"{file} reads {sorted(names - platform)} outside Settings"


def test_durable_backends_set_disjoint_host_overrides() -> None:
    settings = app_settings_vars()
    assert not set(settings["azureStorageDurableSettings"]) & set(settings["durableTaskSchedulerSettings"])
    assert Path(REPO / "host.json").is_file()
