"""A real devhost process serving the gRPC sidecar protocol, a real durabletask worker and client against it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from durabletask import client, worker

from tests.devhost.hostproc import DevHostProcess
from tests.devhost.sidecar import entity_samples, samples

_GRPC_BANNER = re.compile(r"Durable Task gRPC \(sidecar protocol, no auth\): [^:\s]+:(\d+)")


def grpc_address(host: DevHostProcess) -> str:
    """The host's gRPC endpoint, from its banner."""
    match = _GRPC_BANNER.search(host.output())
    assert match, host.output()
    return f"127.0.0.1:{match.group(1)}"


def start_worker(address: str) -> worker.TaskHubGrpcWorker:
    """A durabletask worker with every sample (and the counter entity) registered, started against ``address``."""
    w = worker.TaskHubGrpcWorker(host_address=address)
    for fn in samples.ORCHESTRATORS:
        w.add_orchestrator(fn)
    for act in samples.ACTIVITIES:
        w.add_activity(act)
    w.add_entity(entity_samples.counter)
    w.start()
    return w


@pytest.fixture(scope="module")
def sidecar_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHostProcess]:
    """devhost with no function_app.py, its gRPC endpoint on a free port, no keys."""
    root = tmp_path_factory.mktemp("sidecar")
    app = root / "app"
    app.mkdir()
    host = DevHostProcess(app, root / "data", no_auth=True, extra_args=["--grpc-port", "0"])
    host.start()
    try:
        yield host
    finally:
        host.stop()


@pytest.fixture(scope="module")
def address(sidecar_host: DevHostProcess) -> str:
    """host:port of the running host's gRPC endpoint."""
    return grpc_address(sidecar_host)


@pytest.fixture(scope="module")
def dt_worker(address: str) -> Iterator[worker.TaskHubGrpcWorker]:
    """One started worker for the module."""
    w = start_worker(address)
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def dt_client(address: str, dt_worker: worker.TaskHubGrpcWorker) -> client.TaskHubGrpcClient:
    """A client (the worker is running)."""
    return client.TaskHubGrpcClient(host_address=address)


def runs(runs_dir: Path, name: str) -> list[str]:
    """The executions an activity noted (see samples.RUNS_DIR_ENV)."""
    path = runs_dir / f"{name}.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []
