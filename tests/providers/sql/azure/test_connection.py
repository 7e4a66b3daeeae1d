"""Azure SQL connection pieces: the token attribute, connection strings, driver detection."""

from __future__ import annotations

import logging
import struct

import pyodbc
import pytest
from azure.core.credentials import AccessToken
from pydantic import SecretStr

import shared.providers.sql.odbc
from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.sql.azure import (
    SQL_COPT_SS_ACCESS_TOKEN,
    SQL_SCOPE,
    build_azure_sql_database,
    build_connection_string,
    complete_connection_string,
    connector_from_settings,
    pack_access_token,
    server_address,
)
from shared.providers.sql.odbc import MSODBC18, odbc_value, parse_connection_string, require_driver
from shared.runtime.settings import Settings
from tests.fakes.credentials import StaticTokenCredential


def test_token_struct_is_byte_exact() -> None:
    assert SQL_COPT_SS_ACCESS_TOKEN == 1256
    assert pack_access_token("eyJ0") == b"\x08\x00\x00\x00e\x00y\x00J\x000\x00"


def test_token_struct_matches_the_documented_layout_for_a_long_token() -> None:
    token = "eyJhbGciOiJSUzI1NiJ9." + "a" * 1500 + ".sig-_"
    packed = pack_access_token(token)
    # Documented layout, built independently: 4-byte little-endian length, then every byte of the
    # ASCII token followed by a zero byte, and no terminator.
    expanded = b"".join(bytes([b, 0]) for b in token.encode("ascii"))
    assert packed[:4] == len(expanded).to_bytes(4, "little")
    assert packed[4:] == expanded
    assert struct.unpack_from("<I", packed)[0] == 2 * len(token) == len(packed) - 4


def test_empty_token_is_auth_failed() -> None:
    with pytest.raises(ProviderError) as info:
        pack_access_token("")
    assert info.value.code is ErrorCode.AUTH_FAILED


# --- connection strings ------------------------------------------------------------------------


def test_connection_string_with_every_option() -> None:
    text = build_connection_string(
        driver=MSODBC18,
        server="sales-srv",
        database="sales",
        read_only_intent=True,
        host_name_in_certificate="*.database.windows.net",
    )
    assert text == (
        "Driver={ODBC Driver 18 for SQL Server};Server=tcp:sales-srv.database.windows.net,1433;"
        "Database=sales;Encrypt=yes;TrustServerCertificate=no;"
        "HostNameInCertificate=*.database.windows.net;ApplicationIntent=ReadOnly;APP=durable-ai-jobs"
    )
    # Token authentication: no credentials of any kind in the string.
    keys = {k.lower() for k, _ in parse_connection_string(text)}
    assert not keys & {"uid", "pwd", "authentication", "trusted_connection"}


def test_connection_string_defaults_without_read_only_intent() -> None:
    text = build_connection_string(driver=MSODBC18, server="srv.database.windows.net", database="db")
    pairs = dict(parse_connection_string(text))
    assert "ApplicationIntent" not in pairs
    assert pairs["Encrypt"] == "yes" and pairs["TrustServerCertificate"] == "no"
    assert pairs["Server"] == "tcp:srv.database.windows.net,1433"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("srv", "tcp:srv.database.windows.net,1433"),
        ("srv.database.windows.net", "tcp:srv.database.windows.net,1433"),
        ("tcp:srv.database.windows.net,14330", "tcp:srv.database.windows.net,14330"),
        ("srv.privatelink.database.windows.net,1433", "tcp:srv.privatelink.database.windows.net,1433"),
    ],
)
def test_server_address_forms(given: str, expected: str) -> None:
    assert server_address(given) == expected


@pytest.mark.parametrize("value", ["we;ird", "br}ace", "{open", "a=b", " padded ", "plain"])
def test_values_are_escaped_and_round_trip(value: str) -> None:
    text = build_connection_string(driver=MSODBC18, server="srv", database=value or "x", application_name=value)
    pairs = parse_connection_string(text)
    assert dict(pairs)["APP"] == value
    if value != "plain":
        assert odbc_value(value).startswith("{")
    assert odbc_value("br}ace") == "{br}}ace}"
    assert odbc_value("") == "{}"


def test_empty_database_is_a_config_error() -> None:
    with pytest.raises(ProviderError) as info:
        build_connection_string(driver=MSODBC18, server="srv", database=" ")
    assert info.value.code is ErrorCode.CONFIG_ERROR


def test_user_connection_string_is_completed() -> None:
    text, driver, has_credentials = complete_connection_string(
        "Server=tcp:srv.database.windows.net,1433;Database={my;db}", default_driver=MSODBC18, read_only_intent=True
    )
    pairs = parse_connection_string(text)
    assert pairs[0] == ("Driver", MSODBC18) and driver == MSODBC18
    assert ("ApplicationIntent", "ReadOnly") in pairs
    assert ("Database", "my;db") in pairs
    assert has_credentials is False

    text, driver, has_credentials = complete_connection_string(
        "Driver={ODBC Driver 17 for SQL Server};Server=s;UID=app;PWD={p;w}}d};ApplicationIntent=ReadWrite",
        default_driver=MSODBC18,
        read_only_intent=True,
    )
    pairs = parse_connection_string(text)
    assert driver == "ODBC Driver 17 for SQL Server" and has_credentials is True
    assert [v for k, v in pairs if k == "ApplicationIntent"] == ["ReadWrite"]  # the user's choice stands
    assert ("PWD", "p;w}d") in pairs


def test_malformed_connection_string_is_a_config_error() -> None:
    with pytest.raises(ProviderError) as info:
        complete_connection_string("Server={unterminated", default_driver=MSODBC18, read_only_intent=False)
    assert info.value.code is ErrorCode.CONFIG_ERROR


def test_settings_need_server_and_database_or_a_connection_string() -> None:
    with pytest.raises(ProviderError) as info:
        build_azure_sql_database(Settings(sql_provider="azure_sql", azure_sql_server="srv"))
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert "AZURE_SQL_DATABASE" in info.value.message


def test_token_connector_asks_for_the_sql_scope_per_connection() -> None:
    credential = StaticTokenCredential("tok-abc")
    settings = Settings(
        sql_provider="azure_sql", azure_sql_server="srv", azure_sql_database="sales", azure_sql_read_only_intent=True
    )
    connector = connector_from_settings(settings, credential=credential)
    assert connector.attrs_before() == {1256: pack_access_token("tok-abc")}
    assert connector.attrs_before() is not None
    assert credential.scopes == [(SQL_SCOPE,), (SQL_SCOPE,)]
    assert SQL_SCOPE == "https://database.windows.net/.default"


def test_connection_string_with_credentials_sends_no_token() -> None:
    credential = StaticTokenCredential("unused")
    settings = Settings(
        sql_provider="azure_sql",
        azure_sql_connection_string=SecretStr("Server=srv;Database=db;UID=reader;PWD=secret"),
    )
    connector = connector_from_settings(settings, credential=credential)
    assert connector.attrs_before() is None
    assert credential.scopes == []


def test_token_failure_is_auth_failed() -> None:
    from azure.identity import CredentialUnavailableError

    class Broken:
        def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
            raise CredentialUnavailableError("no managed identity endpoint found")

    settings = Settings(sql_provider="azure_sql", azure_sql_server="srv", azure_sql_database="db")
    connector = connector_from_settings(settings, credential=Broken())
    with pytest.raises(ProviderError) as info:
        connector.attrs_before()
    assert info.value.code is ErrorCode.AUTH_FAILED


# --- driver detection --------------------------------------------------------------------------


def test_missing_driver_names_the_driver_and_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    if MSODBC18 in pyodbc.drivers():
        pytest.skip("Microsoft's ODBC Driver 18 is installed here")
    with pytest.raises(ProviderError) as info:
        require_driver(MSODBC18, install_hint=shared.providers.sql.odbc.MSODBC_INSTALL_HINT)
    message = info.value.message
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert MSODBC18 in message and "msodbcsql18" in message and "not in Debian" in message
    assert "SQLite3" in message  # what *is* installed is listed


def test_a_query_without_the_driver_fails_with_that_message() -> None:
    if MSODBC18 in pyodbc.drivers():
        pytest.skip("Microsoft's ODBC Driver 18 is installed here")
    settings = Settings(sql_provider="azure_sql", azure_sql_server="srv", azure_sql_database="db")
    database = build_azure_sql_database(settings, credential=StaticTokenCredential("t"))
    with pytest.raises(ProviderError) as info:
        database.execute("SELECT 1", max_rows=1, timeout_s=5)
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert MSODBC18 in info.value.message and "msodbcsql18" in info.value.message


def test_drivers_are_logged_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(shared.providers.sql.odbc, "_logged", False)
    with caplog.at_level(logging.INFO, logger="shared.providers.sql.odbc"):
        shared.providers.sql.odbc.installed_drivers()
        shared.providers.sql.odbc.installed_drivers()
    lines = [r.getMessage() for r in caplog.records if r.name == "shared.providers.sql.odbc"]
    assert len(lines) == 1 and lines[0].startswith("ODBC drivers found:") and "SQLite3" in lines[0]
    require_driver("SQLite3")  # installed by scripts/install-system-deps.sh
