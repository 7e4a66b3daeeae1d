"""The structured difference of two job views (``GET /api/jobs/{id}/compare/{other}``): a pure function.

Compared: the answer (its text and its claims, one per sentence), the citations added or dropped, each SQL
statement by step with a summary of how its rows changed, each step's state and whether it was carried over,
usage and cost (each job's own, and what it carried over), and duration.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from typing import Any

# How many added or removed rows the summary shows of each statement.
MAX_ROWS_SHOWN = 10
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def _claims(text: str | None) -> list[str]:
    """The answer's claims: its sentences and lines, stripped (tables and citations kept as written)."""
    return [part.strip() for part in _SENTENCE.split(text or "") if part.strip()]


def _citations(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    answer = view.get("answer") or {}
    return {str(c.get("source_id")): c for c in answer.get("citations") or [] if isinstance(c, dict)}


def _sql_steps(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The SQL steps' outputs by step id (any output with a statement and rows)."""
    found: dict[str, dict[str, Any]] = {}
    for step in view.get("steps") or []:
        out = step.get("output")
        if isinstance(out, dict) and isinstance(out.get("sql"), str) and "rows" in out:
            found[str(step["id"])] = {**out, "carried_over": bool(step.get("carried_from"))}
    return found


def _row_key(row: Any) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def _rows_diff(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """How the rows changed from ``a`` to ``b``: counts, and the rows added and removed (a few of each)."""
    rows_a = list((a or {}).get("rows") or [])
    rows_b = list((b or {}).get("rows") or [])
    count_a, count_b = Counter(map(_row_key, rows_a)), Counter(map(_row_key, rows_b))
    added = list((count_b - count_a).elements())
    removed = list((count_a - count_b).elements())
    return {
        "a": (a or {}).get("row_count", len(rows_a)) if a else None,
        "b": (b or {}).get("row_count", len(rows_b)) if b else None,
        "same_rows": not added and not removed and a is not None and b is not None,
        "added": len(added),
        "removed": len(removed),
        "added_rows": [json.loads(r) for r in added[:MAX_ROWS_SHOWN]],
        "removed_rows": [json.loads(r) for r in removed[:MAX_ROWS_SHOWN]],
        "columns_changed": (a or {}).get("columns") != (b or {}).get("columns") if a and b else None,
    }


def _usage_of(view: dict[str, Any], part: str) -> dict[str, Any]:
    usage = (view.get("usage") or {}).get(part) or {}
    return {
        "total_tokens": int(usage.get("total_tokens") or 0),
        "estimated_cost": float(usage.get("estimated_cost") or 0),
    }


def _parse(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def duration_ms(view: dict[str, Any]) -> int | None:
    """The job's own run time: from its first step it ran (not a carried one) to its last step's end."""
    own = [s for s in view.get("steps") or [] if not s.get("carried_from")]
    starts = [t for t in (_parse(s.get("started_at")) for s in own) if t is not None]
    ends = [t for t in (_parse(s.get("ended_at")) for s in own) if t is not None]
    if not starts or not ends:
        return None
    return max(0, int((max(ends) - min(starts)).total_seconds() * 1000))


def compare_views(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The difference of job ``b`` from job ``a``."""
    text_a = (a.get("answer") or {}).get("text")
    text_b = (b.get("answer") or {}).get("text")
    claims_a, claims_b = _claims(text_a), _claims(text_b)
    cites_a, cites_b = _citations(a), _citations(b)
    sql_a, sql_b = _sql_steps(a), _sql_steps(b)
    steps_a = {str(s["id"]): s for s in a.get("steps") or []}
    steps_b = {str(s["id"]): s for s in b.get("steps") or []}
    usage: dict[str, Any] = {}
    for part in ("total", "carried_over"):
        ua, ub = _usage_of(a, part), _usage_of(b, part)
        usage[part] = {
            "a": ua,
            "b": ub,
            "tokens_delta": ub["total_tokens"] - ua["total_tokens"],
            "cost_delta": round(ub["estimated_cost"] - ua["estimated_cost"], 8),
        }
    dur_a, dur_b = duration_ms(a), duration_ms(b)
    return {
        "a": {"id": a.get("id"), "status": a.get("status"), "forked_from": a.get("forked_from")},
        "b": {"id": b.get("id"), "status": b.get("status"), "forked_from": b.get("forked_from")},
        "answer": {
            "a": text_a,
            "b": text_b,
            "same": text_a == text_b,
            "claims_added": [c for c in claims_b if c not in claims_a],
            "claims_dropped": [c for c in claims_a if c not in claims_b],
        },
        "citations": {
            "added": sorted(set(cites_b) - set(cites_a)),
            "dropped": sorted(set(cites_a) - set(cites_b)),
            "kept": sorted(set(cites_a) & set(cites_b)),
        },
        "sql": [
            {
                "step": step_id,
                "a": sql_a[step_id]["sql"] if step_id in sql_a else None,
                "b": sql_b[step_id]["sql"] if step_id in sql_b else None,
                "same_sql": step_id in sql_a and step_id in sql_b and sql_a[step_id]["sql"] == sql_b[step_id]["sql"],
                "carried_over": bool(sql_b.get(step_id, {}).get("carried_over")),
                "rows": _rows_diff(sql_a.get(step_id), sql_b.get(step_id)),
            }
            for step_id in sorted(set(sql_a) | set(sql_b))
        ],
        "steps": [
            {
                "id": step_id,
                "a": steps_a[step_id]["state"] if step_id in steps_a else None,
                "b": steps_b[step_id]["state"] if step_id in steps_b else None,
                "carried_over": bool(steps_b.get(step_id, {}).get("carried_from")),
            }
            for step_id in list(dict.fromkeys([*steps_a, *steps_b]))
        ],
        "usage": usage,
        "duration_ms": {
            "a": dur_a,
            "b": dur_b,
            "delta": dur_b - dur_a if dur_a is not None and dur_b is not None else None,
        },
    }
