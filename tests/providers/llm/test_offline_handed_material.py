"""The offline model answers what a prompt asks, not the material it hands over (a team member's output)."""

from __future__ import annotations

from shared.providers.llm.offline.agent import asked_part

HANDED = (
    "What does the returns policy say about refunds?\n\nThe previous member's output:\n"
    "From the documents:\n- Refunds are issued within 3 days. [policies/returns-and-refunds.md#7]\n"
    "- Revenue was 10. [sql:s1]"
)


def test_the_material_and_its_citation_markers_are_not_part_of_the_question() -> None:
    assert asked_part(HANDED) == "What does the returns policy say about refunds?"
    assert asked_part("Returns by region [sql:s1] and refunds [faq/customer-faq.md#4]?") == (
        "Returns by region and refunds?"
    )


def test_a_prompt_without_material_is_kept_whole() -> None:
    plain = "Which region had the most returns in Q3?\n\nAnd what does the policy say: refunds after 30 days?"
    assert asked_part(plain) == plain
    assert asked_part("Facts:\n- a\n- b") == "Facts:\n- a\n- b"
