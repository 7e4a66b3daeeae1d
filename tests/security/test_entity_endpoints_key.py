"""The Durable entity HTTP endpoints need the same key as every other Durable webhook: the
``durabletask_extension`` system key or the master key; no key, a wrong key or the app's function key is
a 401 and nothing is signalled (against a real devhost process)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("entity_counter")


def _call(host: DevHostProcess, method: str, path: str, code: str | None, **kwargs: Any) -> httpx.Response:
    params = {**({"code": code} if code is not None else {}), **kwargs.pop("params", {})}
    return host.client.request(method, host.webhook(f"entities/{path}"), params=params, **kwargs)


def _state(host: DevHostProcess, path: str) -> Any:
    """The entity's state once it exists (polled: signals are delivered asynchronously)."""
    assert host.keys is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp = _call(host, "GET", path, host.keys.system)
        if resp.status_code == 200:
            return resp.json()
        time.sleep(0.02)
    raise AssertionError(f"entity {path} never appeared")


def _wrong_keys(host: DevHostProcess) -> list[str | None]:
    assert host.keys is not None
    return [None, "", "not-the-key-0123456789", host.keys.function]


@pytest.mark.parametrize("which", range(4))
def test_a_signal_without_the_system_key_is_refused_and_not_sent(host: DevHostProcess, which: int) -> None:
    code = _wrong_keys(host)[which]
    key = f"k{which}"
    resp = _call(host, "POST", f"counter/{key}", code, params={"op": "add"}, json="5")
    assert resp.status_code == 401
    assert _call(host, "DELETE", f"counter/{key}", code).status_code == 401
    # A keyed signal after it: operations run in order, so the state shows whether the refused one ran first.
    assert host.keys is not None
    assert _call(host, "POST", f"counter/{key}", host.keys.system, params={"op": "add"}, json="1").status_code == 202
    assert _state(host, f"counter/{key}") == 1


@pytest.mark.parametrize("which", range(4))
def test_reading_or_listing_entities_without_the_system_key_is_refused(host: DevHostProcess, which: int) -> None:
    code = _wrong_keys(host)[which]
    assert _call(host, "GET", "counter/r1", code).status_code == 401
    assert _call(host, "GET", "counter", code).status_code == 401
    assert host.client.get(host.webhook("instances"), params={"code": code} if code else {}).status_code == 401


def test_the_system_key_and_the_master_key_are_accepted(host: DevHostProcess) -> None:
    assert host.keys is not None
    for code in (host.keys.system, host.keys.master):
        assert _call(host, "POST", "counter/ok", code, params={"op": "add"}, json="1").status_code == 202
        assert _call(host, "GET", "counter", code).status_code == 200
