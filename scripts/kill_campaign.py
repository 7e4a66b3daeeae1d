"""A seeded kill -9 campaign against devhost running the app: answers and jobs survive crashes exactly once.

`python scripts/kill_campaign.py --runs 6 --seed 25 --budget-s 240` (not part of `make test`). Each run
starts a fresh devhost on its own data, submits jobs that wait for an SQL approval, answers each question
as a client would (a background POST; a client that got no response posts the same answer again, or leaves
it to the job view's repair), and SIGKILLs the host at seeded moments: at random times, and right after an
answer was posted while ``ANSWER_CLAIM_PAUSE_S`` holds the claim-to-delivery window open. After its kills a
run lets every job finish, then checks:

- every job ends (completed: an approved statement ran, a rejected one was skipped);
- no lost answer: every question answered is in the view's ``answers`` with the answer given;
- no double delivery: the job took each answer once (one SQL run at most, the step state matches);
- the same answer posted again is never refused (no 409, no 5xx).

Prints one line per run and a JSON summary (runs, kills, kills with an answer in flight, violations);
exits 1 on any violation. The whole campaign stops starting runs once ``--budget-s`` is spent.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.devhost.hostproc import DevHostProcess  # noqa: E402 - the repo root is importable only now

SQL_Q = "Which region had the most returns in Q3?"
DOCS_FIRST_Q = (
    "What does the returns policy say about refunds after 30 days, and which region had the most returns in Q3?"
)
TERMINAL = {"completed", "failed", "cancelled"}


@dataclass
class Question:
    """One question a job asked and the answer the client gives to it."""

    job_id: str
    question_id: str
    answer: str
    due: float = 0.0  # when the client posts it (monotonic)
    posts: int = 0
    accepted: bool = False  # a 202 came back
    in_flight: bool = False
    statuses: list[int] = field(default_factory=list)


@dataclass
class RunResult:
    """What one run saw."""

    seed: int
    kills: int = 0
    kills_in_window: int = 0
    jobs: int = 0
    questions: int = 0
    reposts: int = 0
    repeated_202: int = 0
    duplicate_deliveries: int = 0
    violations: list[str] = field(default_factory=list)


class Campaign:
    """One run: a host, its jobs, a client answering them, and a killer."""

    def __init__(self, seed: int, root: Path, jobs: int, kills: int, finish_s: float) -> None:
        self.rng = random.Random(seed)
        self.result = RunResult(seed=seed)
        self.data = root / f"run-{seed}"
        self.jobs_wanted, self.kills_wanted, self.finish_s = jobs, kills, finish_s
        self.questions: dict[tuple[str, str], Question] = {}
        self.lock = threading.Lock()
        self.next_kill = 0.0
        env = {
            "JOB_RETRY_FIRST_INTERVAL_MS": "50",
            "PARTIAL_OUTPUT_PATH": str(self.data / "shared" / "partial_output.sqlite3"),
            "ANSWER_CLAIM_PAUSE_S": self._pause(),
        }
        self.host = DevHostProcess(REPO_ROOT, self.data / "host", env=env)

    def _pause(self) -> str:
        # Half the lives hold the claim-to-delivery window open, so that kills land in it.
        return self.rng.choice(["0", "0", "0.8", "1.5"])

    # --- the client ------------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        key = self.host.keys.function if self.host.keys else ""
        return httpx.Client(base_url=self.host.base_url, headers={"x-functions-key": key}, timeout=30)

    def view(self, job_id: str) -> dict[str, Any] | None:
        """The job view, or None while the host is down."""
        try:
            with self._http() as http:
                resp = http.get(f"/api/jobs/{job_id}")
        except httpx.HTTPError:
            return None
        return dict(resp.json()) if resp.status_code == 200 else None

    def post(self, q: Question) -> None:
        """Post the answer in the background; a lost response leaves it to be posted again (or repaired)."""
        q.posts += 1
        q.in_flight = True
        base, key = self.host.base_url, self.host.keys.function if self.host.keys else ""

        def send() -> None:
            try:
                resp = httpx.post(
                    f"{base}/api/jobs/{q.job_id}/feedback",
                    json={"answer": q.answer, "question_id": q.question_id},
                    headers={"x-functions-key": key},
                    timeout=30,
                )
            except httpx.HTTPError:
                q.in_flight = False
                return
            with self.lock:
                q.statuses.append(resp.status_code)
                q.in_flight = False
                if resp.status_code == 202:
                    q.accepted = True
                    if resp.json().get("repeated"):
                        self.result.repeated_202 += 1
                else:  # the same answer again is never refused, whatever happened to the first post
                    self.result.violations.append(
                        f"{q.job_id} {q.question_id}: the answer posted again got {resp.status_code} {resp.text[:200]}"
                    )

        threading.Thread(target=send, daemon=True).start()

    def tick(self, job_ids: list[str], ended: dict[str, dict[str, Any]]) -> None:
        """Look at every job once: answer a new question; post again an answer whose response was lost."""
        for job_id in job_ids:
            if job_id in ended:
                continue
            view = self.view(job_id)
            if view is None:
                continue
            if view["status"] in TERMINAL:
                ended[job_id] = view
                continue
            waiting = view.get("waiting")
            if not waiting:
                continue
            key = (job_id, waiting["question_id"])
            q = self.questions.get(key)
            if q is None:
                options = list(waiting.get("options") or [])
                said = self.rng.choice(["approve", "approve", "reject"]) if "approve" in options else options[0]
                # A person takes a while: the answer comes a seeded moment later, so kills land before it too.
                q = Question(job_id, waiting["question_id"], said, due=time.monotonic() + self.rng.uniform(0, 2.0))
                self.questions[key] = q
            if q.posts == 0 and time.monotonic() >= q.due:
                self.post(q)
                if self.rng.random() < 0.5 and self.result.kills < self.kills_wanted:
                    self.next_kill = time.monotonic() + self.rng.uniform(0.0, 0.6)  # aim at the claim window
            elif q.posts and not q.accepted and not q.in_flight and q.posts < 6 and self.rng.random() < 0.5:
                self.result.reposts += 1
                self.post(q)

    # --- the run ---------------------------------------------------------------------------------

    def kill_and_restart(self) -> None:
        """SIGKILL the host and start it again on the same data (its next life may hold the window open)."""
        self.result.kills += 1
        if any(q.in_flight for q in self.questions.values()):
            self.result.kills_in_window += 1
        self.host.kill()
        self.host.extra_env["ANSWER_CLAIM_PAUSE_S"] = self._pause()
        self.host.start(timeout_s=120)

    def run(self) -> RunResult:
        """Submit the jobs, answer and kill until every job ends (or the run's time is up), then check."""
        self.host.start(timeout_s=120)
        try:
            with self._http() as http:
                job_ids = []
                for _ in range(self.jobs_wanted):
                    question = self.rng.choice([SQL_Q, DOCS_FIRST_Q])
                    resp = http.post("/api/jobs", json={"question": question, "approval": {"sql": "always"}})
                    job_ids.append(str(resp.json()["id"]))
            self.result.jobs = len(job_ids)
            ended: dict[str, dict[str, Any]] = {}
            self.next_kill = time.monotonic() + self.rng.uniform(0.2, 1.5)
            deadline = time.monotonic() + self.finish_s
            while len(ended) < len(job_ids) and time.monotonic() < deadline:
                if self.result.kills < self.kills_wanted and time.monotonic() >= self.next_kill:
                    self.kill_and_restart()
                    self.next_kill = time.monotonic() + self.rng.uniform(0.3, 2.0)
                    deadline = max(deadline, time.monotonic() + 60)
                self.tick(job_ids, ended)
                time.sleep(0.05)
            self.check(job_ids, ended)
        finally:
            self.host.stop()
        return self.result

    def check(self, job_ids: list[str], ended: dict[str, dict[str, Any]]) -> None:
        """The invariants: every job ends, no answer lost, none taken twice, the one taken is the one given."""
        r = self.result
        r.questions = len(self.questions)
        for job_id in job_ids:
            view = ended.get(job_id)
            if view is None:
                last = self.view(job_id) or {}
                r.violations.append(f"{job_id}: did not end (last status {last.get('status')}: {last.get('waiting')})")
                continue
            if view["status"] != "completed":
                r.violations.append(f"{job_id}: ended {view['status']}: {view.get('error')}")
            taken = {a["question_id"]: a for a in view.get("answers") or []}
            r.duplicate_deliveries += sum(a["deliveries"] - 1 for a in taken.values())
            mine = [q for q in self.questions.values() if q.job_id == job_id]
            for q in mine:
                got = taken.get(q.question_id)
                if got is None:
                    r.violations.append(f"{job_id} {q.question_id}: answer {q.answer!r} lost")
                elif got["answer"] != q.answer:
                    took = f"took {got['answer']!r}, the client said {q.answer!r}"
                    r.violations.append(f"{job_id} {q.question_id}: {took}")
            runs = sum(
                1 for e in view["log"]["entries"] if "execute_azure_sql" in e["message"] and "rows" in e["message"]
            )
            sql = next((s for s in view["steps"] if s["kind"] == "execute_azure_sql"), None)
            answer = mine[0].answer if mine else None
            if runs > 1:
                r.violations.append(f"{job_id}: the approved statement ran {runs} times")
            if sql is not None and answer is not None:
                wanted = "succeeded" if answer == "approve" else "skipped"
                if sql["state"] != wanted:
                    r.violations.append(f"{job_id}: SQL step {sql['state']} after {answer!r}")


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; exit 1 on any violation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--jobs", type=int, default=3, help="jobs per run")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per run")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no run after this many seconds")
    parser.add_argument("--finish-s", type=float, default=90.0, help="how long a run's jobs may take to end")
    parser.add_argument("--keep", action="store_true", help="keep the runs' data directories")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="kill-campaign-"))
    started = time.monotonic()
    results: list[RunResult] = []
    cpu = time.process_time()
    try:
        for i in range(args.runs):
            if time.monotonic() - started > args.budget_s:
                print(f"budget of {args.budget_s:g} s spent: {i} of {args.runs} runs", flush=True)
                break
            result = Campaign(args.seed * 1000 + i, root, args.jobs, args.kills, args.finish_s).run()
            results.append(result)
            print(
                f"run {i} seed {result.seed}: {result.jobs} jobs, {result.questions} questions, {result.kills} kills"
                f" ({result.kills_in_window} with an answer in flight), {result.reposts} re-posts,"
                f" {result.repeated_202} repeated 202, {result.duplicate_deliveries} duplicate deliveries ignored,"
                f" {len(result.violations)} violations",
                flush=True,
            )
            for violation in result.violations:
                print(f"  VIOLATION {violation}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    summary = {
        "seed": args.seed,
        "runs": len(results),
        "jobs": sum(r.jobs for r in results),
        "questions": sum(r.questions for r in results),
        "kills": sum(r.kills for r in results),
        "kills_with_answer_in_flight": sum(r.kills_in_window for r in results),
        "reposts": sum(r.reposts for r in results),
        "repeated_202": sum(r.repeated_202 for r in results),
        "duplicate_deliveries_ignored": sum(r.duplicate_deliveries for r in results),
        "violations": sum(len(r.violations) for r in results),
        "wall_s": round(time.monotonic() - started, 1),
        "driver_cpu_s": round(time.process_time() - cpu, 1),
    }
    print(json.dumps(summary))
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
