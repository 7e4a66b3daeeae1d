"""Host keys: generation, persistence, environment overrides and the auth predicates."""

import json
from pathlib import Path

import pytest

from devhost.functions.http.keys import KeysError, load_or_create_keys


def test_generated_once_then_reused(tmp_path: Path) -> None:
    first = load_or_create_keys(tmp_path / "data", environ={})
    stored = json.loads((tmp_path / "data" / "keys.json").read_text(encoding="utf-8"))
    assert stored == {
        "masterKey": first.master_key,
        "functionKeys": {"default": first.function_key},
        "systemKeys": {"durabletask_extension": first.system_key},
    }
    assert load_or_create_keys(tmp_path / "data", environ={}) == first


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    stored = load_or_create_keys(tmp_path, environ={})
    keys = load_or_create_keys(tmp_path, environ={"DEVHOST_MASTER_KEY": "m" * 20, "DEVHOST_SYSTEM_KEY": "s" * 20})
    assert keys.master_key == "m" * 20
    assert keys.system_key == "s" * 20
    assert keys.function_key == stored.function_key
    with pytest.raises(KeysError, match="at least 16 characters"):
        load_or_create_keys(tmp_path, environ={"DEVHOST_FUNCTION_KEY": "short"})


@pytest.mark.parametrize(
    "content",
    ["{", "[]", '{"masterKey": "x"}', '{"masterKey": "0123456789abcdef", "functionKeys": {}, "systemKeys": {}}'],
)
def test_bad_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "keys.json").write_text(content, encoding="utf-8")
    with pytest.raises(KeysError, match="delete it to generate new keys"):
        load_or_create_keys(tmp_path, environ={})


def test_auth_predicates(tmp_path: Path) -> None:
    keys = load_or_create_keys(tmp_path, environ={})
    assert keys.allows_function(keys.function_key) and keys.allows_function(keys.master_key)
    assert not keys.allows_function(keys.system_key) and not keys.allows_function(None)
    assert keys.allows_system(keys.system_key) and keys.allows_system(keys.master_key)
    assert not keys.allows_system(keys.function_key)
    assert keys.is_master(keys.master_key) and not keys.is_master(keys.function_key + "x")


def test_no_keys_is_the_core_tools_default_and_enforcement_is_devhosts() -> None:
    from devhost.cli import build_parser  # noqa: PLC0415

    parser = build_parser()
    assert parser.parse_args(["serve"]).no_auth is False  # keys are enforced unless asked otherwise
    assert parser.parse_args(["serve", "--no-keys"]).no_auth is True
    assert parser.parse_args(["serve", "--no-auth"]).no_auth is True
