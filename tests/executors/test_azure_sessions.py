"""The Azure dynamic sessions sandbox through its REST API, against the fake pool on loopback (HTTPS, bearer token).

The fake runs the posted runner in a plain subprocess (see tests/fakes/sessions_server.py), so these tests check
the wire protocol and what the runner does with inputs, results, errors and files, not the isolation.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator

import pytest

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.clients import Clients
from shared.runtime.settings import Settings
from shared.sandbox.azure_sessions import API_VERSION, SCOPE, AzureSessionsSandbox, session_identifier
from shared.sandbox.base import SandboxLimits, SandboxRequest, SandboxUnavailable
from tests.fakes.credentials import StaticTokenCredential
from tests.fakes.sessions_server import FakeSessionsPool

# A credential that must not be asked: these calls fail before any token is needed.
NO_CALLS = StaticTokenCredential(error=AssertionError("no token should be asked for"))
TABLE = {"columns": ["month", "revenue"], "rows": [["01", 100.0], ["02", 110.0], ["03", 121.0]]}


@pytest.fixture(scope="module")
def pool() -> Iterator[FakeSessionsPool]:
    with FakeSessionsPool() as fake:
        yield fake


def sandbox(pool: FakeSessionsPool, job: str = "job-1", token: str | None = None) -> AzureSessionsSandbox:
    credential = StaticTokenCredential(token or pool.token)
    return AzureSessionsSandbox(pool.endpoint, credential, job, verify=ssl.create_default_context(cafile=pool.ca_file))


def test_a_run_uploads_inputs_executes_and_downloads_the_files_it_wrote(pool: FakeSessionsPool) -> None:
    pool.calls.clear()
    code = (
        "rows = sales if isinstance(sales, list) else sales.to_dict('records')\n"
        "first, last = rows[0]['revenue'], rows[-1]['revenue']\n"
        "result = {'growth': round(last / first - 1, 4)}\n"
        "print('months', len(rows))\n"
        "open('growth.csv', 'w').write('growth\\n0.21\\n')\n"
    )
    credential = StaticTokenCredential(pool.token)
    trust = ssl.create_default_context(cafile=pool.ca_file)
    box = AzureSessionsSandbox(pool.endpoint, credential, "job-42", verify=trust)
    got = box.run(SandboxRequest(code=code, inputs={"sales": TABLE}), SandboxLimits())
    assert got.status == "ok", got.error
    assert got.result == {"growth": 0.21}
    assert got.stdout.strip() == "months 3"
    assert [(f.name, f.media_type, base64.b64decode(f.data_b64)) for f in got.files] == [
        ("growth.csv", "text/csv", b"growth\n0.21\n")
    ]
    assert credential.scopes == [(SCOPE,)]
    # One session per job, named from the job id; inputs uploaded, code run inline, the file downloaded.
    assert {c.identifier for c in pool.calls} == {session_identifier("job-42")}
    assert [c.path.split("/out-")[0] for c in pool.calls] == ["/files/upload", "/code/execute", "/files/content"]
    assert pool.calls[1].body["properties"]["codeInputType"] == "inline"
    assert "job-42" not in session_identifier("job-42")
    assert API_VERSION == "2024-02-02-preview"


def test_bad_code_is_an_error_with_the_codes_own_last_lines(pool: FakeSessionsPool) -> None:
    got = sandbox(pool).run(SandboxRequest(code="x = 1\ny = x / 0\n"), SandboxLimits())
    assert got.status == "error"
    assert got.error is not None and "ZeroDivisionError" in got.error and "line 2" in got.error
    assert "_summary" not in got.error and "RUNNER" not in got.error  # none of the runner's frames


def test_each_run_returns_only_its_own_files(pool: FakeSessionsPool) -> None:
    box = sandbox(pool, "job-files")
    first = box.run(SandboxRequest(code="open('a.txt', 'w').write('a')"), SandboxLimits())
    second = box.run(SandboxRequest(code="result = 2"), SandboxLimits())
    assert [f.name for f in first.files] == ["a.txt"]
    assert second.files == [] and second.result == 2


def test_file_limits_are_enforced_by_the_client(pool: FakeSessionsPool) -> None:
    code = "for i in range(3):\n    open(f'f{i}.txt', 'w').write('x' * 10)\n"
    got = sandbox(pool).run(SandboxRequest(code=code), SandboxLimits(max_files=2))
    assert got.status == "limit" and got.files == [] and "3 files" in (got.error or "")


def test_a_run_longer_than_the_wall_limit_times_out(pool: FakeSessionsPool) -> None:
    got = sandbox(pool).run(SandboxRequest(code="import time\ntime.sleep(5)"), SandboxLimits(wall_seconds=1))
    assert got.status == "timeout"


def test_service_failures_map_to_the_contracts_codes(pool: FakeSessionsPool) -> None:
    with pytest.raises(ProviderError) as denied:
        sandbox(pool, token="wrong").run(SandboxRequest(code="result = 1"), SandboxLimits())
    assert denied.value.code is ErrorCode.AUTH_FAILED
    pool.fail_next.append(429)
    with pytest.raises(ProviderError) as throttled:
        sandbox(pool).run(SandboxRequest(code="result = 1"), SandboxLimits())
    assert throttled.value.code is ErrorCode.RATE_LIMITED and throttled.value.retry_after_ms == 1000
    pool.fail_next.append(503)
    with pytest.raises(ProviderError) as down:
        sandbox(pool).run(SandboxRequest(code="result = 1"), SandboxLimits())
    assert down.value.code is ErrorCode.UPSTREAM_ERROR


def test_no_token_or_no_pool_is_a_classified_failure(pool: FakeSessionsPool) -> None:
    no_token = StaticTokenCredential(error=RuntimeError("identity endpoint down"))
    box = AzureSessionsSandbox(pool.endpoint, no_token, "job-1", verify=ssl.create_default_context(cafile=pool.ca_file))
    with pytest.raises(ProviderError) as denied:
        box.run(SandboxRequest(code="result = 1"), SandboxLimits())
    assert denied.value.code is ErrorCode.AUTH_FAILED
    gone = AzureSessionsSandbox("https://127.0.0.1:9", StaticTokenCredential(pool.token), "job-1")
    with pytest.raises(ProviderError) as unreachable:
        gone.run(SandboxRequest(code="result = 1"), SandboxLimits())
    assert unreachable.value.code is ErrorCode.TRANSIENT


def test_without_an_endpoint_the_sandbox_is_unavailable() -> None:
    with pytest.raises(SandboxUnavailable, match="SANDBOX_SESSIONS_ENDPOINT"):
        AzureSessionsSandbox.from_settings(Settings(sandbox_provider="azure_sessions"), "job-1", NO_CALLS)
    with pytest.raises(SandboxUnavailable, match="https"):
        AzureSessionsSandbox.from_settings(
            Settings(sandbox_provider="azure_sessions", sandbox_sessions_endpoint="http://x"), "job-1", NO_CALLS
        )


def test_the_setting_picks_one_session_per_job_with_the_factorys_credential() -> None:
    from shared.tools.python import build_sandbox

    settings = Settings(sandbox_provider="azure_sessions", sandbox_sessions_endpoint="https://pool.example/")
    credential, trust = StaticTokenCredential("t"), ssl.create_default_context()
    clients = Clients(settings, sandbox_credential=credential, sandbox_tls=trust)
    first, again = build_sandbox(clients, "job-9"), build_sandbox(clients, "job-9")
    assert isinstance(first, AzureSessionsSandbox) and isinstance(again, AzureSessionsSandbox)
    assert first.identifier == again.identifier == session_identifier("job-9") != session_identifier("job-10")
    assert first.endpoint == "https://pool.example"
    assert first.credential is credential and again.credential is credential and first.verify is trust


def test_the_factory_builds_one_managed_identity_credential_per_process() -> None:
    from azure.identity import DefaultAzureCredential

    clients = Clients(
        Settings(sandbox_provider="azure_sessions", azure_client_id="00000000-0000-0000-0000-000000000001")
    )
    built = clients.sandbox_credential
    assert isinstance(built, DefaultAzureCredential) and clients.sandbox_credential is built
    assert clients.sandbox_tls is True
