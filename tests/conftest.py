"""Shared fixtures: real devhost processes for end-to-end tests (see tests/devhost/hostproc.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devhost.hostproc import APPS_DIR, DevHostProcess

HostFactory = Callable[..., DevHostProcess]


@pytest.fixture(scope="module")
def devhost_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostFactory]:
    """Start devhost subprocesses for one test module; all are stopped (SIGTERM) when the module ends.

    Call it with an app directory (absolute, or a name under tests/apps) and DevHostProcess keyword
    arguments; it returns the started host.
    """
    hosts: list[DevHostProcess] = []

    def start(app: str | Path, **kwargs: Any) -> DevHostProcess:
        app_dir = Path(app) if Path(app).is_absolute() else APPS_DIR / app
        data_dir = kwargs.pop("data_dir", None) or tmp_path_factory.mktemp(f"devhost-{app_dir.name}")
        host = DevHostProcess(app_dir, Path(data_dir), **kwargs)
        hosts.append(host)
        return host.start()

    yield start
    for host in hosts:
        host.stop()
