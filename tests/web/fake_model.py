"""The console's streaming tests over a fake OpenAI-compatible server: the documents question's plan, its
answer replies, and a devhost that talks to the fake (priced, partial output in a local store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.devhost.hostproc import DevHostProcess
from tests.fakes.openai_server import FakeOpenAI, JsonReply
from tests.web.console import DOCS_Q, start_host

MODEL = "fake-chat"
SOURCE = "policies/returns-and-refunds.md#3"  # a chunk the local index returns for the query below
QUERY = "returns policy refunds after 30 days"


def docs_plan() -> dict[str, Any]:
    """The plan for DOCS_Q: look the policy up (step ``policy``), then write the answer (step ``answer``)."""
    return {
        "steps": [
            {"id": "policy", "kind": "consult_rag", "title": "Refunds", "input": {"query": QUERY}},
            {
                "id": "answer",
                "kind": "generate_response",
                "title": "Write the answer",
                "input": {"question": DOCS_Q},
                "depends_on": ["policy"],
            },
        ],
        "rationale": "The returns policy answers it.",
    }


def policy_answer(points: int) -> str:
    """A long answer citing SOURCE: a first sentence, then ``points`` numbered ones ("Point 1: ...")."""
    return " ".join(
        ["Returns received 31 to 60 days after delivery get store credit only [policies/returns-and-refunds.md#3]."]
        + [
            f"Point {i}: the store credit is valid for 12 months from the day it is issued."
            for i in range(1, points + 1)
        ]
    )


def answer_reply(text: str, *, chunks: int, chunk_delay_s: float) -> JsonReply:
    """The answer writer's reply ``text`` citing SOURCE, streamed in ``chunks`` deltas ``chunk_delay_s`` apart."""
    citations = [{"source_id": SOURCE, "kind": "document", "title": "Returns policy", "quote": None}]
    return JsonReply({"answer": text, "citations": citations, "claims": []}, chunks=chunks, chunk_delay_s=chunk_delay_s)


def start_fake_model_host(llm: FakeOpenAI, data: Path) -> DevHostProcess:
    """A devhost whose model is MODEL on ``llm`` (priced in MODEL_PRICES), partial output in ``data``."""
    env = {
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_MODEL": MODEL,
        "MODEL_PRICES": json.dumps({MODEL: {"input_per_million": 0.4, "output_per_million": 1.6}}),
        "PARTIAL_OUTPUT_STORE": "local",
        "PARTIAL_OUTPUT_PATH": str(data / "partial_output.sqlite3"),
    }
    return start_host(data, env)
