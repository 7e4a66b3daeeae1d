"""HTTP apps with an empty route prefix (routes at the site root, host paths reserved) or unimplemented bindings."""

from __future__ import annotations

from tests.conftest import HostFactory


def test_empty_route_prefix(devhost_factory: HostFactory) -> None:
    host = devhost_factory("http_noprefix")
    assert f"        hello: [GET] http://127.0.0.1:{host.port}/hello/{{name:alpha}}" in host.output()
    assert host.client.get("/root").text == "root"
    assert host.client.get("/").json()["api"] == "/"  # the landing page: no function owns "/"
    assert host.client.get("/hello/World").text == "hello World"
    assert host.client.get("/api/hello/World").status_code == 404
    assert host.client.get("/hello/42").status_code == 404
    status = host.client.get("/admin/host/status", headers=host.admin_headers)
    assert status.status_code == 200
    assert status.json()["state"] == "Running"


def test_unimplemented_bindings_warn_and_still_run(devhost_factory: HostFactory) -> None:
    host = devhost_factory("http_unsupported")
    assert (
        "Function 'enqueue': queue binding 'msg' is not run (the connection setting AzureWebJobsStorage is not a "
        "connection string" in host.output()
    )
    resp = host.client.post("/api/enqueue", content=b"hello")
    assert resp.status_code == 200
    assert resp.text == "queued"
