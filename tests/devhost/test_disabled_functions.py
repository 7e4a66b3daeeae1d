"""Functions turned off by an ``AzureWebJobs.<name>.Disabled`` setting (the extension's e2e app has them).

The host indexes them but starts no listener: the route is gone (404), and the Durable extension does not
know a disabled activity or entity, so an orchestration calling one fails with its "doesn't exist, is
disabled" message rather than waiting; everything else runs as usual.
"""

from __future__ import annotations

import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess

# As local.settings.json Values would set them (it is git-ignored): an activity, an entity and a route
# (in Linux App Service's underscore spelling) off; on_activity's "false" leaves it on.
SETTINGS = {
    "AzureWebJobs.off_activity.Disabled": "true",
    "AzureWebJobs.OffEntity.Disabled": "1",
    "AzureWebJobs_off_route_Disabled": "true",
    "AzureWebJobs.on_activity.Disabled": "false",
}


@pytest.fixture(scope="module")
def host(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("disabled_functions", env=SETTINGS)


def _run(host: DevHostProcess, name: str) -> dict[str, object]:
    resp = host.client.post(f"{host.base_url}/api/start/{name}")
    assert resp.status_code == 202, resp.text
    return host.wait_status(str(resp.json()["id"]))


def test_enabled_functions_run_beside_disabled_ones(host: DevHostProcess) -> None:
    done = _run(host, "call_on")
    assert done["runtimeStatus"] == "Completed" and done["output"] == "on x"


def test_a_disabled_activity_fails_the_orchestration_with_the_extensions_message(host: DevHostProcess) -> None:
    done = _run(host, "call_off_activity")
    assert done["runtimeStatus"] == "Failed"
    assert "The function 'off_activity' doesn't exist, is disabled, or is not an activity function" in str(
        done["output"]
    )


def test_a_disabled_entity_fails_the_call(host: DevHostProcess) -> None:
    done = _run(host, "call_off_entity")
    assert done["runtimeStatus"] == "Failed"
    assert "doesn't exist, is disabled, or is not an entity function" in str(done["output"])


def test_a_disabled_http_function_has_no_route_and_the_log_says_why(host: DevHostProcess) -> None:
    assert host.client.get(f"{host.base_url}/api/off").status_code == 404
    out = host.output()
    assert "Function 'off_route' is disabled" in out and "Function 'off_activity' is disabled" in out
    assert "Function 'on_activity' is disabled" not in out
