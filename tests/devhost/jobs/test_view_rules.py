"""The CLI takes what a step's state means from the host: the view's step states (GET /api/catalog), not a copy.

A step event whose state is one of the view's is applied to the view as it is; any other (the stream's "started",
or a state the host added) sends the CLI back to the view, which says what it is. A state with no colour of its
own is drawn plainly.
"""

from __future__ import annotations

import httpx
from rich.console import Console

from devhost.jobs.render import render_progress
from devhost.jobs.stream import JobEvent, apply_to_view, step_states


def view() -> dict[str, object]:
    return {"id": "j" * 32, "status": "running", "steps": [{"id": "s1", "kind": "consult_rag", "state": "pending"}]}


def step_event(state: str, step_id: str = "s1") -> JobEvent:
    return JobEvent(id="1", type="step", data={"step_id": step_id, "state": state, "attempt": 1})


def test_a_view_state_is_applied_and_any_other_sends_the_cli_back_to_the_view() -> None:
    states = frozenset({"pending", "running", "succeeded"})
    v = view()
    assert apply_to_view(v, step_event("succeeded"), states)
    assert v["steps"][0]["state"] == "succeeded"  # type: ignore[index]
    # "started" is the stream's word: the CLI does not decide it means "running", the view does.
    assert not apply_to_view(v, step_event("started"), states)
    assert v["steps"][0]["state"] == "succeeded"  # type: ignore[index]
    assert not apply_to_view(v, step_event("succeeded", "s9"), states)
    # With no catalog every step event is read back from the view.
    assert not apply_to_view(view(), step_event("succeeded"), frozenset())


def test_the_step_states_are_the_hosts_catalogs() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/catalog":
            return httpx.Response(200, json={"step_states": ["pending", "paused"]})
        return httpx.Response(404)

    with httpx.Client(base_url="http://host", transport=httpx.MockTransport(answer)) as client:
        assert step_states(client) == frozenset({"pending", "paused"})
    with httpx.Client(base_url="http://host", transport=httpx.MockTransport(lambda r: httpx.Response(404))) as client:
        assert step_states(client) == frozenset()


def test_a_state_with_no_colour_is_drawn_plainly() -> None:
    v = view()
    v["steps"] = [{"id": "s1", "kind": "consult_rag", "state": "[bold]paused"}]
    console = Console(record=True, width=120, color_system=None)
    console.print(render_progress(v))
    assert "[bold]paused" in console.export_text()
