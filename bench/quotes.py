"""Quote accuracy: the held-out questions (bench/answers.py) run as jobs on devhost with the offline model, each
job's final cost (its ledger) against the quote it got after planning (shared/jobs/quote.py).

``python -m bench quotes``, or ``python -m bench.quotes [--limit N] [--verbose]``. The offline model is priced
at gpt-4.1-mini's list prices (MODEL_PRICES), on Flex Consumption On Demand with the Azure Storage backend
(whose transactions have no price in the table: their quantity is compared with the quote's bounds instead). A
question the job asks a person expires into its default answer. Prints how many jobs' cost fell inside their
quote range, the median ratio actual/high (and actual/low), and the same for the unpriced Storage transactions;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.answers import questions
from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

ENV = {
    "COST_HOSTING": "flex_on_demand",
    "COST_DURABLE_BACKEND": "azure_storage",
    # The offline model priced as gpt-4.1-mini (USD per million tokens), so tokens weigh in the range.
    "MODEL_PRICES": json.dumps({"offline": {"input_per_million": 0.4, "output_per_million": 1.6}}),
}
TERMINAL = {"completed", "failed", "cancelled"}


def run_job(host: DevHostProcess, question: str, timeout_s: float = 180) -> dict[str, Any]:
    """Submit one question (its questions to a person expire into their defaults) and poll its view to the end."""
    http = JobClient(host).http
    body = {"question": question, "wait": {"timeout_seconds": 1, "on_expiry": "default"}}
    resp = http.post("/api/jobs", json=body)
    resp.raise_for_status()
    job_id = resp.json()["id"]
    deadline = time.monotonic() + timeout_s
    view: dict[str, Any] = {}
    while time.monotonic() < deadline:
        view = http.get(f"/api/jobs/{job_id}").json()
        if view["status"] in TERMINAL:
            return view
        time.sleep(0.1)
    raise RuntimeError(f"job {job_id} did not end in {timeout_s} s: {view.get('status')}")


def storage(view: dict[str, Any]) -> tuple[float, tuple[float, float] | None]:
    """The job's Storage transactions and the quote's bounds on them (None when the quote has none)."""
    used = sum(m["quantity"] for m in view["cost"]["by_meter"] if m["meter"] == "storage.transactions")
    bounds = [(u["low"], u["high"]) for u in view["quote"]["unknown"] if u["meter"] == "storage.transactions"]
    return used, bounds[0] if bounds else None


def main(argv: list[str]) -> int:
    """Run the questions as jobs and print how their cost compares with their quote."""
    parser = argparse.ArgumentParser(prog="python -m bench quotes")
    parser.add_argument("--limit", type=int, default=0, help="run only the first N questions")
    parser.add_argument("--verbose", action="store_true", help="print each job's quote and cost")
    args = parser.parse_args(argv)
    qs = questions()[: args.limit or None]
    rows: list[tuple[str, dict[str, Any]]] = []
    started = time.process_time()
    with tempfile.TemporaryDirectory(prefix="bench-quotes-") as tmp:
        host = DevHostProcess(REPO_ROOT, Path(tmp) / "data", env=ENV)
        host.start(timeout_s=120)
        try:
            for q in qs:
                rows.append((q.category, run_job(host, q.text)))
        finally:
            host.stop()
    quoted = [(c, v) for c, v in rows if isinstance(v.get("quote"), dict) and v["cost"].get("total") is not None]
    inside = [v for _, v in quoted if v["quote"]["low"] <= v["cost"]["total"] <= v["quote"]["high"]]
    over = [v for _, v in quoted if v["cost"]["total"] > v["quote"]["high"]]
    to_high = [v["cost"]["total"] / v["quote"]["high"] for _, v in quoted if v["quote"]["high"] > 0]
    to_low = [v["cost"]["total"] / v["quote"]["low"] for _, v in quoted if v["quote"]["low"] > 0]
    counted = [(used, b) for used, b in (storage(v) for _, v in quoted) if b is not None]
    in_storage = sum(1 for used, (lo, hi) in counted if lo <= used <= hi)
    print(f"{len(rows)} held-out questions as jobs on devhost, offline model priced as gpt-4.1-mini, Flex On Demand")
    statuses = {s: sum(1 for _, v in rows if v["status"] == s) for s in sorted({v["status"] for _, v in rows})}
    print(f"jobs: {statuses}; quoted: {len(quoted)} (the others stopped before a plan)")
    print(f"cost inside its quote range: {len(inside)}/{len(quoted)}; above the high end: {len(over)}")
    if to_high:
        print(f"actual/high: median {statistics.median(to_high):.4f} (min {min(to_high):.4f}, max {max(to_high):.4f})")
    if to_low:
        print(f"actual/low: median {statistics.median(to_low):.2f} (min {min(to_low):.2f}, max {max(to_low):.2f})")
    print(f"Storage transactions (no price) inside the quote's bounds: {in_storage}/{len(counted)}")
    # The quote's high end assumes DEFAULT_INPUT_TOKENS per model call (a step's usage sums its attempts).
    inputs = [
        int((u or {}).get("tokens_input") or 0)
        for _, v in rows
        for u in [v["usage"]["planning"], *v["usage"]["by_step"].values()]
    ]
    print(f"largest input tokens of one step (or planning): {max(inputs, default=0)} (the quote assumes 8000 a call)")
    print(f"CPU time of this process (polling, not the host): {time.process_time() - started:.2f} s")
    if args.verbose:
        for category, view in quoted:
            quote, cost = view["quote"], view["cost"]
            used, bounds = storage(view)
            print(
                f"  [{category}] {view['status']}: {cost['total']:.6f} in [{quote['low']:.6f}, {quote['high']:.6f}]"
                f"; storage {used:g} in {bounds}; {view['question'][:70]}"
            )
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
