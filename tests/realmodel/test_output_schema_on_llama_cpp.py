"""An agent with an output schema, run as a workflow whose answer step talks to llama.cpp (Gemma 3 270M).

One short test (the tier must stay quick): the server refuses ``json_schema`` (a 500), so the provider falls
back to llama.cpp's grammar-constrained ``json_object`` with the schema, the model's object is checked
against the agent's schema by the provider and again by the orchestrator, and becomes the node's output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.executors.runner import run_executor
from shared.providers.clients import Clients
from shared.runtime.settings import Settings
from tests.providers.llm.helpers import JUDGE_AGENT as AGENT
from tests.providers.llm.helpers import JUDGE_SCHEMA as SCHEMA
from tests.providers.llm.helpers import JUDGE_WORKFLOW as WORKFLOW
from tests.realmodel.server import MODEL_NAME, LlamaServer
from tests.runs.runkit import DONE_TURN, Activities, defs, start, steps


class OnLlama(Activities):
    """The run's activities: the answer step on the real server; the Executor's one turn is scripted."""

    def __init__(self, clients: Clients) -> None:
        super().__init__({**defs(WORKFLOW), **defs(AGENT)}, agent_turn=[DONE_TURN])
        self.clients = clients

    def __call__(self, name: str, payload: Any) -> Any:
        if name == "generate_response":
            self.calls.append((name, payload))
            return run_executor(payload, expected_type=name, clients=self.clients)
        return super().__call__(name, payload)


@pytest.mark.timeout(300)
def test_an_agent_with_an_output_schema_gets_a_valid_object_from_the_real_model(llama: LlamaServer) -> None:
    clients = Clients(
        Settings(
            llm_provider="openai",
            openai_base_url=llama.base_url,
            openai_model=MODEL_NAME,
            model_prices={MODEL_NAME: {"input_per_million": 0, "output_per_million": 0}},  # type: ignore[dict-item]
        )
    )
    acts = OnLlama(clients)
    result, ctx = start(acts, "workflow", "judge-refunds")
    answer = steps(ctx)["judge"]
    print(f"\noutput schema on {MODEL_NAME}: {result['status']} {result.get('outputs')} {answer.get('error')}")
    assert result["status"] == "completed", (result, answer)
    outputs = result["outputs"]
    assert isinstance(outputs["refund_possible"], bool) and isinstance(outputs["days"], int), outputs
    # The grammar path carried the agent's schema: json_schema was refused (llama.cpp answers a 500).
    assert clients.llm.refused_modes == {MODEL_NAME: {"json_schema"}}  # type: ignore[attr-defined]
    written = acts.named("generate_response")[0]
    assert written["execution_context"]["output_schema"] == SCHEMA
    text = json.dumps(outputs)
    assert "refund_possible" in text
