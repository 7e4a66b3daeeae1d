"""Questions asked inside the parts of a run, shown and answered at its root.

A parallel branch or a sub-workflow runs as its own orchestration (``workflow_part``), but people follow and
answer one job: the root run. A part that asks calls the ``report_part`` activity, which raises
``part-news:<n>`` on the root; the root, waiting on its parts here, shows the question as its own
``waiting`` (naming the part's instance, where the job API raises the answer) and clears it when the part
reports the question answered or expired. One event name per wait, so a late report never reaches a later
wait. The news comes from the parts' orchestrator code, never from a model, and the root takes only news
of its own parts (instance ids under its own).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from orchestrators.outcomes import event_data
from orchestrators.run.core import RunCore
from orchestrators.run.record import Gen
from shared.jobs.models import PartNews, StepState, StepStateName, Waiting
from shared.jobs.runs import PART_NEWS_EVENT, RunReport


class PartQuestions:
    """The root run's view of its parts' questions while it waits on them."""

    def __init__(self, run: RunCore) -> None:
        self.run = run
        self.waits = 0
        # Part instance → (the question it waits on, the root step it belongs to), in the order asked.
        self.asking: dict[str, tuple[Waiting, str | None]] = {}
        self.marked: dict[str, StepStateName] = {}  # root step shown waiting → the state it had before

    def report_to(self, anchor: str | None) -> RunReport:
        """Where the parts of the next wait report: this run, under a fresh event name."""
        self.waits += 1
        return RunReport(instance=self.run.job.job_id, event=f"{PART_NEWS_EVENT}:{self.waits}", anchor=anchor)

    def wait(self, parts: list[tuple[str, Any]], report: RunReport) -> Gen:
        """The parts' results in order, as ``task_all`` gives them, showing their questions meanwhile."""
        ctx = self.run.ctx
        running = dict(parts)  # instance → its task, until it ends
        news: Any = None
        try:
            while running:
                if news is None:  # one waiter at a time: a second one would take the next report from the first
                    news = ctx.wait_for_external_event(report.event)
                winner = yield ctx.task_any([*running.values(), news])
                if winner is news:
                    self.take(news.result)
                    news = None
                    continue
                instance = next(i for i, task in running.items() if task is winner)
                del running[instance]
                if isinstance(winner.result, BaseException):
                    raise winner.result  # a part crashed: as with task_all, the first failure ends the wait
                self.forget(instance)
        except Exception:
            self.forget("")
            raise
        self.forget("")
        return [task.result for _, task in parts]

    def take(self, raw: Any) -> None:
        """One part's news: show its question, or take it away once answered or expired."""
        try:
            news = PartNews.model_validate(event_data(raw))
        except ValidationError:
            self.run.log("ignoring news of a part that is not valid")
            return
        if not news.instance.startswith(f"{self.run.job.job_id}:"):
            self.run.log("ignoring news of %s, not a part of this run", news.instance[:80])
            return
        step = _step_state(news.step)
        if news.anchor is None and step is not None:
            self._show_branch_step(step)
        current = self.asking.get(news.instance)
        if news.asked is not None:
            asked = news.asked.model_copy(update={"instance": news.instance})
            self.asking[news.instance] = (asked, news.anchor or (step.id if step else asked.step_id))
        elif current is not None and current[0].question_id == news.question_id:
            del self.asking[news.instance]
        self.show()

    def forget(self, instance: str) -> None:
        """A part ended (``""``: the whole wait did): questions of it and of its own parts are over."""
        gone = [i for i in self.asking if not instance or i == instance or i.startswith(f"{instance}:")]
        for key in gone:
            del self.asking[key]
        if gone or (not instance and self.marked):
            self.show()

    def show(self) -> None:
        """The first question still open is the job's; the root steps they belong to show waiting."""
        self._unmark()
        shown: list[Waiting] = []
        for waiting, root_step_id in self.asking.values():
            root_step = self._step(root_step_id) if root_step_id else None
            shown.append(waiting.model_copy(update={"step_id": root_step.id if root_step else None}))
            if root_step is not None and root_step.state != "waiting":
                self.marked[root_step.id] = root_step.state
                root_step.state = "waiting"
        self.run.record.show_waiting(shown[0] if shown else None)
        self.run.publish()

    def _unmark(self) -> None:
        """The root steps shown waiting for a part's question go back to what they showed before."""
        for step_id, before in self.marked.items():
            marked = self._step(step_id)
            if marked is not None and marked.state == "waiting":
                marked.state = before
        self.marked = {}

    def _show_branch_step(self, step: StepState) -> None:
        """A node of the root's own branch: its step shows as the branch does, until the branch's result."""
        for mine in list(self.run.state.steps):
            if mine.id == step.id and mine.state in ("pending", "running", "waiting"):
                self.marked.pop(step.id, None)
                self.run.record.put_step(step)

    def _step(self, step_id: str) -> StepState | None:
        return next((s for s in self.run.state.steps if s.id == step_id), None)


def _step_state(raw: dict[str, Any] | None) -> StepState | None:
    """The part's step, when it is one."""
    try:
        return StepState.model_validate(raw) if raw is not None else None
    except ValidationError:
        return None
