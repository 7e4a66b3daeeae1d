"""The CLI's exit code reads the view's typed ``finished``: it keeps no list of the final statuses."""

from __future__ import annotations

from devhost.jobs.printed import EXIT_CANCELLED, EXIT_COMPLETED, EXIT_FAILED, exit_code


def test_the_exit_code_follows_the_views_finished() -> None:
    assert exit_code({"status": "running", "finished": False}) == 0
    assert exit_code({"status": "waiting_for_user", "finished": False}) == 0
    assert exit_code({"status": "completed", "finished": True}) == EXIT_COMPLETED
    assert exit_code({"status": "cancelled", "finished": True}) == EXIT_CANCELLED
    assert exit_code({"status": "failed", "finished": True}) == EXIT_FAILED
    # A way of ending the CLI has never heard of is a failure, not a crash.
    assert exit_code({"status": "expired", "finished": True}) == EXIT_FAILED
