"""Issue 10 over the fake server: what a real server did to the provider, pinned where the fake can say it.

The real-model tier (tests/realmodel) shows the same against llama.cpp; these tests keep each barrier
tested on its own, fast, and where a real server can't be made to misbehave on cue.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from pydantic import SecretStr

from shared.executors.runner import run_executor
from shared.jobs.contracts import ErrorCode, ProviderError
from shared.jobs.plan import SqlDraft
from shared.providers.clients import Clients
from shared.providers.llm.openai import OpenAIChatProvider, build_llm_provider
from shared.runtime.pricing import estimate_cost
from shared.runtime.settings import Settings
from tests.fakes.openai_server import ErrorReply, FakeOpenAI, JsonReply, TextReply
from tests.providers.llm.helpers import SQL_DRAFT, sql_request


def _provider(base_url: str, api: str = "chat") -> OpenAIChatProvider:
    return build_llm_provider(Settings(llm_provider="openai", openai_base_url=base_url, llm_api=api))  # type: ignore[arg-type]


# llama-cpp-python's answer to a json_schema response format: a 500 carrying a pydantic validation error.
LLAMA_CPP_500 = ErrorReply(
    500,
    {
        "error": {
            "message": "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be "
            "'text' or 'json_object' [type=literal_error, input_value='json_schema', input_type=str]",
            "type": "internal_server_error",
        }
    },
)


def test_a_500_refusing_json_schema_falls_back_and_is_remembered_per_model(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(LLAMA_CPP_500)
    fake_openai.always(JsonReply(SQL_DRAFT, expect="json_object"))
    provider = _provider(fake_openai.base_url)
    first = provider.generate(sql_request(model="m1"))
    second = provider.generate(sql_request(model="m1"))
    assert first.output == second.output == SqlDraft.model_validate(SQL_DRAFT)
    requests = fake_openai.requests
    assert [r.format_kind for r in requests] == ["json_schema", "json_object", "json_object"]
    # llama.cpp's shape of a schema: json_object carrying the schema, so the server can constrain output.
    sent = requests[1].body["response_format"]["schema"]
    assert set(sent["properties"]) == {"sql", "tables", "explanation"} and sent["required"] == ["sql"]
    # No bounds a grammar compiler would unroll (llama.cpp dies on maxLength 20000).
    assert "maxLength" not in json.dumps(sent) and "maxLength" in json.dumps(SqlDraft.model_json_schema())
    assert provider.refused_modes == {"m1": {"json_schema"}}
    # Another model on the same endpoint is asked with json_schema again (remembered per endpoint and model).
    fake_openai.script(JsonReply(SQL_DRAFT, expect="json_schema"))
    provider.generate(sql_request(model="m2"))
    assert fake_openai.requests[-1].format_kind == "json_schema" and len(fake_openai.requests) == 4


def test_a_plain_500_is_not_taken_for_a_refused_mode(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(ErrorReply(500, {"error": {"message": "CUDA out of memory"}}))
    provider = _provider(fake_openai.base_url)
    with pytest.raises(ProviderError) as info:
        provider.generate(sql_request())
    assert info.value.code == ErrorCode.UPSTREAM_ERROR and len(fake_openai.requests) == 1
    assert provider.refused_modes == {}


def test_a_refused_llama_cpp_schema_falls_back_to_plain_json_mode(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(LLAMA_CPP_500, ErrorReply(400, {"error": {"message": "unknown field response_format.schema"}}))
    fake_openai.always(JsonReply(SQL_DRAFT, expect="json_object"))
    provider = _provider(fake_openai.base_url)
    provider.generate(sql_request())
    third = fake_openai.requests[2]
    assert third.format_kind == "json_object" and "schema" not in third.body["response_format"]
    assert "conforms to this JSON schema" in third.system_text


def test_output_cut_at_max_tokens_behind_finish_reason_tool_calls_says_so(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(TextReply('{"sql": "SELECT region, SUM(amo', usage=(300, 16), finish_reason="tool_calls"))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url).generate(sql_request(max_tokens=16))
    assert info.value.code == ErrorCode.BAD_REQUEST
    assert "raise constraints.max_tokens" in info.value.message and "EOF" not in info.value.message
    # The cut output was generated: its tokens count.
    assert info.value.usage is not None and (info.value.usage.tokens_input, info.value.usage.tokens_output) == (
        300,
        16,
    )


def test_invalid_output_keeps_its_usage_and_model(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(TextReply('{"not_sql": 1}', usage=(120, 7), model="served-model"))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url).generate(sql_request())
    assert info.value.code == ErrorCode.BAD_REQUEST and "not a valid SqlDraft" in info.value.message
    assert info.value.usage is not None and info.value.usage.total_tokens == 127
    assert info.value.model_used == "served-model"


def test_every_call_streams_so_giving_up_closes_the_connection(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(JsonReply(SQL_DRAFT))
    response = _provider(fake_openai.base_url).generate(sql_request())
    assert fake_openai.requests[0].body.get("stream") is True
    assert response.usage_estimated is False and response.tokens_input > 0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_is_down_is_named_with_its_url_and_cause() -> None:
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(ProviderError) as info:
        _provider(base).generate(sql_request(timeout_s=5))
    message = info.value.message
    assert info.value.code == ErrorCode.UPSTREAM_ERROR
    assert f"{base}/chat/completions" in message and "ConnectError" in message
    assert "mid-stream" not in message and info.value.usage is None


def test_responses_api_missing_names_the_path_and_the_fix(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(ErrorReply(404, {"detail": "Not Found"}))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url, api="responses").generate(sql_request())
    assert info.value.code == ErrorCode.CONFIG_ERROR
    assert f"{fake_openai.base_url}/responses" in info.value.message and "LLM_API=chat" in info.value.message


# --- The executors keep the usage of failed calls ------------------------------------------------


def _payload(executor_type: str, task: dict[str, Any]) -> dict[str, Any]:
    return {
        "task_id": f"t-{executor_type}",
        "executor_type": executor_type,
        "task": task,
        "execution_context": {"job_id": "j1", "step_id": "sales"},
        "constraints": {"max_tokens": 400, "timeout_ms": 10_000},
    }


@pytest.fixture
def clients(fake_openai: FakeOpenAI, tmp_path: Any) -> Clients:
    settings = Settings(
        llm_provider="azure_openai",
        azure_openai_endpoint=fake_openai.endpoint,
        azure_openai_api_key=SecretStr("k"),
        azure_openai_chat_deployment="chat-dep",
        model_prices={"chat-dep": {"input_per_million": 1.0, "output_per_million": 4.0}},  # type: ignore[dict-item]
        sqlite_database_path=tmp_path / "sample.db",
    )
    return Clients(settings)


def test_a_query_failing_in_the_database_keeps_the_sql_writers_usage(fake_openai: FakeOpenAI, clients: Clients) -> None:
    # Passes the guard and the catalog's columns; SQLite fails on the value at run time.
    failing = {"sql": "SELECT name FROM regions WHERE abs(-9223372036854775808) > 0", "tables": ["regions"]}
    fake_openai.always(JsonReply(failing, usage=(900, 30)), task="write_sql")
    out = run_executor(_payload("execute_azure_sql", {"question": "list regions"}), clients=clients)
    assert out["status"] == "failed" and out["error"]["code"] == "SQL_ERROR", out
    assert out["model_used"] == "chat-dep"
    assert (out["usage"]["tokens_input"], out["usage"]["tokens_output"]) == (900, 30)
    assert out["usage"]["estimated_cost"] == pytest.approx(
        estimate_cost("chat-dep", 900, 30, clients.settings.model_prices)
    )


def test_an_invalid_sql_draft_counts_its_tokens_in_the_failed_output(fake_openai: FakeOpenAI, clients: Clients) -> None:
    fake_openai.always(TextReply("SELECT 1", usage=(800, 4)), task="write_sql")
    out = run_executor(_payload("execute_azure_sql", {"question": "list regions"}), clients=clients)
    assert out["status"] == "failed" and out["error"]["code"] == "BAD_REQUEST"
    assert out["usage"]["total_tokens"] == 804 and out["usage"]["estimated_cost"] > 0
    assert out["model_used"] == "chat-dep"


def test_a_raw_newline_a_grammar_let_into_a_string_is_read_as_content(fake_openai: FakeOpenAI) -> None:
    # llama-cpp-python's JSON grammar allows raw control characters in strings; strict JSON does not.
    fake_openai.always(TextReply('{"sql": "SELECT 1\n FROM orders", "tables": ["orders"]}'))
    out = _provider(fake_openai.base_url).generate(sql_request())
    assert out.output.sql == "SELECT 1\n FROM orders"


def test_json_broken_otherwise_is_still_not_valid(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(TextReply('{"sql": "SELECT 1\n FROM orders", "tables": [orders]}'))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url).generate(sql_request())
    assert info.value.code == ErrorCode.BAD_REQUEST and "not a valid" in info.value.message
