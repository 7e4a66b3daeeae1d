"""The provider against llama.cpp's real server (Gemma 3 270M) through the real ``openai`` SDK.

Each test is one of issue 10's findings, reproduced on the server that showed it: a refused output
mode (HTTP 500), no Responses API, an output cut behind ``finish_reason: "tool_calls"``, streams
without usage, a server killed mid-stream, a timeout that must free the single slot; and issue 26's stream
that another request interrupts.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import openai
import pytest

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.jobs.plan import SqlDraft
from shared.providers.interfaces import LLMTask
from shared.providers.llm.openai import OpenAIChatProvider, build_llm_provider
from shared.providers.llm.openai_schemas import _json_mode_instructions, grammar_safe, output_schema
from shared.providers.llm.prompts import render_prompt
from shared.runtime.settings import Settings
from tests.providers.llm.helpers import sql_request
from tests.realmodel.server import MODEL_NAME, LlamaServer

# Small prompts and outputs: the tier must stay under 10 minutes on 2 shared cores.
MAX_TOKENS = 96
TIMEOUT_S = 120.0


def provider(server: LlamaServer, **settings: str) -> OpenAIChatProvider:
    return build_llm_provider(
        Settings(llm_provider="openai", openai_base_url=server.base_url, openai_model=MODEL_NAME, **settings)  # type: ignore[arg-type]
    )


def test_auto_mode_falls_back_from_the_refused_json_schema_to_the_servers_grammar(llama: LlamaServer) -> None:
    llm = provider(llama)
    deltas: list[str] = []
    response = llm.generate(sql_request(max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S, on_delta=deltas.append))
    # llama.cpp answered json_schema with a 500; the provider fell back to {"type": "json_object",
    # "schema": ...}, which the server compiles to a grammar: the output has the schema's shape.
    assert llm.refused_modes == {MODEL_NAME: {"json_schema"}}
    assert isinstance(response.output, SqlDraft) and response.output.sql.strip()
    assert "".join(deltas) == response.output.sql  # the streamed text field, as prose
    assert response.model_used == MODEL_NAME
    # The stream carried no usage (the server ignores include_usage): estimated, and marked so.
    assert response.usage_estimated and response.tokens_input > 0 and response.tokens_output > 0

    # The same prompt unstreamed: the server reports usage there, which the estimate must be near.
    rendered = render_prompt(LLMTask.WRITE_SQL, sql_request().inputs)
    body: dict[str, Any] = {
        "model": MODEL_NAME,
        "messages": [
            {"role": "system", "content": rendered.system + _json_mode_instructions(output_schema(SqlDraft))},
            {"role": "user", "content": rendered.user},
        ],
        "max_tokens": 1,
        "response_format": {"type": "json_object", "schema": grammar_safe(output_schema(SqlDraft).full_schema)},
        "timeout": TIMEOUT_S,
    }
    reported = openai.OpenAI(base_url=llama.base_url, api_key="x", max_retries=0).chat.completions.create(**body)
    assert reported.usage is not None
    ratio = response.tokens_input / reported.usage.prompt_tokens
    print(
        f"\nwrite_sql prompt tokens: counted {response.tokens_input} (estimated), "
        f"reported {reported.usage.prompt_tokens}"
    )
    assert 0.5 < ratio < 1.5
    # The refusal is remembered: this call went straight to the grammar.
    again = llm.generate(sql_request(max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S))
    assert isinstance(again.output, SqlDraft)


@pytest.mark.parametrize("mode", ["json_mode", "tool_call"])
def test_forced_output_modes_the_server_supports(llama: LlamaServer, mode: str) -> None:
    llm = provider(llama, llm_output_mode=mode)
    try:
        response = llm.generate(sql_request(max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S))
    except ProviderError as exc:
        # A tiny model in unconstrained JSON mode may write invalid output: then it says so, and counts it.
        assert exc.code == ErrorCode.BAD_REQUEST, exc.message
        assert "SqlDraft" in exc.message or "max_tokens" in exc.message, exc.message
        assert exc.usage is not None and exc.usage.estimated and exc.usage.tokens_output > 0
        print(f"\n{mode}: {exc.message} ({exc.usage.total_tokens} tokens counted)")
        return
    assert isinstance(response.output, SqlDraft) and response.usage_estimated
    print(f"\n{mode}: ok ({response.tokens_input + response.tokens_output} tokens counted)")


@pytest.mark.parametrize("mode", ["auto", "tool_call"])
def test_cut_output_says_raise_max_tokens_and_counts_its_tokens(llama: LlamaServer, mode: str) -> None:
    llm = provider(llama, llm_output_mode=mode)
    with pytest.raises(ProviderError) as info:
        llm.generate(sql_request(max_tokens=6, timeout_s=TIMEOUT_S))
    # tool_call mode: llama.cpp reports finish_reason "tool_calls" for the cut output.
    assert info.value.code == ErrorCode.BAD_REQUEST
    assert "raise constraints.max_tokens" in info.value.message and "EOF" not in info.value.message
    assert info.value.usage is not None and info.value.usage.tokens_output > 0 and info.value.usage.estimated


def test_a_server_without_the_responses_api_names_the_path_and_the_fix(llama: LlamaServer) -> None:
    with pytest.raises(ProviderError) as info:
        provider(llama, llm_api="responses").generate(sql_request(max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S))
    assert info.value.code == ErrorCode.CONFIG_ERROR
    assert f"{llama.base_url}/responses" in info.value.message and "LLM_API=chat" in info.value.message


def test_a_server_killed_mid_stream_and_then_down_are_told_apart(own_llama: LlamaServer) -> None:
    llm = provider(own_llama)

    def kill_on_first_delta(_delta: str) -> None:
        own_llama.kill()

    with pytest.raises(ProviderError) as info:
        llm.generate(sql_request(max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S, on_delta=kill_on_first_delta))
    died = info.value
    assert died.code == ErrorCode.UPSTREAM_ERROR, died.message
    assert "mid-stream" in died.message and f"{own_llama.base_url}/chat/completions" in died.message
    # The prompt was read before it died: those tokens count.
    assert died.usage is not None and died.usage.tokens_input > 0

    with pytest.raises(ProviderError) as info:
        llm.generate(sql_request(max_tokens=MAX_TOKENS, timeout_s=10))
    down = info.value
    assert down.code == ErrorCode.UPSTREAM_ERROR
    assert "could not reach the LLM endpoint" in down.message and own_llama.base_url in down.message
    assert "Connect" in down.message and down.usage is None


def test_giving_up_on_a_call_frees_the_single_slot(llama: LlamaServer) -> None:
    llm = provider(llama, llm_output_mode="json_mode")
    started: list[str] = []
    with pytest.raises(ProviderError) as info:
        # Long enough to be still generating when the deadline passes; the first delta proves it started.
        llm.generate(sql_request(max_tokens=2000, timeout_s=4, temperature=1.0, on_delta=started.append))
    assert info.value.code == ErrorCode.MODEL_TIMEOUT, info.value.message
    # Closing the stream stopped the generation: the next call is served, not queued behind 2000 tokens.
    follow_up = provider(llama)
    response = follow_up.generate(sql_request(max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S))
    assert isinstance(response.output, SqlDraft)
    assert "Disconnected from client" in llama.output() or "disconnected" in llama.output().lower()


def test_a_prompt_beyond_the_context_window_is_named_not_disguised(own_llama: LlamaServer) -> None:
    # own_llama has a 2,048-token window; this prompt is longer. llama.cpp ends the stream without a finish
    # reason and says why only in its log.
    request = sql_request(max_tokens=MAX_TOKENS, timeout_s=TIMEOUT_S)
    request.inputs["question"] = "Which region sold most? " + "Consider every region and every quarter. " * 300
    with pytest.raises(ProviderError) as info:
        provider(own_llama).generate(request)
    assert info.value.code == ErrorCode.BAD_REQUEST, info.value.message
    assert "without output or a finish reason" in info.value.message and "context window" in info.value.message
    assert info.value.usage is not None and info.value.usage.tokens_input > 2048  # the prompt still counts
    # The server's log names the cause (written after the response, so it may take a moment to appear).
    deadline = time.monotonic() + 30
    while "exceed context window" not in own_llama.output() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "exceed context window" in own_llama.output()


def test_a_stream_another_request_interrupts_is_an_upstream_failure_not_the_models_answer(
    llama: LlamaServer,
) -> None:
    # llama.cpp's server (interrupt_requests, on by default) ends a running stream with [DONE] and no finish
    # reason as soon as another request waits for the model: any two jobs or users on one server.
    other = openai.OpenAI(base_url=llama.base_url, api_key="x", max_retries=0)
    interrupted: list[str] = []

    def interrupt_on_first_delta(_delta: str) -> None:
        if interrupted:
            return
        interrupted.append("sent")
        threading.Thread(
            target=lambda: other.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=1, timeout=TIMEOUT_S),
            daemon=True,
        ).start()

    # The grammar (auto mode) makes the reply start with the "sql" field, whose text reaches on_delta at once.
    with pytest.raises(ProviderError) as info:
        provider(llama).generate(
            sql_request(max_tokens=400, timeout_s=TIMEOUT_S, temperature=1.0, on_delta=interrupt_on_first_delta)
        )
    assert interrupted, info.value.message
    assert info.value.code == ErrorCode.UPSTREAM_ERROR, info.value.message
    assert "without a finish reason" in info.value.message and "not a valid" not in info.value.message
    assert info.value.usage is not None and info.value.usage.tokens_output > 0  # what it generated still counts
