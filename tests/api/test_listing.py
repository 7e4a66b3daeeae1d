"""GET /api/jobs lists newest first without scanning the store: windows of created time walked backwards.

Most tests run ``newest_first`` against a fake Durable list API (httpx.MockTransport, no sockets) that
answers in a shuffled order, filters by created time exactly as the real API does and pages with
continuation tokens, so windows, ties and gaps can be laid out at will. The last tests run it against a
real devhost.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from api.auth import Caller, Principal
from api.errors import ApiError
from api.job_list import (
    ListCursor,
    ListWindows,
    decode_cursor,
    durable_instances,
    encode_cursor,
    list_item,
    new_job_id,
    newest_first,
)
from shared.jobs.models import ORCHESTRATOR_NAME
from tests.devhost.hostproc import APPS_DIR, DevHostProcess

NOW = 1_800_000_000.0  # a fixed "now" (2027-01-15)
BINDING = json.dumps({"rpcBaseUrl": "http://durable.test/runtime/webhooks/durabletask/"})


def _text(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class FakeDurable:
    """The Durable list API over a list of instances (exact created times, whole-second createdTime)."""

    instances: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    requests: int = 0
    served: int = 0
    seed: int = 7

    def add(
        self, created: float, *, owner: str | None = None, runtime: str = "Completed", name: str = ORCHESTRATOR_NAME
    ) -> str:
        job_id = new_job_id()
        job_input = {"job_id": job_id, "request": {"question": f"q {job_id}"}}
        if owner:
            job_input["owner"] = {"id": owner, "name": owner}
        self.instances.append(
            (
                created,
                {
                    "name": name,
                    "instanceId": job_id,
                    "runtimeStatus": runtime,
                    "input": json.dumps(job_input),
                    "customStatus": None,
                    "output": {"answer": "a"} if runtime == "Completed" else None,
                    "createdTime": _text(created),
                    "lastUpdatedTime": _text(created),
                },
            )
        )
        return job_id

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        q = {k: v[0] for k, v in parse_qs(urlsplit(str(request.url)).query).items()}
        low = _parse(q["createdTimeFrom"]) if "createdTimeFrom" in q else None
        high = _parse(q["createdTimeTo"]) if "createdTimeTo" in q else None
        statuses = set(q["runtimeStatus"].split(",")) if "runtimeStatus" in q else None
        rows = [
            data
            for created, data in self.instances
            if (low is None or created >= low)
            and (high is None or created <= high)
            and (statuses is None or data["runtimeStatus"] in statuses)
        ]
        random.Random(self.seed + len(rows)).shuffle(rows)  # the API promises no order
        start = int(request.headers.get("x-ms-continuation-token") or 0)
        top = int(q.get("top", 100))
        page = rows[start : start + top]
        if q.get("showInput") == "false":
            page = [dict(d, input=None) for d in page]
        self.served += len(page)
        headers = {"x-ms-continuation-token": str(start + top)} if start + top < len(rows) else {}
        return httpx.Response(200, json=page, headers=headers)

    def expected(self, accept: Callable[[dict[str, Any]], bool] = lambda d: True) -> list[str]:
        """Every accepted id, newest first: created second descending, then id descending."""
        rows = [(int(c), d["instanceId"]) for c, d in self.instances if accept(d)]
        return [job_id for _, job_id in sorted(rows, reverse=True)]


ANYONE = Caller(principal=None, admin=True)


def walk(
    fake: FakeDurable,
    *,
    limit: int,
    windows: ListWindows,
    caller: Caller = ANYONE,
    wanted: str | None = None,
    runtime: list[str] | None = None,
    max_pages: int = 10_000,
) -> list[list[str]]:
    """Every page from the first to the last, through encoded cursors (as a client would)."""

    async def run() -> list[list[str]]:
        pages: list[list[str]] = []
        cursor: ListCursor | None = None
        async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as http:
            for _ in range(max_pages):
                items, cursor = await newest_first(
                    BINDING,
                    runtime,
                    lambda data: list_item(data, caller, wanted),
                    limit=limit,
                    after=cursor,
                    now=NOW,
                    windows=windows,
                    http=http,
                )
                assert len(items) <= limit
                pages.append([str(i["id"]) for i in items])
                if cursor is None or len(pages) == max_pages:
                    return pages
                cursor = decode_cursor(encode_cursor(cursor))
        raise AssertionError("unreachable")

    return asyncio.run(run())


def flat(pages: list[list[str]]) -> list[str]:
    return [job_id for page in pages for job_id in page]


def test_pages_list_every_job_newest_first_across_many_windows() -> None:
    fake = FakeDurable()
    rng = random.Random(1)
    for second in range(120):  # two minutes of jobs, 0-6 per second, many sharing a second
        for _ in range(rng.randrange(7)):
            fake.add(NOW - 120 + second + rng.random())
    pages = walk(fake, limit=7, windows=ListWindows(first_s=1, page_size=5))
    assert flat(pages) == fake.expected()
    assert all(len(page) == 7 for page in pages[:-1])
    assert fake.requests > 2 * len(pages)  # really more than one window (and continuation page) per page


def test_jobs_sharing_a_second_are_neither_skipped_nor_repeated() -> None:
    fake = FakeDurable()
    ids = [fake.add(NOW - 3 + i / 1000) for i in range(40)]  # 40 jobs in one second, in submit order
    pages = walk(fake, limit=3, windows=ListWindows(first_s=1, page_size=4))
    listed = flat(pages)
    assert listed == list(reversed(ids))  # sub-second order: newest submitted first (ids sort by time)
    assert len(set(listed)) == 40


def test_a_page_reads_about_a_window_not_the_store() -> None:
    fake = FakeDurable()
    for i in range(20_000):  # a big, old history: one job every 3 s, ending a day ago
        fake.add(NOW - 86_400 - i * 3)
    recent = [fake.add(NOW - 30 + i) for i in range(25)]
    pages = walk(fake, limit=20, windows=ListWindows(first_s=10), max_pages=1)
    assert pages[0] == list(reversed(recent))[:20]
    assert fake.served < 200  # not 20,000
    assert fake.requests < 20


def test_old_jobs_behind_a_long_gap_are_found() -> None:
    fake = FakeDurable()
    new = [fake.add(NOW - 5 + i) for i in range(3)]
    old = [fake.add(NOW - 40 * 86_400 + i) for i in range(4)]  # 40 days earlier
    pages = walk(fake, limit=5, windows=ListWindows(first_s=1))
    assert flat(pages) == list(reversed(new)) + list(reversed(old))


def test_a_request_out_of_windows_ends_its_page_early_and_the_cursor_resumes() -> None:
    fake = FakeDurable()
    ids = [fake.add(NOW - 2**k) for k in range(1, 16)]  # ever sparser into the past
    pages = walk(fake, limit=10, windows=ListWindows(first_s=1, max_windows=2))
    assert flat(pages) == ids  # ids were added newest first
    assert any(len(page) < 10 for page in pages[:-1])  # short pages that still carried a cursor


def test_an_empty_store_is_one_short_answer() -> None:
    fake = FakeDurable()
    assert walk(fake, limit=20, windows=ListWindows()) == [[]]
    assert fake.requests == 2  # the first window and one probe for anything older


def test_owner_and_status_filters_hold_across_windows() -> None:
    fake = FakeDurable()
    rng = random.Random(3)
    for i in range(300):
        owner = rng.choice(["ann", "bob"])
        runtime = rng.choice(["Completed", "Running", "Terminated"])
        fake.add(NOW - i * 0.7, owner=owner, runtime=runtime)
    fake.add(NOW - 1, owner="ann", name="some_other_orchestration")
    ann = Caller(principal=Principal(id="ann", name="ann", idp="aad"), admin=False)

    def anns(data: dict[str, Any]) -> bool:
        return data["name"] == ORCHESTRATOR_NAME and json.loads(data["input"]).get("owner", {}).get("id") == "ann"

    assert flat(walk(fake, limit=9, windows=ListWindows(first_s=2), caller=ann)) == fake.expected(anns)
    cancelled = flat(
        walk(fake, limit=9, windows=ListWindows(first_s=2), caller=ann, wanted="cancelled", runtime=["Terminated"])
    )
    assert cancelled == fake.expected(lambda d: anns(d) and d["runtimeStatus"] == "Terminated")


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64!",
        base64.urlsafe_b64encode(b"2026-01-01T00:00:00Z|abc").decode(),  # the old format
        base64.urlsafe_b64encode(json.dumps({"t": 1, "id": "x", "w": 10**12}).encode()).decode(),  # huge window
        base64.urlsafe_b64encode(json.dumps({"t": -5, "id": "x", "w": 1}).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps({"t": 1, "id": "x", "w": 1, "more": 1}).encode()).decode(),
    ],
)
def test_a_bad_cursor_is_a_400_naming_the_cursor(cursor: str) -> None:
    with pytest.raises(ApiError) as caught:
        decode_cursor(cursor)
    assert (caught.value.status, caught.value.code, caught.value.field) == (400, "INVALID_PARAMETER", "cursor")


def test_job_ids_sort_by_creation_time() -> None:
    ids = [new_job_id() for _ in range(5_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 32 and i[12] == "7" and int(i, 16) for i in ids)  # UUIDv7, 32 hex chars
    later = new_job_id()
    assert abs(int(later[:12], 16) / 1000 - time.time()) < 3600  # the millisecond timestamp leads


# ----- against a real devhost ---------------------------------------------------------------------------------


def test_devhost_lists_by_created_time_through_windows_and_continuation_tokens(tmp_path: Path) -> None:
    host = DevHostProcess(APPS_DIR / "bench_noop", tmp_path / "data", no_auth=True).start()
    try:
        started = []
        for _ in range(30):
            resp = host.client.post("/runtime/webhooks/durabletask/orchestrators/chain", json={"steps": 0})
            assert resp.status_code == 202, resp.text
            started.append(resp.json()["id"])
        binding = json.dumps({"rpcBaseUrl": host.rpc_base_url()})
        everything = asyncio.run(durable_instances(binding, None, page_size=1000))
        paged = asyncio.run(durable_instances(binding, None, page_size=4))
        assert [i["instanceId"] for i in paged] == [i["instanceId"] for i in everything] == started  # created order
        since = int(_parse(everything[0]["createdTime"]))
        windowed = asyncio.run(
            durable_instances(binding, None, page_size=3, created_from=since, created_to=since + 3600)
        )
        assert {i["instanceId"] for i in windowed} == set(started)

        async def pages() -> list[str]:
            out: list[str] = []
            cursor: ListCursor | None = None
            while True:
                items, cursor = await newest_first(
                    binding,
                    None,
                    lambda d: {"id": d["instanceId"]},
                    limit=4,
                    after=cursor,
                    now=time.time(),
                    windows=ListWindows(first_s=1, page_size=3),
                )
                out += [str(i["id"]) for i in items]
                if cursor is None:
                    return out

        expected = [
            j for _, j in sorted(((int(_parse(i["createdTime"])), i["instanceId"]) for i in everything), reverse=True)
        ]
        assert asyncio.run(pages()) == expected
    finally:
        host.stop()


def test_the_job_api_pages_jobs_submitted_in_the_same_second_newest_first(tmp_path: Path) -> None:
    # The real job API over jobs that complete at once (tests/apps/list_seed).
    host = DevHostProcess(APPS_DIR / "list_seed", tmp_path / "data", env={"TASKHUB_NAME": "ListTest"}).start()
    try:
        key = {"x-functions-key": host.keys.function if host.keys else ""}
        with httpx.Client(base_url=host.base_url, headers=key, timeout=60) as http:
            submitted = []
            for n in range(25):
                resp = http.post("/api/jobs", json={"question": f"question {n}"})
                assert resp.status_code == 202, resp.text
                submitted.append(resp.json()["id"])
            listed: list[str] = []
            cursor = None
            while True:
                params: dict[str, Any] = {"limit": 4} | ({"cursor": cursor} if cursor else {})
                page = http.get("/api/jobs", params=params).json()
                assert len(page["jobs"]) <= 4
                listed += [j["id"] for j in page["jobs"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert listed == list(reversed(submitted))  # newest first, none skipped or repeated
            bad = http.get("/api/jobs", params={"cursor": "bogus"})
            assert bad.status_code == 400 and bad.json()["error"]["field"] == "cursor"
    finally:
        host.stop()
