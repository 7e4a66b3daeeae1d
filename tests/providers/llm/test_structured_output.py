"""Structured output: strict JSON schema, JSON-mode fallback, tool calls, and output validation."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest

from shared.jobs.contracts import AnswerResult, ErrorCode, ProviderError
from shared.jobs.plan import Plan, SqlDraft, SupervisorDecision
from shared.providers.llm.openai import OpenAIChatProvider, build_llm_provider
from shared.providers.llm.openai_schemas import output_schema
from shared.runtime.settings import Settings
from tests.fakes.openai_server import FakeOpenAI, JsonReply, TextReply, ToolCallReply
from tests.providers.llm.helpers import PLAN, SQL_DRAFT, plan_request, sql_request


def _provider(fake: FakeOpenAI, api: Literal["chat", "responses"] = "chat", mode: str = "auto") -> OpenAIChatProvider:
    settings = Settings(
        llm_provider="openai",
        openai_base_url=fake.base_url,
        llm_api=api,
        llm_output_mode=mode,  # type: ignore[arg-type]
    )
    return build_llm_provider(settings)


def test_closed_models_get_a_strict_schema_and_open_ones_a_plain_one() -> None:
    for model in (SqlDraft, AnswerResult, SupervisorDecision):
        schema = output_schema(model)
        assert schema.strict, model

        def walk(node: object) -> None:
            if isinstance(node, dict):
                if node.get("type") == "object":
                    assert node["additionalProperties"] is False
                    assert set(node["required"]) == set(node["properties"])
                assert not {"default", "maxLength", "minLength", "pattern", "maxItems"} & set(node)
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(schema.schema)
    # Plan steps carry an open dict of inputs, which strict mode cannot express.
    plan = output_schema(Plan)
    assert not plan.strict and plan.schema == Plan.model_json_schema()


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_json_schema_is_sent_strict_and_the_output_validated(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"]
) -> None:
    fake_openai.always(JsonReply(SQL_DRAFT, expect="json_schema"), task="write_sql")
    fake_openai.always(JsonReply(PLAN, expect="json_schema"), task="plan")
    provider = _provider(fake_openai, api)
    draft = provider.generate(sql_request()).output
    plan = provider.generate(plan_request()).output
    assert isinstance(draft, SqlDraft) and draft.tables == ["orders"]
    assert isinstance(plan, Plan) and [s.id for s in plan.steps] == ["docs", "sales", "answer"]
    sql_req, plan_req = fake_openai.requests
    assert sql_req.api == api and sql_req.schema == output_schema(SqlDraft).schema and sql_req.strict is True
    assert plan_req.schema == Plan.model_json_schema() and plan_req.strict is False
    if api == "responses":
        assert sql_req.path == "/v1/responses" and sql_req.body["store"] is False
        assert sql_req.body["instructions"].startswith("prompt: write_sql.v3")
        assert sql_req.body["max_output_tokens"] == 1024
    assert fake_openai.failures == []


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_auto_mode_falls_back_to_json_mode_once_json_schema_is_rejected(api: Literal["chat", "responses"]) -> None:
    with FakeOpenAI(supports_json_schema=False) as fake:
        fake.always(JsonReply(SQL_DRAFT, expect="json_object"))
        provider = _provider(fake, api)
        first = provider.generate(sql_request())
        second = provider.generate(sql_request())
    assert first.output == second.output == SqlDraft.model_validate(SQL_DRAFT)
    kinds = [r.format_kind for r in fake.requests]
    # One rejected json_schema call, then JSON mode for this call and every later one.
    assert kinds == ["json_schema", "json_object", "json_object"]
    assert provider.json_schema_unsupported
    system = fake.requests[1].system_text
    given = fake.requests[1].given_schema
    if api == "chat":
        # Chat sends the schema as llama.cpp's grammar, which constrains every token; a schema this small is in the
        # prompt too (PROMPT_SCHEMA_MAX_CHARS), a plan's is not (test_a_large_grammar_schema_stays_out_of_the_prompt).
        assert given is not None and given[0] == "json_object.schema" and "sql" in given[1]["properties"]
        assert "conforms to this JSON schema" in system and '"sql"' in system
    else:
        assert "conforms to this JSON schema" in system and '"sql"' in system
    assert fake.failures == []


def test_forced_json_schema_mode_does_not_fall_back() -> None:
    with FakeOpenAI(supports_json_schema=False) as fake:
        fake.always(JsonReply(SQL_DRAFT))
        with pytest.raises(ProviderError) as info:
            _provider(fake, mode="json_schema").generate(sql_request())
    assert info.value.code == ErrorCode.BAD_REQUEST and "json_schema" in info.value.message
    assert len(fake.requests) == 1


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_tool_call_mode_forces_a_function_and_reads_its_arguments(api: Literal["chat", "responses"]) -> None:
    with FakeOpenAI() as fake:
        fake.always(JsonReply(SQL_DRAFT, expect="tool_call"))
        response = _provider(fake, api, mode="tool_call").generate(sql_request())
    assert response.output == SqlDraft.model_validate(SQL_DRAFT)
    [request] = fake.requests
    choice = request.body["tool_choice"]
    name = choice["function"]["name"] if api == "chat" else choice["name"]
    assert name == "return_write_sql"
    assert request.schema == output_schema(SqlDraft).schema and request.strict is True
    assert "response_format" not in request.body and "text" not in request.body
    assert fake.failures == []


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_tool_call_instead_of_content_is_accepted_only_for_our_function(api: Literal["chat", "responses"]) -> None:
    with FakeOpenAI() as fake:
        fake.script(ToolCallReply("return_write_sql", SQL_DRAFT), ToolCallReply("drop_tables", {"all": True}))
        provider = _provider(fake, api)
        assert provider.generate(sql_request()).output.sql == SQL_DRAFT["sql"]
        with pytest.raises(ProviderError) as info:
            provider.generate(sql_request())
    assert info.value.code == ErrorCode.BAD_REQUEST and "unknown tool 'drop_tables'" in info.value.message


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (TextReply("Sure! The SQL is SELECT 1"), "not a valid SqlDraft"),
        (TextReply(json.dumps({"tables": []})), "sql: Field required"),
        (TextReply(""), "no output"),
        (TextReply('{"sql": "SELECT', finish_reason="length"), "cut at max_tokens=1024"),
    ],
    ids=["not-json", "schema-violation", "empty", "truncated"],
)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_invalid_output_is_a_non_retryable_bad_request(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"], reply: TextReply, needle: str
) -> None:
    fake_openai.always(reply)
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai, api).generate(sql_request())
    assert info.value.code == ErrorCode.BAD_REQUEST and needle in info.value.message
    assert len(fake_openai.requests) == 1  # no hidden retry


def test_json_in_a_code_fence_is_accepted_in_json_mode(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(TextReply("```json\n" + json.dumps(SQL_DRAFT) + "\n```"))
    response = _provider(fake_openai, mode="json_mode").generate(sql_request())
    assert response.output.tables == ["orders"]
    assert fake_openai.requests[0].format_kind == "json_object"


def test_bad_inputs_are_invalid_input_before_any_call(fake_openai: FakeOpenAI) -> None:
    request = sql_request()
    del request.inputs["catalog"]
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai).generate(request)
    assert info.value.code == ErrorCode.INVALID_INPUT and "catalog" in info.value.message
    assert fake_openai.requests == []


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_model_that_takes_no_temperature_is_called_without_one(api: Literal["chat", "responses"]) -> None:
    with FakeOpenAI(supports_temperature=False, supports_json_schema=False) as fake:
        fake.always(JsonReply(SQL_DRAFT))
        provider = _provider(fake, api)
        provider.generate(sql_request(model="o4-mini"))
        provider.generate(sql_request(model="o4-mini"))
    sent = [("temperature" in r.body, r.format_kind) for r in fake.requests]
    # Both capabilities are learnt within the first call, then remembered.
    assert sent[-2:] == [(False, "json_object")] * 2
    assert len(sent) == 4 and provider.no_temperature_models == {"o4-mini"}
    assert fake.failures == []


def test_a_large_grammar_schema_stays_out_of_the_prompt() -> None:
    from pydantic import create_model

    from shared.providers.llm.openai_schemas import PROMPT_SCHEMA_MAX_CHARS, format_instructions, output_schema

    small = output_schema(SqlDraft)
    fields: dict[str, Any] = {f"field_{i}": (str, ...) for i in range(60)}
    large = output_schema(create_model("Large", **fields))
    grammar: tuple[Any, ...] = ("json_object_schema", "openai_compatible", False)
    assert "conforms to this JSON schema" in format_instructions(small, *grammar)
    assert len(json.dumps(large.full_schema)) > PROMPT_SCHEMA_MAX_CHARS
    assert format_instructions(large, *grammar) == ""
    # json_mode has no grammar: the schema is always in the prompt.
    assert "conforms to this JSON schema" in format_instructions(large, "json_mode", "openai_compatible", False)
