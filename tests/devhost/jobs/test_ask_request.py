"""The POST /api/jobs body `ask` builds from its options: waits included."""

from __future__ import annotations

from devhost.cli import build_parser
from devhost.jobs.ask import build_request


def body(*args: str) -> dict[str, object]:
    return build_request(build_parser().parse_args(["ask", "How many returns?", *args]))


def test_no_wait_options_leave_the_hosts_defaults() -> None:
    sent = body()
    assert "wait" not in sent and sent["approval"] == {"sql": "never"}


def test_a_wait_and_its_expiry_reach_the_job() -> None:
    sent = body("--approval", "always", "--wait-seconds", "600", "--on-wait-expiry", "default")
    assert sent["wait"] == {"timeout_seconds": 600, "on_expiry": "default"}
    assert sent["approval"] == {"sql": "always", "timeout_seconds": 600}
