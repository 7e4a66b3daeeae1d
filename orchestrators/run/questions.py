"""Waits for a person: a question races a durable timer, an answer is checked, a part's question reaches its root.

Answers are untrusted data: one that is not among the options is ignored (the same question is asked again),
and an edit is merged only when ``apply_edits`` accepts it, the same check as the HTTP edge. An expired wait
takes the default only where the policy allows it (``ExpiredAnswer``: never an approval of a sensitive read).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from orchestrators.outcomes import ExpiredAnswer, JobStop, event_data
from orchestrators.run.record import Gen, RunRecord, clear_retry
from shared.executors import PLAN, StepInputError, apply_edits
from shared.jobs.contracts import ExecutorError
from shared.jobs.models import PartNews, StepState, StepStateName, UserAnswer, Waiting
from shared.jobs.runs import REPORT_PART


class Questions:
    """The run's questions to people: asking, waiting, and telling the root run of a part's question."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record

    def ask(
        self,
        step: StepState | None,
        kind: str,
        question: str,
        options: list[str],
        *,
        default: str | None,
        details: dict[str, Any] | None = None,
        free_text: bool = False,
        timeout_seconds: int | None = None,
        expiry_falls_back: bool | None = None,
        expiry_message: str | None = None,
        edit_of: tuple[str, dict[str, Any]] | None = None,
    ) -> Gen:
        """Wait for the user's answer to one question, racing a durable timer.

        With ``edit_of`` (step kind, current input) an ``edit`` answer must pass ``apply_edits``: an edit
        that sets a field the kind does not allow is never merged, and the question is asked again.
        """
        if not self.can_ask:
            raise JobStop("NO_ONE_TO_ASK", f"a part of a run cannot wait for a person: {question[:300]}", _id(step))
        wait = self.record.job.request.wait
        seconds = timeout_seconds or wait.timeout_seconds or self.record.job.policy.user_wait_seconds
        falls_back = expiry_falls_back if expiry_falls_back is not None else wait.on_expiry == "default"
        fallback = default if falls_back else None
        while True:
            question_id = self._next_question_id(step)
            now = self.record.ctx.current_utc_datetime
            expires = now + timedelta(seconds=seconds)
            waiting = Waiting(
                question_id=question_id,
                step_id=step.id if step else None,
                kind=kind,  # type: ignore[arg-type]
                question=question[:1000],
                options=options,
                free_text=free_text,
                details=details or {},
                asked_at=now.isoformat(),
                expires_at=expires.isoformat(),
                expiry_default=fallback,
                step_kind=step.kind if step else None,
            )
            resume_state = self._start_waiting(step, waiting)
            yield from self.report_question(waiting, step)
            event = self.record.ctx.wait_for_external_event(f"answer:{question_id}")
            timer = self.record.ctx.create_timer(expires)
            winner = yield self.record.ctx.task_any([event, timer])
            self._stop_waiting(step, resume_state)
            yield from self.report_question(waiting, step, "answered" if winner is event else "expired")
            if winner is not event:
                break
            if not timer.is_completed:
                timer.cancel()
            reply, refused = self._check_answer(question_id, event.result, options, free_text, edit_of)
            if reply is not None:
                self.record.publish()
                return reply
            if refused is not None:
                details = {**(details or {}), "refused_edit": refused[:300]}
            # An invalid or refused answer: the same question is asked again.
        if fallback is not None:
            self.record.log("question %s expired; proceeding with %s", question_id, fallback)
            self.record.publish()
            return ExpiredAnswer(answer=fallback)
        message = expiry_message or f"no answer to '{question[:200]}' within {seconds} s"
        raise JobStop("WAIT_EXPIRED", message, step.id if step else None)

    @property
    def approval_seconds(self) -> int:
        """How long an approval waits: the request's approval.timeout_seconds, else the app's wait setting."""
        return self.record.job.request.approval.timeout_seconds or self.record.job.policy.user_wait_seconds

    @property
    def can_ask(self) -> bool:
        """Whether a person can answer here: the job itself, or a part that reports to its root run."""
        return not self.record.part_of_run or (
            self.record.job.run is not None and self.record.job.run.report_to is not None
        )

    def report_question(
        self, waiting: Waiting, step: StepState | None, ended: Literal["answered", "expired"] | None = None
    ) -> Gen:
        """A part tells its root run of its question (asked, or answered / expired): the root's view shows it."""
        report = self.record.job.run.report_to if self.record.part_of_run and self.record.job.run else None
        if report is None:
            return
        news = PartNews(
            instance=self.record.job.job_id,
            question_id=waiting.question_id,
            asked=None if ended else waiting.model_copy(update={"instance": self.record.job.job_id}),
            ended=ended,
            step=step.model_dump(mode="json") if step else None,
            anchor=report.anchor,
        )
        body = {"to": report.model_dump(mode="json"), "news": news.model_dump(mode="json")}
        try:
            yield self.record.ctx.call_activity(REPORT_PART, body)
        except Exception as exc:  # the question still waits (and expires); only the root's view misses it
            self.record.log("could not report question %s to %s: %s", waiting.question_id, report.instance, exc)

    def _next_question_id(self, step: StepState | None) -> str:
        """Count one more question and name it after its step (or the job); a part's also after the part.

        A part's instance id is ``<root id>:<path>``: its question ids stay unique across the whole run,
        which is what the root's job API claims answers by.
        """
        self.record.state.questions_asked += 1
        base = f"{step.id if step else 'job'}-q{self.record.state.questions_asked}"
        if self.record.part_of_run and ":" in self.record.job.job_id:
            return f"{base}@{self.record.job.job_id.split(':', 1)[1]}"
        return base

    def _start_waiting(self, step: StepState | None, waiting: Waiting) -> StepStateName:
        """Publish the job as waiting on ``waiting``; returns the state the step resumes in once answered."""
        self.record.state.waiting = waiting
        self.record.state.status = "waiting_for_user"
        resume_state: StepStateName = "running"
        if step is not None:
            # A step that already ended (a Supervisor question after it) keeps its state once answered.
            ended = step.state in ("succeeded", "skipped", "failed")
            resume_state = step.state if ended else "running"
            step.state = "waiting"
            # Only a wait inside the step's run is taken out of its duration.
            step.waiting_since = None if ended else waiting.asked_at
            clear_retry(step)
        self.record.publish()
        self.record.log("waiting for the user (%s): %s", waiting.question_id, waiting.question[:80])
        return resume_state

    def _stop_waiting(self, step: StepState | None, resume_state: StepStateName) -> None:
        """The wait is over (answered or expired): the job runs again and the step resumes."""
        self.record.state.waiting = None
        self.record.state.status = "running"
        if step is not None:
            self.record.end_wait(step)
            step.state = resume_state

    def _check_answer(
        self,
        question_id: str,
        raw: Any,
        options: list[str],
        free_text: bool,
        edit_of: tuple[str, dict[str, Any]] | None,
    ) -> tuple[UserAnswer | None, str | None]:
        """The accepted answer, or None with why an edit was refused (None too when the answer was invalid)."""
        reply = _parse_answer(raw)
        if reply is None or not (free_text or reply.action() in options):
            self.record.log("ignoring an invalid answer to %s", question_id)
            return None, None
        refused = _refused_edit(reply, edit_of)
        if refused is None:
            return reply, None
        self.record.log("refused the edit answering %s: %s", question_id, refused)
        return None, refused

    def ask_to_retry(self, executor_type: str, error: ExecutorError) -> Gen:
        """A call that is no step (planning) failed for now: wait for a person to retry it, or stop the job."""
        what = "planning" if executor_type == PLAN else executor_type
        failed = f"{what} failed ({error.code}): {error.message}"
        if not self.can_ask:
            raise JobStop(error.code, failed[:2000])
        reply = yield from self.ask(
            None,
            "error",
            f"{failed[:900]}. Try again, or abort the job?",
            ["retry", "abort"],
            default=None,
            details={"error": {"code": error.code, "message": error.message}},
        )
        if reply.action() != "retry":
            raise JobStop(error.code, f"{failed} (aborted by the user)"[:2000])


def _id(step: StepState | None) -> str | None:
    return step.id if step else None


def _refused_edit(reply: UserAnswer, edit_of: tuple[str, dict[str, Any]] | None) -> str | None:
    """Why an edit answer may not be merged into the step input, or None when it may (or is no edit)."""
    if edit_of is None or reply.action() != "edit":
        return None
    try:
        apply_edits(edit_of[0], edit_of[1], reply.edits())
    except StepInputError as exc:
        return exc.message
    return None


def _parse_answer(raw: Any) -> UserAnswer | None:
    # Raw posts to the Durable API arrive as values, answers raised through the SDK client as JSON text.
    raw = event_data(raw)
    try:
        if isinstance(raw, dict) and "answer" in raw:
            return UserAnswer.model_validate(raw)
        return UserAnswer(answer=raw)
    except ValueError:
        return None
