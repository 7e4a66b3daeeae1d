"""Development storage for an app that asks for it: Azurite started by devhost, as Core Tools needs it started.

An app asks with a setting whose value is ``UseDevelopmentStorage=true`` (``AzureWebJobsStorage`` in
``local.settings.json`` as a rule; any setting counts, as any can name a binding's connection). devhost then
starts Azurite (devhost/azurite.py) with its data under ``<--data>/azurite`` and, for as long as the host
runs, gives each such setting the development account's real connection string (the value the SDKs
understand), so the app's own clients and the storage triggers reach the emulator. On stop the settings get
their values back and Azurite stops.

It also holds what the storage triggers and the storage bindings both read: a binding's connection setting
and why it cannot be used, and host.json's queue options.
"""

from __future__ import annotations

import logging
import os
import re
import typing
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devhost.functions.model import AppLoadError
from devhost.storage.azurite import Azurite, AzuriteError

# The value `func init` writes for the host storage in local.settings.json, and what devhost assumes without one.
DEVELOPMENT_STORAGE = "UseDevelopmentStorage=true"
log = logging.getLogger("devhost")
_DEVELOPMENT = re.compile(r"\s*UseDevelopmentStorage\s*=\s*true\s*;?\s*", re.IGNORECASE)


def asks_for_development_storage(value: str | None) -> bool:
    """Whether a setting's value is ``UseDevelopmentStorage=true`` (as the SDKs and Core Tools spell it)."""
    return value is not None and _DEVELOPMENT.fullmatch(value) is not None


def development_storage_settings(environ: MutableMapping[str, str]) -> list[str]:
    """The names of the settings that ask for development storage, sorted."""
    return sorted(name for name, value in environ.items() if asks_for_development_storage(value))


@dataclass
class DevelopmentStorage:
    """Azurite running for an app, and the settings that point at it until ``stop()``."""

    emulator: Azurite
    settings: list[str]
    environ: MutableMapping[str, str]
    saved: dict[str, str] = field(default_factory=dict)
    # Whether AzureWebJobsStorage was unset and got the local default (development storage).
    defaulted: bool = False

    def describe(self) -> str:
        """The one line the host prints at start."""
        why = f"; {DEFAULT_CONNECTION} was not set, so the local default" if self.defaulted else ""
        return (
            f"Storage: Azurite (development storage for {', '.join(self.settings)}{why}) at blob "
            f"{self.emulator.url('blob')}, queue {self.emulator.url('queue')}, table {self.emulator.url('table')}; "
            f"data in {self.emulator.location}"
        )

    def stop(self) -> None:
        """Give the settings their values back and stop Azurite (idempotent)."""
        saved, self.saved = self.saved, {}
        for name, value in saved.items():
            self.environ[name] = value
        if self.defaulted:
            self.environ.pop(DEFAULT_CONNECTION, None)
        self.emulator.stop()


def default_host_storage(environ: MutableMapping[str, str]) -> bool:
    """Give an app that sets no host storage the local default `func init` writes: development storage.

    Every Functions app has ``AzureWebJobsStorage``; locally it is ``UseDevelopmentStorage=true`` unless set
    (a connection string, or an identity-based ``AzureWebJobsStorage__*`` connection, is left alone).
    Returns whether the default was applied.
    """
    if DEFAULT_CONNECTION in environ or any(key.startswith(f"{DEFAULT_CONNECTION}__") for key in environ):
        return False
    environ[DEFAULT_CONNECTION] = DEVELOPMENT_STORAGE
    return True


def start_development_storage(
    data_dir: Path, environ: MutableMapping[str, str] | None = None
) -> DevelopmentStorage | None:
    """Start Azurite when a setting asks for development storage (None when none does).

    Raises AzuriteError naming the setting when Azurite cannot start; an AzureWebJobsStorage that was only
    the local default is then left unset again, with a warning (the app runs without host storage).
    """
    env = os.environ if environ is None else environ
    defaulted = default_host_storage(env)
    names = development_storage_settings(env)
    if not names:
        return None
    emulator = Azurite(Path(data_dir) / "azurite")
    try:
        emulator.start()
    except AzuriteError as exc:
        if defaulted and names == [DEFAULT_CONNECTION]:
            env.pop(DEFAULT_CONNECTION, None)
            log.warning(
                "%s is not set and its local default, development storage, is not available: %s",
                DEFAULT_CONNECTION,
                exc,
            )
            return None
        asked = ", ".join(f"{name}=UseDevelopmentStorage=true" for name in names)
        raise AzuriteError(f"the app's settings ask for development storage ({asked}), but {exc}") from None
    storage = DevelopmentStorage(emulator, names, env, {name: env[name] for name in names})
    storage.defaulted = defaulted
    for name in names:
        env[name] = emulator.connection_string
    return storage


# ----- what storage bindings and triggers share ----------------------------------------------------------

DEFAULT_CONNECTION = "AzureWebJobsStorage"
# The shortest wait between polls of a queue or container (the trigger loops, host.json maxPollingInterval).
MIN_POLL_S = 0.1
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{1,2}):(\d{1,2}(?:\.\d+)?)$")


@dataclass(frozen=True)
class QueueOptions:
    """host.json ``extensions.queues`` as the devhost honours it."""

    batch_size: int = 16
    max_polling_s: float = 60.0
    visibility_timeout_s: float = 0.0
    max_dequeue_count: int = 5
    base64: bool = True


def _seconds(section: dict[str, Any], key: str, default: float) -> float:
    """A TimeSpan (``hh:mm:ss``) or milliseconds value of host.json; AppLoadError when it is neither."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value) / 1000
    match = _TIMESPAN.fullmatch(value.strip()) if isinstance(value, str) else None
    if not match:
        raise AppLoadError(f"host.json extensions.queues.{key} must be a TimeSpan like '00:00:02', got {value!r}.")
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _count(section: dict[str, Any], key: str, default: int, top: int) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise AppLoadError(f"host.json extensions.queues.{key} must be an integer from 1 to {top}, got {value!r}.")
    return value


def queue_options(host_json: dict[str, Any]) -> QueueOptions:
    """Read ``extensions.queues`` (defaults as the host's)."""
    extensions = host_json.get("extensions")
    section = extensions.get("queues") if isinstance(extensions, dict) else None
    if not isinstance(section, dict):
        section = {}
    encoding = str(section.get("messageEncoding", "base64")).lower()
    if encoding not in ("base64", "none"):
        raise AppLoadError(f"host.json extensions.queues.messageEncoding must be 'base64' or 'none', got {encoding!r}.")
    return QueueOptions(
        batch_size=_count(section, "batchSize", 16, 32),
        max_polling_s=max(MIN_POLL_S, _seconds(section, "maxPollingInterval", 60.0)),
        visibility_timeout_s=_seconds(section, "visibilityTimeout", 0.0),
        max_dequeue_count=_count(section, "maxDequeueCount", 5, 1_000_000),
        base64=encoding == "base64",
    )


def connection_problem(setting: str, environ: typing.Mapping[str, str]) -> str | None:
    """Why the connection setting cannot be used (None when it holds a connection string)."""
    value = environ.get(setting, "")
    if "AccountKey=" in value or "SharedAccessSignature=" in value:
        return None
    if asks_for_development_storage(value):
        return f"{setting} asks for development storage but Azurite is off (--no-azurite)"
    if any(key.startswith(f"{setting}__") for key in environ):
        return f"the connection {setting} is identity-based; the devhost needs a connection string"
    return (
        f"the connection setting {setting} is not a connection string "
        "(set it to UseDevelopmentStorage=true and the devhost starts Azurite)"
    )
