"""Development storage for an app that asks for it: Azurite started by devhost, as Core Tools needs it started.

An app asks with a setting whose value is ``UseDevelopmentStorage=true`` (``AzureWebJobsStorage`` in
``local.settings.json`` as a rule; any setting counts, as any can name a binding's connection). devhost then
starts Azurite (devhost/azurite.py) with its data under ``<--data>/azurite`` and, for as long as the host
runs, gives each such setting the development account's real connection string (the value the SDKs
understand), so the app's own clients and the storage triggers reach the emulator. On stop the settings get
their values back and Azurite stops.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from devhost.azurite import Azurite, AzuriteError

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

    def describe(self) -> str:
        """The one line the host prints at start."""
        return (
            f"Storage: Azurite (development storage for {', '.join(self.settings)}) at blob "
            f"{self.emulator.url('blob')}, queue {self.emulator.url('queue')}, table {self.emulator.url('table')}; "
            f"data in {self.emulator.location}"
        )

    def stop(self) -> None:
        """Give the settings their values back and stop Azurite (idempotent)."""
        saved, self.saved = self.saved, {}
        for name, value in saved.items():
            self.environ[name] = value
        self.emulator.stop()


def start_development_storage(
    data_dir: Path, environ: MutableMapping[str, str] | None = None
) -> DevelopmentStorage | None:
    """Start Azurite when a setting asks for development storage (None when none does).

    Raises AzuriteError naming the setting when Azurite cannot start.
    """
    env = os.environ if environ is None else environ
    names = development_storage_settings(env)
    if not names:
        return None
    emulator = Azurite(Path(data_dir) / "azurite")
    try:
        emulator.start()
    except AzuriteError as exc:
        asked = ", ".join(f"{name}=UseDevelopmentStorage=true" for name in names)
        raise AzuriteError(f"the app's settings ask for development storage ({asked}), but {exc}") from None
    storage = DevelopmentStorage(emulator, names, env, {name: env[name] for name in names})
    for name in names:
        env[name] = emulator.connection_string
    return storage
