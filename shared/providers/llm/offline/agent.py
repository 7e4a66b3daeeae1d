"""The offline Executor: agent mode without a model, by rules, so its loop, bounds, waits and failures are testable.

Each turn it looks at every part of the question:
- a part some earlier call already found something for is done;
- a part no call has tried yet goes to the tool the planner would pick (data or documents), all such
  calls in one turn (parallel tool calls);
- a part whose call failed or found nothing is tried once with the other source, if that one has it;
- a question no source has anything on is put to the user once (request_user_feedback), and the
  answer is searched;
- when nothing is left to try, or the bounds are nearly spent, it calls format_output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from shared.jobs.agent import FORMAT_OUTPUT, REQUEST_USER_FEEDBACK, AgentToolCall, AgentTurn

SQL_KIND = "execute_azure_sql"
SEARCH_KIND = "consult_rag"
PYTHON_TOOL = "python.run"
TOPICS = ["revenue", "returns", "orders", "policies"]
Route = Callable[[list[str], int], tuple[str | None, str]]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text_of(call: dict[str, Any]) -> str:
    args = _dict(call.get("arguments"))
    return str(args.get("question") or args.get("query") or "")


def _found(call: dict[str, Any]) -> bool:
    if not call.get("success"):
        return False
    if isinstance(call.get("data"), str):
        return True  # a result too large to show whole: there is something
    data = _dict(call.get("data"))
    rows = data.get("rows")
    if isinstance(rows, list):
        return any(any(v is not None for v in row) for row in rows if isinstance(row, list))
    return bool(data.get("chunks"))


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def _about(call: dict[str, Any], part: str) -> bool:
    """Whether a call looked up this part: its text's key words are all in the part, or the reverse."""
    mine, theirs = _words(part), _words(_text_of(call))
    return bool(mine and theirs) and (theirs <= mine or mine <= theirs)


def _call(tool: str, arguments: dict[str, Any], n: int) -> AgentToolCall:
    return AgentToolCall(id=f"c{n}", tool=tool, arguments_json=json.dumps(arguments))


def _lookup(kind: str, text: str, n: int) -> AgentToolCall:
    field = "question" if kind == SQL_KIND else "query"
    return _call(kind, {field: text[:2000]}, n)


# A citation marker another answer carries ("[policies/returns.md#3]", "[sql:s1]"): not words to look up.
_CITATION = re.compile(r"\s*\[[^\[\]\s]+(?:#\d+|:[a-z0-9_-]+)\]")
# A paragraph that introduces material handed over ("The previous member's output:", "What each member found:").
_MATERIAL = re.compile(r"\n\s*\n[^\n]*:\s*\n", re.MULTILINE)


def asked_part(prompt: str) -> str:
    """What a prompt asks, without the material it hands over and without citation markers (nothing to search)."""
    cut = _MATERIAL.search(prompt)
    asked = prompt[: cut.start()] if cut and prompt[: cut.start()].strip() else prompt
    return _CITATION.sub("", asked).strip()


def agent_turn_offline(
    inputs: dict[str, Any],
    *,
    split: Callable[[str], list[str]],
    route: Route,
    covers_data: Callable[[str], bool],
    docs_have: Callable[[str], bool],
) -> AgentTurn:
    """One deterministic Executor turn from the question and the calls so far."""
    question = asked_part(str(inputs.get("question") or ""))
    calls: list[dict[str, Any]] = [c for c in inputs.get("transcript") or [] if isinstance(c, dict)]
    offered = {str(t.get("name")) for t in inputs.get("tools") or [] if isinstance(t, dict)}
    calls_left = int(inputs.get("calls_left") or 0)
    n = len(calls)
    if calls_left <= 0 or int(inputs.get("turns_left") or 0) <= 1:
        return AgentTurn(
            reasoning="The bounds of this job are nearly spent, so I write the answer from what I have.",
            tool_calls=[_call(FORMAT_OUTPUT, {}, n + 1)],
        )
    planned, reasons = _lookups(split(question), calls, route, covers_data, docs_have, offered)
    if not planned:
        planned, reasons = _analysis(question, calls, offered, reasons)
    if not planned:
        planned, reasons = _with_the_user(question, calls, offered, reasons)
    planned = planned[:calls_left]
    if not planned:
        return AgentTurn(
            reasoning=" ".join([*reasons, "I have what the tools can give, so I write the answer."])[:2000],
            tool_calls=[_call(FORMAT_OUTPUT, {}, n + 1)],
        )
    return AgentTurn(reasoning=" ".join(reasons)[:2000], tool_calls=planned)


def _lookups(
    parts: list[str],
    calls: list[dict[str, Any]],
    route: Route,
    covers_data: Callable[[str], bool],
    docs_have: Callable[[str], bool],
    offered: set[str],
) -> tuple[list[AgentToolCall], list[str]]:
    """This turn's lookups, one per part of the question that no call has found anything for yet, and why."""
    reasons: list[str] = []
    planned: list[AgentToolCall] = []
    for i, part in enumerate(parts):
        tried = [c for c in calls if c.get("tool") in (SQL_KIND, SEARCH_KIND) and _about(c, part)]
        if any(_found(c) for c in tried):
            continue
        step = _next_lookup(parts, i, tried, route, covers_data, docs_have, offered)
        if step is not None:
            kind, text, why = step
            planned.append(_lookup(kind, text, len(calls) + len(planned) + 1))
            reasons.append(why)
        elif tried:
            reasons.append(f"Neither source has anything on '{part}'; the answer will say so.")
    return planned, reasons


def _analysis(
    question: str, calls: list[dict[str, Any]], offered: set[str], reasons: list[str]
) -> tuple[list[AgentToolCall], list[str]]:
    """Once the data is in: python.run over the first SQL rows found, when the question asks for growth or a chart."""
    from shared.providers.llm.offline.code import ANALYSIS_CODE, wants_code

    if PYTHON_TOOL not in offered or not wants_code(question) or any(c.get("tool") == PYTHON_TOOL for c in calls):
        return [], reasons
    rows = next((c for c in calls if c.get("tool") == SQL_KIND and _found(c) and c.get("step")), None)
    if rows is None:
        return [], reasons
    arguments: dict[str, Any] = {"question": f"Growth rate and chart of: {question}"[:500], "code": ANALYSIS_CODE}
    arguments["inputs"] = {"rows": str(rows["step"])}
    why = f"The question asks for a computation over the rows of {rows['step']}, so I run code over them."
    return [_call(PYTHON_TOOL, arguments, len(calls) + 1)], [*reasons, why]


def _with_the_user(
    question: str, calls: list[dict[str, Any]], offered: set[str], reasons: list[str]
) -> tuple[list[AgentToolCall], list[str]]:
    """When no lookup is left: ask the user once if nothing matched, or search what the user answered."""
    n = len(calls)
    asked = [c for c in calls if c.get("tool") == REQUEST_USER_FEEDBACK]
    if not calls and REQUEST_USER_FEEDBACK in offered:
        question_text = "I could not match the question to the data or the documents. Which topic do you mean?"
        call = _call(REQUEST_USER_FEEDBACK, {"question": question_text, "options": TOPICS}, n + 1)
        return [call], [*reasons, "Nothing in the data or the documents matches the question, so I ask the user."]
    if asked and len(asked) == len(calls):
        answer = str(_dict(asked[-1].get("data")).get("answer") or "").strip()
        if answer:
            call = _lookup(SEARCH_KIND, f"{question} {answer}", n + 1)
            return [call], [*reasons, f"The user means '{answer[:80]}', so I search the documents for that."]
    return [], reasons


def _next_lookup(
    parts: list[str],
    i: int,
    tried: list[dict[str, Any]],
    route: Route,
    covers_data: Callable[[str], bool],
    docs_have: Callable[[str], bool],
    offered: set[str],
) -> tuple[str, str, str] | None:
    """The next call for one part: the planner's pick first, then the other source once; None when none is left."""
    part = parts[i]
    used = {c.get("tool") for c in tried}
    if not tried:
        kind, text = route(parts, i)
        if kind is None or kind not in offered:
            return None
        source = "the data" if kind == SQL_KIND else "the documents"
        return kind, text, f"'{part}' is a question for {source}."
    last = tried[-1]
    failure = _dict(last.get("error"))
    outcome = f"failed ({failure.get('code')})" if not last.get("success") else "found nothing"
    if SEARCH_KIND not in used and SEARCH_KIND in offered and docs_have(part):
        return SEARCH_KIND, part, f"The data query for '{part}' {outcome}; I search the documents instead."
    if SQL_KIND not in used and SQL_KIND in offered and covers_data(part):
        return SQL_KIND, part, f"The document search for '{part}' {outcome}; I query the data instead."
    return None


# --- An answer in the shape of an agent's output schema -----------------------------------------------------

# String fields the answer's own text fills (the offline model has nothing else to say in prose).
TEXT_FIELDS = {"answer", "summary", "text", "report", "brief", "findings", "description", "conclusion"}
# Array fields the cited sources fill.
SOURCE_FIELDS = {"citations", "sources", "references"}


class SchemaUnfillable(ValueError):
    """The offline model found no value for a field the output schema requires and does not let be null."""


def _types(prop: dict[str, Any]) -> set[str]:
    kind = prop.get("type")
    return set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _fits(value: Any, types: set[str]) -> Any:
    """The value as one of the types, or None when it is none of them."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and ("number" in types or ("integer" in types and float(value).is_integer())):
        return int(value) if "integer" in types and "number" not in types else value
    if isinstance(value, str) and "string" in types:
        return value
    if isinstance(value, bool) and "boolean" in types:
        return value
    return None


def _found_value(name: str, types: set[str], facts: dict[str, Any]) -> Any:
    """What the model found for one field: a SQL column of that name, the answer's text, or the cited sources."""
    column = facts["columns"].get(_key(name))
    if column is not None and _fits(column, types) is not None:
        return _fits(column, types)
    if "string" in types and _key(name) in TEXT_FIELDS and facts["text"]:
        return facts["text"]
    if "array" in types and _key(name) in SOURCE_FIELDS:
        return list(facts["sources"])
    return None


def _empty(name: str, prop: dict[str, Any], types: set[str]) -> Any:
    """The empty value the schema allows for a field with no data; SchemaUnfillable when it allows none."""
    if "null" in types:
        return None
    if "array" in types and not prop.get("minItems"):
        return []
    kind = "/".join(sorted(types)) or "any type"
    raise SchemaUnfillable(
        f"the offline model found no value for '{name}' ({kind}), which the agent's output schema requires and "
        "does not allow to be null or empty; it writes no made-up figures (use a real model, or let the field be null)"
    )


def fill_schema(schema: dict[str, Any], text: str, sources: list[str], columns: dict[str, Any]) -> dict[str, Any]:
    """An object for an output schema from what was found: SQL columns by name, the answer's text, its sources.

    Deterministic; a field with no data is null (or empty, or left out when optional) as the schema allows,
    else SchemaUnfillable says which field. Only top-level properties are filled.
    """
    facts = {"text": text, "sources": sources, "columns": {_key(k): v for k, v in columns.items()}}
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = set(schema.get("required") or [])
    out: dict[str, Any] = {}
    for name, prop in props.items():
        prop = _dict(prop)
        types = _types(prop)
        value = _found_value(name, types, facts)
        if value is None and name not in required:
            continue
        out[name] = value if value is not None else _empty(name, prop, types)
    return out
