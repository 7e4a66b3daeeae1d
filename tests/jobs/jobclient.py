"""A small client for the job API of a devhost process (tests only)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.devhost.hostproc import DevHostProcess

TERMINAL = {"completed", "failed", "cancelled"}


class JobClient:
    """Calls /api/jobs with the host's function key."""

    def __init__(self, host: DevHostProcess) -> None:
        self.host = host
        key = host.keys.function if host.keys else ""
        self.http = httpx.Client(base_url=host.base_url, headers={"x-functions-key": key}, timeout=60)

    def submit(self, question: str, **body: Any) -> str:
        resp = self.http.post("/api/jobs", json={"question": question, **body})
        assert resp.status_code == 202, resp.text
        return str(resp.json()["id"])

    def view(self, job_id: str, **params: Any) -> dict[str, Any]:
        resp = self.http.get(f"/api/jobs/{job_id}", params=params)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def wait(
        self,
        job_id: str,
        until: set[str] | None = None,
        timeout_s: float = 60,
        *,
        allow_waiting: bool = False,
        poll_s: float = 0.05,
    ) -> dict[str, Any]:
        wanted = until or TERMINAL
        deadline = time.monotonic() + timeout_s
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            view = self.view(job_id)
            if view["status"] in wanted:
                return view
            if view["status"] == "waiting_for_user" and "waiting_for_user" not in wanted and not allow_waiting:
                raise AssertionError(f"job unexpectedly waits for the user: {view['waiting']}")
            if view["status"] in TERMINAL:
                raise AssertionError(f"job ended {view['status']} while waiting for {wanted}: {view.get('error')}")
            time.sleep(poll_s)
        raise AssertionError(f"job {job_id} did not reach {wanted}; last view: {view}")

    def next_question(self, job_id: str, answered: str, timeout_s: float = 30) -> dict[str, Any]:
        """The question the job asks after ``answered`` (polls until it is asked)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            waiting = self.wait(job_id, {"waiting_for_user"})["waiting"]
            if waiting["question_id"] != answered:
                return dict(waiting)
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} asked nothing after {answered}")

    def answer(self, job_id: str, answer: Any, **extra: Any) -> httpx.Response:
        """Answer the question the job shows now (as a UI would), unless ``question_id`` is given."""
        if "question_id" not in extra:
            waiting = self.view(job_id).get("waiting")
            if waiting:
                extra["question_id"] = waiting["question_id"]
        return self.post_feedback(job_id, {"answer": answer, **extra})

    def post_feedback(self, job_id: str, body: Any) -> httpx.Response:
        """POST exactly ``body`` as feedback (no question id added)."""
        return self.http.post(f"/api/jobs/{job_id}/feedback", json=body)

    def cancel(self, job_id: str) -> httpx.Response:
        return self.http.post(f"/api/jobs/{job_id}/cancel")
