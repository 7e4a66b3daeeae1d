"""Local host keys: master, default function key and the Durable extension's system key.

Keys are generated once into ``<data>/keys.json`` and can be overridden by environment variables, so a
developer (or a test) can pin them. The file is written with owner-only permissions.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

DURABLE_SYSTEM_KEY_NAME = "durabletask_extension"

ENV_MASTER_KEY = "DEVHOST_MASTER_KEY"
ENV_FUNCTION_KEY = "DEVHOST_FUNCTION_KEY"
ENV_SYSTEM_KEY = "DEVHOST_SYSTEM_KEY"


class KeysError(Exception):
    """``keys.json`` exists but cannot be used."""


class _KeysFile(BaseModel):
    """``keys.json``: the shape ``az functionapp keys list`` prints (master, function and system keys)."""

    master_key: str = Field(alias="masterKey", min_length=16)
    function_keys: dict[str, str] = Field(alias="functionKeys")
    system_keys: dict[str, str] = Field(alias="systemKeys")

    model_config = {"populate_by_name": True}


class HostKeys(BaseModel):
    """The three keys a local host needs."""

    master_key: str = Field(min_length=16)
    function_key: str = Field(min_length=16)
    system_key: str = Field(min_length=16)

    model_config = {"frozen": True}

    def is_master(self, presented: str | None) -> bool:
        """True when ``presented`` is the master key."""
        return _same(presented, self.master_key)

    def allows_function(self, presented: str | None) -> bool:
        """Function-level auth: the function key or the master key."""
        return _same(presented, self.function_key) or self.is_master(presented)

    def allows_system(self, presented: str | None) -> bool:
        """Extension webhooks: the durabletask system key or the master key."""
        return _same(presented, self.system_key) or self.is_master(presented)


def _same(presented: str | None, expected: str) -> bool:
    # Constant-time compare so a local attacker cannot time the key out of the host.
    return presented is not None and hmac.compare_digest(presented.encode(), expected.encode())


def _new_key() -> str:
    return secrets.token_urlsafe(40)


def load_or_create_keys(data_dir: Path, environ: dict[str, str] | None = None) -> HostKeys:
    """Read ``<data>/keys.json`` (creating it with fresh keys on first use), then apply env overrides."""
    env = dict(os.environ) if environ is None else environ
    path = data_dir / "keys.json"
    if path.exists():
        try:
            parsed = _KeysFile.model_validate(json.loads(path.read_text(encoding="utf-8")))
            stored = HostKeys(
                master_key=parsed.master_key,
                function_key=parsed.function_keys["default"],
                system_key=parsed.system_keys[DURABLE_SYSTEM_KEY_NAME],
            )
        except (ValueError, KeyError, ValidationError) as exc:
            raise KeysError(f"{path} is not a valid keys file ({exc}); delete it to generate new keys") from exc
    else:
        stored = HostKeys(master_key=_new_key(), function_key=_new_key(), system_key=_new_key())
        data_dir.mkdir(parents=True, exist_ok=True)
        document = _KeysFile(
            masterKey=stored.master_key,
            functionKeys={"default": stored.function_key},
            systemKeys={DURABLE_SYSTEM_KEY_NAME: stored.system_key},
        )
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(document.model_dump_json(by_alias=True, indent=2))
        os.replace(tmp, path)
    overrides = {
        "master_key": env.get(ENV_MASTER_KEY),
        "function_key": env.get(ENV_FUNCTION_KEY),
        "system_key": env.get(ENV_SYSTEM_KEY),
    }
    values = stored.model_dump()
    values.update({k: v for k, v in overrides.items() if v})
    try:
        return HostKeys.model_validate(values)
    except ValidationError as exc:
        raise KeysError(f"a key from the environment is too short (at least 16 characters): {exc}") from exc
