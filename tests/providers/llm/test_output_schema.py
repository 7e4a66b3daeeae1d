"""An agent's output schema on the real provider, over the fake OpenAI server: what is sent, what comes back.

The answer step is asked for ``{"answer": <the agent's object>, "citations": [...]}`` the provider's way
(``json_schema``; JSON mode with the schema in the system message where the endpoint has no json_schema); the
fake answers per the schema it was given, and the object that comes back is checked against the agent's
schema before it becomes the answer's text. A schema too large for the prompt, or one the endpoint refuses,
fails the step with OUTPUT_SCHEMA_REFUSED.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import SecretStr

from shared.executors.generate_response import STREAM_OBSERVER
from shared.executors.runner import run_executor
from shared.jobs.contracts import AnswerResult
from shared.providers.clients import Clients
from shared.providers.llm.openai_schemas import shaped_output_schema
from shared.providers.llm.openai_stream import JsonTextFieldStream
from shared.providers.llm.shaped import MAX_SCHEMA_CHARS
from shared.runtime.settings import Settings
from tests.fakes.openai_server import (
    FakeOpenAI,
    JsonReply,
    SchemaReply,
    bad_request,
    json_schema_unsupported_error,
)

SCORE = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 10, "description": "How good, 0 to 10."},
        "summary": {"type": "string"},
    },
    "required": ["score", "summary"],
    "additionalProperties": False,
}
SOURCES = [{"source_id": "policy#1", "kind": "document", "title": "Refunds", "content": "Refunds take 14 days."}]
CITED = [{"source_id": "policy#1", "kind": "document", "title": "Refunds", "quote": "14 days"}]


def payload(schema: dict[str, Any] | None) -> dict[str, Any]:
    context: dict[str, Any] = {"job_id": "j1", "step_id": "think", "sources": SOURCES}
    if schema is not None:
        context["output_schema"] = schema
    return {
        "task_id": "t1",
        "executor_type": "generate_response",
        "task": {"question": "How long do refunds take? Score the policy."},
        "execution_context": context,
        "constraints": {"max_tokens": 800, "timeout_ms": 10_000},
    }


def clients_for(fake: FakeOpenAI, **settings: Any) -> Clients:
    if settings.pop("compatible", False):
        return Clients(Settings(llm_provider="openai", openai_base_url=fake.base_url, openai_model="m", **settings))
    return Clients(
        Settings(
            llm_provider="azure_openai",
            azure_openai_endpoint=fake.endpoint,
            azure_openai_api_key=SecretStr("k"),
            azure_openai_chat_deployment="chat-dep",
            **settings,
        )
    )


def answer_of(out: dict[str, Any]) -> dict[str, Any]:
    assert out["status"] == "success", out
    value = json.loads(out["result"]["answer"])
    assert isinstance(value, dict)
    return value


def test_the_request_carries_the_agents_schema_and_the_object_comes_back_with_its_citations(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.always(SchemaReply({"score": 7.5, "summary": "Refunds in 14 days [policy#1].", "citations": CITED}))
    seen: list[str] = []
    token = STREAM_OBSERVER.set(seen.append)
    try:
        out = run_executor(payload(SCORE), clients=clients_for(fake_openai))
    finally:
        STREAM_OBSERVER.reset(token)
    assert answer_of(out) == {"score": 7.5, "summary": "Refunds in 14 days [policy#1]."}
    assert out["result"]["citations"] == CITED  # citations ride beside the object, as without a schema
    request = fake_openai.requests_for("write_answer")[0]
    assert request.format_kind == "json_schema" and request.strict is True
    assert request.body["response_format"]["json_schema"]["name"] == "agent_output"
    sent = request.schema
    assert sent is not None and sent["required"][0] == "answer"
    answer = sent["properties"]["answer"]
    assert answer["properties"]["score"]["type"] == "number" and answer["required"] == ["score", "summary"]
    assert "minimum" not in answer["properties"]["score"]  # strict mode lacks it; the reply is checked after
    assert "output schema" in request.system_text  # the prompt says "answer" is an object now
    # Azure shows a json_schema format to the model itself: the schema is not repeated in the prompt.
    assert request.prompt_schema is None
    assert json.loads("".join(seen)) == {"score": 7.5, "summary": "Refunds in 14 days [policy#1]."}
    assert fake_openai.failures == []


def test_a_schema_with_optional_fields_is_sent_non_strict_so_nothing_is_invented(fake_openai: FakeOpenAI) -> None:
    schema = {"type": "object", "properties": {"score": {"type": "number"}, "note": {"type": "string"}}}
    fake_openai.always(SchemaReply({"score": 3, "citations": []}))
    out = run_executor(payload(schema), clients=clients_for(fake_openai))
    assert answer_of(out)["score"] == 3
    request = fake_openai.requests_for("write_answer")[0]
    assert request.strict is False and request.schema is not None
    assert request.schema["properties"]["answer"] == schema


def test_an_object_breaking_a_bound_strict_mode_cannot_send_fails_the_step_naming_where(
    fake_openai: FakeOpenAI,
) -> None:
    # Strict mode drops "maximum", so a model may answer 42: the check against the agent's schema catches it.
    fake_openai.always(SchemaReply({"score": 42, "citations": []}))
    out = run_executor(payload(SCORE), clients=clients_for(fake_openai))
    assert out["status"] == "failed" and out["error"]["code"] == "BAD_REQUEST"
    assert "does not fit the output schema at score" in out["error"]["message"]
    assert "42" in out["error"]["message"] and out["usage"]["tokens_output"] > 0  # the spent tokens count


def test_without_json_schema_the_schema_goes_in_the_prompt_in_json_mode(fake_openai: FakeOpenAI) -> None:
    fake = FakeOpenAI(supports_json_schema=False).start()
    try:
        fake.always(SchemaReply({"score": 5, "summary": "ok", "citations": []}))
        llm_clients = clients_for(fake)
        out = run_executor(payload(SCORE), clients=llm_clients)
        assert answer_of(out) == {"score": 5, "summary": "ok"}
        refused, then = fake.requests_for("write_answer")
        assert refused.format_kind == "json_schema"
        assert then.format_kind == "json_object" and then.schema is None
        prompt = then.prompt_schema  # the fake answered per the schema in the system message
        assert prompt is not None and prompt["properties"]["answer"]["properties"]["score"]["maximum"] == 10
        assert llm_clients.llm.refused_modes == {"chat-dep": {"json_schema"}}  # type: ignore[attr-defined]
        assert fake.failures == []
    finally:
        fake.stop()


def test_an_openai_compatible_server_also_gets_the_schema_in_the_prompt(fake_openai: FakeOpenAI) -> None:
    # vLLM, Ollama and llama.cpp turn a json_schema format into a grammar: the model would not see the schema.
    fake_openai.always(SchemaReply({"score": 1, "summary": "s", "citations": []}, expect="json_schema"))
    out = run_executor(payload(SCORE), clients=clients_for(fake_openai, compatible=True))
    assert answer_of(out) == {"score": 1, "summary": "s"}
    request = fake_openai.requests_for("write_answer")[0]
    prompt = request.prompt_schema
    assert prompt is not None and prompt["properties"]["answer"]["properties"]["score"]["description"] == (
        "How good, 0 to 10."
    )


def test_a_schema_the_endpoint_refuses_fails_the_step_with_a_stable_code(fake_openai: FakeOpenAI) -> None:
    message = "Invalid schema for response_format 'agent_output': In context=('properties', 'answer'), bad."
    fake_openai.script(bad_request(message, param="response_format"), task="write_answer")
    llm_clients = clients_for(fake_openai)
    out = run_executor(payload(SCORE), clients=llm_clients)
    assert out["status"] == "failed" and out["error"]["code"] == "OUTPUT_SCHEMA_REFUSED"
    assert "refused the output schema (400)" in out["error"]["message"] and "Invalid schema" in out["error"]["message"]
    # The model keeps its json_schema mode: the refusal was this schema's, not the mode's.
    assert llm_clients.llm.refused_modes == {}  # type: ignore[attr-defined]
    assert len(fake_openai.requests_for("write_answer")) == 1


def test_a_refusal_in_a_mode_the_model_served_before_blames_the_schema(fake_openai: FakeOpenAI) -> None:
    llm_clients = clients_for(fake_openai)
    reply = {"answer": "Refunds take 14 days.", "citations": [], "claims": []}
    fake_openai.always(JsonReply(reply), task="write_answer")
    assert run_executor(payload(None), clients=llm_clients)["status"] == "success"
    assert "output schema" not in fake_openai.requests_for("write_answer")[0].system_text
    fake_openai.script(json_schema_unsupported_error(), task="write_answer")  # the same words as a mode refusal
    out = run_executor(payload(SCORE), clients=llm_clients)
    assert out["error"]["code"] == "OUTPUT_SCHEMA_REFUSED"
    assert llm_clients.llm.refused_modes == {}  # type: ignore[attr-defined]


def test_a_schema_too_large_for_the_prompt_fails_before_any_call(fake_openai: FakeOpenAI) -> None:
    props = {f"field_{i}": {"type": "string", "description": "d" * 200} for i in range(100)}
    big = {"type": "object", "properties": props}
    out = run_executor(payload(big), clients=clients_for(fake_openai))
    assert out["status"] == "failed" and out["error"]["code"] == "OUTPUT_SCHEMA_REFUSED"
    assert f"at most {MAX_SCHEMA_CHARS}" in out["error"]["message"]
    assert fake_openai.requests == [] and out["usage"]["total_tokens"] == 0
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"d": deep}}
    out = run_executor(payload(deep), clients=clients_for(fake_openai))
    assert out["error"]["code"] == "OUTPUT_SCHEMA_REFUSED" and "levels deep" in out["error"]["message"]
    # The same bound holds for the offline model, so a run does not depend on which model it got.
    offline = Clients(Settings(llm_provider="offline", search_provider="local", sql_provider="sqlite"))
    assert run_executor(payload(big), clients=offline)["error"]["code"] == "OUTPUT_SCHEMA_REFUSED"


def test_a_reply_without_an_object_is_a_bad_request_with_the_output(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(JsonReply({"answer": "just prose", "citations": []}, check_schema=False))
    out = run_executor(payload(SCORE), clients=clients_for(fake_openai))
    assert out["status"] == "failed" and out["error"]["code"] == "BAD_REQUEST"
    assert "no JSON object in 'answer'" in out["error"]["message"]


def test_the_responses_api_carries_the_schema_too(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(SchemaReply({"score": 2, "summary": "s", "citations": []}, expect="json_schema"))
    out = run_executor(payload(SCORE), clients=clients_for(fake_openai, llm_api="responses"))
    assert answer_of(out) == {"score": 2, "summary": "s"}
    request = fake_openai.requests_for("write_answer")[0]
    assert request.api == "responses" and request.body["text"]["format"]["name"] == "agent_output"


def test_definitions_and_refs_are_hoisted_and_still_resolve() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}, "again": {"$ref": "#"}},
        "$defs": {"Item": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    }
    sent = shaped_output_schema(AnswerResult, schema)
    full = sent.full_schema
    assert "Citation" in full["$defs"] and "output_Item" in full["$defs"]  # no clash with the output type's own
    inner = full["properties"]["answer"]
    assert inner["properties"]["items"]["items"] == {"$ref": "#/$defs/output_Item"}
    assert inner["properties"]["again"] == {"$ref": "#/properties/answer"} and "$schema" not in inner
    assert sent.strict is False  # "again" and "items" are optional
    from jsonschema import Draft202012Validator

    good = {"answer": {"items": [{"name": "a"}], "again": {"items": []}}, "citations": []}
    assert not list(Draft202012Validator(full).iter_errors(good))
    assert list(Draft202012Validator(full).iter_errors({"answer": {"items": [{}]}, "citations": []}))


def test_the_text_stream_passes_an_object_value_through_raw() -> None:
    got: list[str] = []
    stream = JsonTextFieldStream("answer", got.append)
    text = '{"answer": {"a": "x}\\"{", "b": [1, {"c": 2}]}, "citations": [{"source_id": "s"}]}'
    for i in range(0, len(text), 5):
        stream.feed(text[i : i + 5])
    assert "".join(got) == '{"a": "x}\\"{", "b": [1, {"c": 2}]}'


@pytest.mark.parametrize("value", ["prose", '{"nested": "text"}'])
def test_a_string_answer_still_streams_decoded(value: str) -> None:
    got: list[str] = []
    JsonTextFieldStream("answer", got.append).feed(json.dumps({"answer": value, "citations": []}))
    assert "".join(got) == value


def test_a_workflow_agent_gets_the_object_as_its_output_through_the_real_provider(fake_openai: FakeOpenAI) -> None:
    from tests.providers.llm.helpers import JUDGE_AGENT, JUDGE_WORKFLOW
    from tests.runs.runkit import DONE_TURN, Activities, defs, start

    llm_clients = clients_for(fake_openai)

    class OnFake(Activities):
        def __call__(self, name: str, payload: Any) -> Any:
            if name == "generate_response":
                self.calls.append((name, payload))
                return run_executor(payload, expected_type=name, clients=llm_clients)
            return super().__call__(name, payload)

    fake_openai.always(SchemaReply({"refund_possible": True, "days": 14, "citations": []}))
    acts = OnFake({**defs(JUDGE_WORKFLOW), **defs(JUDGE_AGENT)}, agent_turn=[DONE_TURN])
    result, _ctx = start(acts, "workflow", "judge-refunds")
    assert result["status"] == "completed", result
    assert result["outputs"] == {"refund_possible": True, "days": 14}
    sent = fake_openai.requests_for("write_answer")[0].schema
    assert sent is not None and sent["properties"]["answer"]["properties"]["days"]["type"] == "integer"
    assert fake_openai.failures == []


def test_the_fake_answers_only_per_a_schema_it_was_given(fake_openai: FakeOpenAI) -> None:
    import openai

    fake_openai.always(SchemaReply({"score": 1}))
    client = openai.OpenAI(base_url=fake_openai.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert fake_openai.failures == ["the request gave no schema (response format, tool parameters or system message)"]
    fake_openai.failures.clear()
    bounded = {"type": "object", "properties": {"score": {"type": "integer", "maximum": 0}}, "required": ["score"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": bounded, "strict": False}}
    with pytest.raises(openai.BadRequestError):  # a pinned value that breaks the schema is never sent
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], response_format=fmt)  # type: ignore[call-overload]
    assert "does not fit the schema at score" in fake_openai.failures[0]
