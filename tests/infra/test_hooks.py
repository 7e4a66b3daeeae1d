"""The postprovision hook and its SQL grant script, run as real processes with fake CLIs on PATH."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.infra.bicep import INFRA, REPO

HOOK = INFRA / "hooks" / "postprovision.sh"
GRANTS = INFRA / "hooks" / "sql_grants.py"
OBJECT_ID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _load_grants() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sql_grants", GRANTS)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_grant_script_is_select_on_one_schema_and_deny_on_sensitive_tables() -> None:
    grants = _load_grants()
    denied = grants.sensitive_tables(REPO / "data" / "catalog.json")
    assert "customer_contacts" in denied
    sql = grants.grant_script(user="id-api-x1", object_id=OBJECT_ID, schema="dbo", denied_tables=denied)
    assert "CREATE USER [id-api-x1] FROM EXTERNAL PROVIDER WITH OBJECT_ID = '" + OBJECT_ID + "';" in sql
    assert "IF NOT EXISTS (SELECT 1 FROM sys.database_principals WHERE name = N'id-api-x1')" in sql
    grants_and_denies = [line for line in sql.splitlines() if line.startswith(("GRANT", "DENY"))]
    assert grants_and_denies[0] == "GRANT SELECT ON SCHEMA::[dbo] TO [id-api-x1];"
    assert all(line.startswith("DENY SELECT ON OBJECT::[dbo].") for line in grants_and_denies[1:])
    assert len(grants_and_denies) == 1 + len(denied)
    lowered = sql.lower()
    for forbidden in (
        "db_datawriter",
        "db_datareader",
        "db_owner",
        "alter role",
        "sp_addrolemember",
        "insert",
        "update",
        "delete",
        "control",
    ):
        assert forbidden not in lowered


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"user": "x]; DROP TABLE t; --", "object_id": OBJECT_ID, "schema": "dbo"}, "not a plain identifier"),
        ({"user": "id-api", "object_id": "not-a-guid", "schema": "dbo"}, "not a GUID"),
        ({"user": "id-api", "object_id": OBJECT_ID, "schema": "dbo]; GRANT CONTROL"}, "not a plain identifier"),
    ],
    ids=["user-injection", "bad-object-id", "schema-injection"],
)
def test_grant_script_rejects_unsafe_input(kwargs: dict[str, str], message: str) -> None:
    grants = _load_grants()
    with pytest.raises(grants.GrantError, match=message):
        grants.grant_script(denied_tables=[], **kwargs)


def test_grant_cli_reports_bad_input_with_exit_2() -> None:
    out = subprocess.run(
        [sys.executable, str(GRANTS), "--user", "id", "--object-id", "nope"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "sql_grants: object id 'nope' is not a GUID" in out.stderr


def _fake_bin(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    (bin_dir / "sqlcmd").write_text(
        "#!/bin/sh\n"
        f'echo "sqlcmd $*" >> "{log}"\n'
        'while [ $# -gt 0 ]; do if [ "$1" = "-i" ]; then shift; echo "--- $1" >> "' + str(log) + '"; '
        'grep -E "^(GRANT|DENY|    CREATE USER)" "$1" >> "' + str(log) + '" || true; fi; shift; done\n'
    )
    # The fake python runs the real grant script and records (does not run) the Azure ingestion.
    (bin_dir / "fakepython").write_text(
        "#!/bin/sh\n"
        f'echo "python $* SEARCH_PROVIDER=$SEARCH_PROVIDER AZURE_SEARCH_INDEX=$AZURE_SEARCH_INDEX" >> "{log}"\n'
        f'if [ "$1" = "-m" ]; then exit 0; fi\nexec "{sys.executable}" "$@"\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir, log


def _hook_env(bin_dir: Path, **values: str) -> dict[str, str]:
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHON": str(bin_dir / "fakepython"),
    }
    env.update(values)
    return env


FULL_ENV = {
    "AZURE_RESOURCE_GROUP": "rg-test",
    "AZURE_SEARCH_ENDPOINT": "https://srch-x.search.windows.net",
    "AZURE_SEARCH_INDEX": "jobs-docs",
    "AZURE_OPENAI_ENDPOINT": "https://cog-x.openai.azure.com/",
    "AZURE_OPENAI_EMBEDDING_DEPLOYMENT": "text-embedding-3-small",
    "AZURE_SQL_SERVER": "sql-x.database.windows.net",
    "AZURE_SQL_SERVER_NAME": "sql-x",
    "AZURE_SQL_DATABASE": "sqldb-jobs",
    "AZURE_SQL_READER_SCHEMA": "dbo",
    "APP_IDENTITY_NAME": "id-api-x",
    "APP_IDENTITY_PRINCIPAL_ID": OBJECT_ID,
}


@pytest.mark.skipif(not Path("/bin/sh").exists(), reason="needs a POSIX shell")
def test_hook_seeds_search_then_sql_then_the_read_only_user(tmp_path: Path) -> None:
    bin_dir, log = _fake_bin(tmp_path)
    if any((Path(p) / "az").exists() for p in ("/usr/bin", "/bin")):
        pytest.skip("an az CLI on /usr/bin would try the real firewall")
    out = subprocess.run(
        ["sh", str(HOOK)], env=_hook_env(bin_dir, **FULL_ENV), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr + out.stdout
    calls = log.read_text().splitlines()
    assert (
        calls[0]
        == "python -m shared.ingest data/docs --target azure SEARCH_PROVIDER=azure AZURE_SEARCH_INDEX=jobs-docs"
    )
    sql_calls = [c for c in calls if c.startswith("sqlcmd ")]
    assert len(sql_calls) == 3
    for call in sql_calls:
        assert (
            "-S tcp:sql-x.database.windows.net,1433 -d sqldb-jobs --authentication-method ActiveDirectoryDefault -b"
            in call
        )
    files = [c.removeprefix("--- ") for c in calls if c.startswith("--- ")]
    assert files[:2] == ["data/sql/schema.tsql.sql", "data/sql/data.sql"]
    assert "GRANT SELECT ON SCHEMA::[dbo] TO [id-api-x];" in calls
    assert "DENY SELECT ON OBJECT::[dbo].[customer_contacts] TO [id-api-x];" in calls
    assert not any("db_datawriter" in c for c in calls)
    assert "done" in out.stdout


def test_hook_names_the_missing_value(tmp_path: Path) -> None:
    bin_dir, _ = _fake_bin(tmp_path)
    env = {k: v for k, v in FULL_ENV.items() if k != "APP_IDENTITY_PRINCIPAL_ID"}
    out = subprocess.run(["sh", str(HOOK)], env=_hook_env(bin_dir, **env), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "APP_IDENTITY_PRINCIPAL_ID is not set" in out.stderr


def test_hook_scripts_never_grant_write_roles() -> None:
    for path in (INFRA / "hooks").iterdir():
        text = path.read_text().lower()
        assert "db_datawriter" not in re.sub(r"never db_datawriter", "", text), path.name
