"""The root run's view of its parts' questions (orchestrators/part_questions.py), driven step by step.

Each barrier on its own: news of an instance outside the run, news that is not valid, and an "ended" for
another question change nothing; the instance the API answers is the one the news came from; a part
started before parts could report still fails at a question instead of waiting unseen.
"""

from __future__ import annotations

from typing import Any

import pytest

from api.errors import ApiError
from api.jobs import _waiting_instance
from devhost.durable.inline import InlineContext, InlineTask, run_inline
from orchestrators.agent import agent_step
from orchestrators.part_questions import PartQuestions
from orchestrators.run.core import RunCore
from orchestrators.workflow import workflow_part_body
from shared.jobs.models import StepState
from tests.runs.runkit import Activities, defs

ROOT = "r1"


def root_run(context: type[InlineContext] = InlineContext) -> RunCore:
    payload = {
        "job_id": ROOT,
        "request": {"question": "workflow w"},
        "run": {"kind": "workflow", "id": "w", "version": 1},
    }
    run = RunCore(context(payload, lambda name, body: None, instance_id=ROOT), agent_step=agent_step)
    run.state.status = "running"
    run.state.steps = [StepState(id="split", kind="parallel", state="running"), StepState(id="ask", kind="human")]
    return run


def news(instance: str = f"{ROOT}:ask", question_id: str = "ask-q1@ask", **extra: Any) -> dict[str, Any]:
    asked = {
        "question_id": question_id,
        "step_id": "ask",
        "kind": "clarify",
        "question": "Go on?",
        "options": ["yes", "no"],
        "asked_at": "2026-11-26T00:00:00+00:00",
        "expires_at": "2026-11-26T01:00:00+00:00",
    }
    step = {"id": "ask", "kind": "human", "state": "waiting"}
    return {"instance": instance, "question_id": question_id, "asked": asked, "step": step, **extra}


def test_a_parts_question_becomes_the_jobs_and_goes_once_it_is_answered() -> None:
    run = root_run()
    questions = PartQuestions(run)
    questions.take(news())
    assert run.state.status == "waiting_for_user"
    assert run.state.waiting is not None and run.state.waiting.instance == f"{ROOT}:ask"
    assert [s.state for s in run.state.steps] == ["running", "waiting"]
    assert run.ctx.custom_status["waiting"]["question_id"] == "ask-q1@ask"
    questions.take(news(asked=None, ended="answered", step={"id": "ask", "kind": "human", "state": "running"}))
    assert run.state.status == "running" and run.state.waiting is None
    assert [s.state for s in run.state.steps] == ["running", "running"]


def test_news_of_an_instance_outside_the_run_is_ignored() -> None:
    run = root_run()
    for outsider in ("other:ask", "r10:ask", ROOT):
        PartQuestions(run).take(news(instance=outsider))
    assert run.state.waiting is None and run.state.status == "running"


@pytest.mark.parametrize("raw", ["not json", "[]", '{"instance": "r1:ask"}', {"instance": "r1:ask", "question_id": ""}])
def test_news_that_is_not_valid_is_ignored(raw: Any) -> None:
    run = root_run()
    PartQuestions(run).take(raw)
    assert run.state.waiting is None and run.state.status == "running"


def test_an_end_of_another_question_leaves_the_shown_one() -> None:
    run = root_run()
    questions = PartQuestions(run)
    questions.take(news())
    questions.take(news(question_id="ask-q9@ask", asked=None, ended="answered"))
    assert run.state.waiting is not None and run.state.waiting.question_id == "ask-q1@ask"


def test_the_instance_answered_is_the_one_that_reported_not_what_the_question_says() -> None:
    run = root_run()
    forged = news()
    forged["asked"]["instance"] = "elsewhere"
    PartQuestions(run).take(forged)
    assert run.state.waiting is not None and run.state.waiting.instance == f"{ROOT}:ask"


def test_a_question_inside_a_sub_workflow_shows_at_the_roots_node_that_runs_it() -> None:
    run = root_run()
    run.state.steps = [StepState(id="sub", kind="workflow", state="running")]
    PartQuestions(run).take(news(instance=f"{ROOT}:sub:1", question_id="ask-q1@sub:1", anchor="sub"))
    assert run.state.waiting is not None and run.state.waiting.step_id == "sub"
    assert run.state.steps[0].state == "waiting"  # the sub-workflow's own step "ask" is not the root's


class Pending(InlineTask):
    """A sub-orchestration that has not ended yet."""


class Scripted(InlineContext):
    """A context whose races the test decides: each ``task_any`` yields to the test, which names the winner."""

    def wait_for_external_event(self, name: str) -> InlineTask:
        return InlineTask("event", name=name)


def test_the_wait_on_parts_shows_news_and_returns_the_results_in_order() -> None:
    run = root_run(Scripted)
    questions = PartQuestions(run)
    report = questions.report_to(None)
    assert report.event == "part-news:1" and report.instance == ROOT
    first, second = Pending("activity"), Pending("activity")
    gen = questions.wait([(f"{ROOT}:ask", first), (f"{ROOT}:calc", second)], report)
    race = gen.send(None)
    event = next(t for t in race.children if t.kind == "event")
    assert event.name == "part-news:1"
    event.result, event.done = news(), True
    race = gen.send(event)
    assert run.state.status == "waiting_for_user"
    assert next(t for t in race.children if t.kind == "event") is not event  # a fresh waiter for the next news
    second.result, second.done = {"status": "completed"}, True
    race = gen.send(second)
    assert run.state.status == "waiting_for_user"  # the other branch still waits
    assert second not in race.children
    first.result, first.done = {"status": "completed", "outputs": {"ask": {"answer": "yes"}}}, True
    with pytest.raises(StopIteration) as ended:
        gen.send(first)
    assert ended.value.value == [first.result, second.result]
    assert run.state.status == "running" and run.state.waiting is None  # a part that ended asks no more


def test_a_part_without_a_report_target_fails_at_a_question_instead_of_waiting_unseen() -> None:
    wf = {
        "id": "w",
        "name": "W",
        "nodes": [{"id": "ask", "kind": "human", "question": {"value": "Go?"}, "options": ["yes"]}],
    }
    payload = {
        "job_id": f"{ROOT}:sub:1",
        "request": {"question": "workflow w"},
        "run": {"kind": "workflow", "id": "w", "version": 1},
    }
    acts = Activities(defs(wf))
    ctx = InlineContext(payload, acts, answer=lambda e: pytest.fail(f"asked {e}"), instance_id=f"{ROOT}:sub:1")
    result = run_inline(workflow_part_body, ctx)
    assert result["status"] == "failed" and result["error"]["code"] == "NO_ONE_TO_ASK"
    assert acts.named("report_part") == []


def test_the_api_answers_only_the_job_or_a_part_of_it() -> None:
    assert _waiting_instance("r1", None) == "r1"
    assert _waiting_instance("r1", "r1:ask") == "r1:ask"
    for elsewhere in ("r2:ask", "r10:ask", "r1", "x"):
        with pytest.raises(ApiError) as refused:
            _waiting_instance("r1", elsewhere)
        assert refused.value.status == 409


def walk_of(job_id: str, report_to: dict[str, Any] | None) -> Any:
    from orchestrators.workflow import WorkflowWalk

    payload = {
        "job_id": job_id,
        "request": {"question": "workflow w"},
        "run": {"kind": "workflow", "id": "w", "version": 1, "report_to": report_to},
    }
    context = InlineContext(payload, lambda name, body: None, instance_id=job_id)
    run = RunCore(context, agent_step=agent_step, part_of_run=":" in job_id)
    return WorkflowWalk(run)


def test_parts_report_to_the_root_and_name_the_roots_node_once_outside_its_own_graph() -> None:
    root = walk_of(ROOT, None)
    # The root's branches run its own nodes (no anchor); a sub-workflow runs another graph (its node anchors).
    assert root.report_for(None).model_dump() == {"instance": ROOT, "event": "part-news:1", "anchor": None}
    assert root.report_for("sub").model_dump() == {"instance": ROOT, "event": "part-news:2", "anchor": "sub"}
    branch = walk_of(f"{ROOT}:b", {"instance": ROOT, "event": "part-news:1", "anchor": None})
    assert branch.report_for("inner").model_dump() == {"instance": ROOT, "event": "part-news:1", "anchor": "inner"}
    assert branch.report_for(None).anchor is None
    sub = walk_of(f"{ROOT}:sub:1", {"instance": ROOT, "event": "part-news:2", "anchor": "sub"})
    assert sub.report_for("deeper").anchor == "sub" and sub.report_for(None).anchor == "sub"
    # A part started before parts could report starts parts that cannot either.
    assert walk_of(f"{ROOT}:old", None).report_for("x") is None
