"""Prompt files exist for every task, render with their inputs, and carry the task marker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.prompts import (
    PROMPT_VERSIONS,
    PROMPTS_DIR,
    PromptError,
    load_prompt,
    parse_prompt,
    render_prompt,
    task_of_text,
)
from shared.providers import LLMTask
from tests.llm.helpers import CATALOG, SOURCES

INPUTS: dict[LLMTask, dict[str, Any]] = {
    LLMTask.PLAN: {"question": "Which region sells most?", "catalog": CATALOG, "documents": ["Refund policy"]},
    LLMTask.WRITE_SQL: {"question": "Total sales by region?", "dialect": "tsql", "catalog": CATALOG, "max_rows": 25},
    LLMTask.WRITE_ANSWER: {"question": "Refund time?", "sources": SOURCES},
    LLMTask.SUPERVISE: {"question": "q", "plan": {"steps": []}, "step": {"id": "s1"}, "output": {"status": "success"}},
}


@pytest.mark.parametrize("task", list(LLMTask))
def test_every_task_has_a_versioned_prompt_file_that_renders(task: LLMTask) -> None:
    path = PROMPTS_DIR / f"{task.value}.{PROMPT_VERSIONS[task]}.md"
    assert path.is_file()
    template = load_prompt(task)
    assert template.required_inputs == set(INPUTS[task])
    rendered = template.render(INPUTS[task])
    assert rendered.system.startswith(f"prompt: {task.value}.v1\n")
    assert task_of_text(rendered.system) == task.value
    assert "{{" not in rendered.system + rendered.user
    assert "JSON" in rendered.system  # JSON mode needs the word in the messages


def test_plan_and_sql_prompts_are_grounded_in_the_catalog() -> None:
    plan = render_prompt(LLMTask.PLAN, INPUTS[LLMTask.PLAN])
    assert json.dumps(CATALOG, indent=2) in plan.system
    assert "- Refund policy" in plan.system
    assert plan.user == "Question: Which region sells most?"
    sql = render_prompt(LLMTask.WRITE_SQL, INPUTS[LLMTask.WRITE_SQL])
    assert "amount_eur" in sql.system and "Order total in euros" in sql.system
    assert "tsql database" in sql.system and "at most 25 rows" in sql.system


def test_plan_prompt_lists_the_registered_step_kinds_or_the_built_in_ones() -> None:
    default = render_prompt(LLMTask.PLAN, INPUTS[LLMTask.PLAN])
    assert "- consult_rag: Search the document collection." in default.system
    assert "- ask_user:" in default.system
    given = render_prompt(LLMTask.PLAN, {**INPUTS[LLMTask.PLAN], "step_kinds": {"web_lookup": "Search the web."}})
    assert "- web_lookup: Search the web." in given.system and "- consult_rag: Search the document" not in given.system


def test_answer_prompt_carries_each_source_with_its_id() -> None:
    rendered = render_prompt(LLMTask.WRITE_ANSWER, INPUTS[LLMTask.WRITE_ANSWER])
    assert "[policy#1] (document) Refund policy\nRefunds are paid within 14 days." in rendered.user
    assert "[sql:sales] (sql) Sales by region" in rendered.user
    assert (
        "[sql:sales] (sql) Sales by region\n"
        "SQL: SELECT region, SUM(amount_eur) AS total_eur FROM orders GROUP BY region\n"
        "region | total_eur\nNorth | 1200.0\nSouth | NULL"
    ) in rendered.user
    empty = render_prompt(LLMTask.WRITE_ANSWER, {"question": "q", "sources": []})
    assert "(no sources were retrieved)" in empty.user


def test_missing_inputs_and_bad_sources_are_prompt_errors() -> None:
    with pytest.raises(PromptError, match=r"needs inputs \['catalog', 'max_rows'\]"):
        render_prompt(LLMTask.WRITE_SQL, {"question": "q", "dialect": "sqlite"})
    with pytest.raises(PromptError, match="source_id"):
        render_prompt(LLMTask.WRITE_ANSWER, {"question": "q", "sources": [{"content": "x"}]})


def test_malformed_prompt_files_are_rejected() -> None:
    with pytest.raises(PromptError, match="one system and one user"):
        parse_prompt("<!-- system -->\nonly a system part", task="plan", version="v9")
    with pytest.raises(PromptError, match="unknown filter"):
        parse_prompt("<!-- system -->\n{{ x | shout }}\n<!-- user -->\nq", task="plan", version="v9")
    template = parse_prompt(
        "<!-- note -->\n<!-- system -->\nS {{ a }}\n<!-- user -->\nU {{ b | json }}", task="plan", version="v9"
    )
    rendered = template.render({"a": "x", "b": {"k": 1}})
    assert rendered.system == "prompt: plan.v9\n\nS x"
    assert rendered.user == 'U {\n  "k": 1\n}'
