"""Hostile SQL: peak memory and wall time per statement through the guard and the real SQLite provider.

``python -m bench sql_hostile`` (options: ``python -m bench.sql_hostile [--timeout 3] [--only ID ...]``)

Method: every SQLite statement of ``tests/providers/sql/hostile_corpus.json`` (the ones the guard rejects and
the ones it accepts, including heavy ones: cross joins, ``group_concat`` over a cross join, an
endless recursive counter) runs in its own forked child process: the guard (catalog allow-list,
``SQL_MAX_ROWS``), then, when accepted, ``shared.providers.sql.sqlite.open_sample_database(get_settings())``'s
``execute`` with the bench's timeout. The parent warms the ODBC driver once before forking, so a
child measures the statement, not the driver's first load. The child resets its peak RSS
(``/proc/self/clear_refs``), and reports ``VmHWM - VmRSS`` at the start (peak growth) and the wall
time of guard + query. A child still running at timeout + 10 s is killed and counted as a failure.

Targets (issue 8 §2): at most 64 MB extra and at most the timeout per statement. The bench uses a 3 s
timeout instead of the configured ``SQL_TIMEOUT_SECONDS`` (15 s by default) to stay short; time
targets allow 0.5 s over the limit for connecting and cancelling. Prints a table and a PASS/FAIL line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from shared.jobs.contracts import ProviderError
from shared.providers.sql.catalog import load_catalog
from shared.providers.sql.sqlite import SqliteOdbcDatabase, open_sample_database
from shared.runtime.settings import get_settings
from shared.runtime.sqlguard.guard import guard_sql

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "sql" / "hostile_corpus.json"
LIMIT_MB = 64.0
TIME_GRACE_S = 0.5


def _sql(entry: dict[str, Any]) -> str:
    if "sql" in entry:
        return str(entry["sql"])
    return "".join(p if isinstance(p, str) else p[0] * p[1] for p in entry["sql_parts"])


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _child(
    sql: str, timeout_s: int, db: SqliteOdbcDatabase, allowed: frozenset[str], raw: bool, out: Connection
) -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    except OSError:
        pass
    start_kb = _status_kb("VmRSS")
    started = time.perf_counter()
    max_rows = get_settings().sql_max_rows
    verdict = guard_sql(sql, dialect="sqlite", allowed_tables=allowed, max_rows=max_rows)
    if raw:  # --raw: what the provider alone does with the statement (no guard)
        verdict = verdict.model_copy(update={"accepted": True, "sql": sql})
    if not verdict.accepted or verdict.sql is None:
        outcome = f"rejected {verdict.reason_code}"
    else:
        try:
            rows = db.execute(verdict.sql, max_rows=max_rows, timeout_s=timeout_s)
            outcome = f"ran: {len(rows.rows)} rows" + (" (truncated)" if rows.truncated else "")
        except ProviderError as exc:
            outcome = f"provider {exc.code}: {str(exc)[:60]}"
    wall = time.perf_counter() - started
    grown_mb = max(0, _status_kb("VmHWM") - start_kb) / 1024
    out.send((outcome, wall, grown_mb))
    out.close()


def _measure(
    ctx: Any, sql: str, timeout_s: int, db: SqliteOdbcDatabase, allowed: frozenset[str], raw: bool = False
) -> tuple[str, float, float]:
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sql, timeout_s, db, allowed, raw, writer))
    started = time.perf_counter()
    proc.start()
    writer.close()
    result: tuple[str, float, float] | None = None
    if reader.poll(timeout_s + 10):
        try:
            result = reader.recv()
        except EOFError:
            result = None
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if result is None:
        return f"KILLED or crashed (exit {proc.exitcode})", time.perf_counter() - started, float("nan")
    return result


def _raw_section(
    ctx: Any, entries: list[dict[str, Any]], timeout_s: int, db: SqliteOdbcDatabase, allowed: frozenset[str]
) -> None:
    """The guard's rejections run straight on the provider: the second barrier alone (not judged)."""
    print("\nwithout the guard (rejected statements run as written; information only):")
    for entry in entries:
        if entry["expect"] != "reject" or entry.get("reason") in {"TOO_DEEP"}:
            continue
        outcome, wall, grown = _measure(ctx, _sql(entry), timeout_s, db, allowed, raw=True)
        print(f"{entry['id']:<14} {'':<5} {wall:7.2f} {grown:7.1f}  {'':<4} {outcome}")


def main(argv: list[str]) -> int:
    """Run the hostile statements and print the table and PASS/FAIL."""
    parser = argparse.ArgumentParser(prog="python -m bench sql_hostile")
    parser.add_argument("--timeout", type=int, default=3, help="query timeout in seconds (default 3)")
    parser.add_argument("--only", nargs="*", default=[], help="corpus ids to run")
    parser.add_argument(
        "--raw", action="store_true", help="also run the statements the guard rejects without the guard (info only)"
    )
    args = parser.parse_args(argv)
    entries = [e for e in json.loads(CORPUS.read_text(encoding="utf-8")) if e["dialect"] == "sqlite"]
    if args.only:
        entries = [e for e in entries if e["id"] in set(args.only)]
    settings = get_settings()
    db = open_sample_database(settings)
    allowed = frozenset(load_catalog().allowed_tables())
    db.execute("SELECT 1 AS warm", max_rows=1, timeout_s=5)  # load the driver before forking
    ctx = mp.get_context("fork")
    control = _measure(ctx, "SELECT 1 AS control", args.timeout, db, allowed)
    print(
        f"{len(entries)} SQLite statements from {CORPUS.name}; timeout {args.timeout} s (configured "
        f"SQL_TIMEOUT_SECONDS={settings.sql_timeout_seconds}); control SELECT 1: {control[1] * 1000:.0f} ms, "
        f"+{control[2]:.1f} MB"
    )
    print(f"{'id':<14} {'heavy':<5} {'wall s':>7} {'+MB':>7}  {'ok':<4} outcome")
    failures: list[str] = []
    worst_mb = worst_s = 0.0
    bench_started = time.perf_counter()
    for entry in entries:
        outcome, wall, grown = _measure(ctx, _sql(entry), args.timeout, db, allowed)
        ok = wall <= args.timeout + TIME_GRACE_S and grown <= LIMIT_MB  # NaN (killed) compares False
        worst_mb, worst_s = max(worst_mb, grown if grown == grown else 0.0), max(worst_s, wall)
        if not ok:
            failures.append(entry["id"])
        heavy = "yes" if entry.get("heavy") else ""
        print(f"{entry['id']:<14} {heavy:<5} {wall:7.2f} {grown:7.1f}  {'ok' if ok else 'FAIL':<4} {outcome}")
    print(
        f"worst: {worst_s:.2f} s, +{worst_mb:.1f} MB over {len(entries)} statements "
        f"(targets: <= {args.timeout} s + {TIME_GRACE_S} s, <= {LIMIT_MB:.0f} MB); bench took "
        f"{time.perf_counter() - bench_started:.0f} s"
    )
    if args.raw:
        _raw_section(ctx, entries, args.timeout, db, allowed)
    print("PASS" if not failures else f"FAIL: {', '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
