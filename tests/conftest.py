"""Shared fixtures: real devhost processes for end-to-end tests (see tests/devhost/hostproc.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.storage.azurite import Azurite
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


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """One Azurite (npm, installed by `make install`) on loopback for the whole session; stopped at its end.

    Tests share the account, so each uses its own container, queue or table names.
    """
    with Azurite(tmp_path_factory.mktemp("azurite")) as emulator:
        yield emulator


# `make test-fast` runs `pytest -m "not slow"`. A test module is slow when it starts processes (devhost,
# llama.cpp, a browser, checkov, Azurite) or lives in a folder that always does; `make test` runs everything.
_SLOW_SIGNS = (
    "DevHostProcess",
    "azurite",
    "devhost_factory",
    "running_host",
    "subprocess",
    "Popen",
    "LlamaServer",
    "checkov",
)
_SLOW_DIRS = {"web", "realmodel"}
_TESTS = Path(__file__).resolve().parent


def _top_dir(path: Path) -> str:
    """The folder under tests/ that holds ``path`` ('' outside it)."""
    parts = path.relative_to(_TESTS).parts if path.is_relative_to(_TESTS) else ()
    return parts[0] if len(parts) > 1 else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of process-starting modules ``slow``; run the longest folders first."""
    slow: dict[Path, bool] = {}
    for item in items:
        path = Path(str(item.path))
        if path not in slow:
            text = path.read_text(encoding="utf-8", errors="ignore") if path.is_file() else ""
            slow[path] = _top_dir(path) in _SLOW_DIRS or any(sign in text for sign in _SLOW_SIGNS)
        if slow[path]:
            item.add_marker(pytest.mark.slow)
    # Under `make test` (pytest-xdist, --dist loadfile) each worker takes the next file when it is free: files of a
    # minute or more each (the browser and llama.cpp folders) handed out last would leave one core idle at the end.
    # The sort is stable, so every other test keeps its order.
    items.sort(key=lambda item: _top_dir(Path(str(item.path))) not in _SLOW_DIRS)
