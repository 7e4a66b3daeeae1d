"""Streaming: deltas reach on_delta as they arrive, the text is parsed once, usage comes from the stream."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from shared.jobs.contracts import AnswerResult, ErrorCode, ProviderError
from shared.providers.llm.openai import OpenAIChatProvider, build_llm_provider
from shared.runtime.settings import Settings
from tests.fakes.openai_server import FakeOpenAI, JsonReply, StreamErrorReply
from tests.providers.llm.helpers import ANSWER, PLAN, SQL_DRAFT, answer_request, plan_request, sql_request

APIS = ["chat", "responses"]


def _provider(fake: FakeOpenAI, api: str, mode: str = "auto") -> OpenAIChatProvider:
    settings = Settings(llm_provider="openai", openai_base_url=fake.base_url, llm_api=api, llm_output_mode=mode)  # type: ignore[arg-type]
    return build_llm_provider(settings)


@pytest.mark.parametrize("api", APIS)
def test_answer_streams_deltas_and_parses_the_buffered_text(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"]
) -> None:
    fake_openai.always(JsonReply(ANSWER, usage=(900, 120), chunks=40), task="write_answer")
    deltas: list[str] = []
    response = _provider(fake_openai, api).generate(answer_request(on_delta=deltas.append))
    assert response.output == AnswerResult.model_validate(ANSWER)
    # The user sees the answer text grow, not JSON; it arrives in several pieces.
    assert "".join(deltas) == ANSWER["answer"]
    assert len(deltas) >= 5
    assert (response.tokens_input, response.tokens_output) == (900, 120)
    [request] = fake_openai.requests
    assert request.stream and request.format_kind == "json_schema"
    if api == "chat":
        assert request.body["stream_options"] == {"include_usage": True}
    assert fake_openai.failures == []


@pytest.mark.parametrize("api", APIS)
def test_streamed_tool_call_arguments_are_the_output(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"]
) -> None:
    fake_openai.always(JsonReply(SQL_DRAFT, expect="tool_call", chunks=3))
    deltas: list[str] = []
    response = _provider(fake_openai, api, mode="tool_call").generate(sql_request(on_delta=deltas.append))
    assert response.output.sql == SQL_DRAFT["sql"]
    assert "".join(deltas) == SQL_DRAFT["sql"]  # the first str field of SqlDraft


@pytest.mark.parametrize("api", APIS)
def test_outputs_without_a_text_field_stream_raw_json(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"]
) -> None:
    fake_openai.always(JsonReply(PLAN, chunks=5))
    deltas: list[str] = []
    response = _provider(fake_openai, api).generate(plan_request(on_delta=deltas.append))
    assert len(response.output.steps) == 3
    assert len(deltas) == 5 and json.loads("".join(deltas)) == PLAN


@pytest.mark.parametrize("api", APIS)
def test_an_error_inside_the_stream_is_an_upstream_error(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"]
) -> None:
    fake_openai.always(StreamErrorReply(['{"answer": "Nor', "th"], code="server_error"))
    deltas: list[str] = []
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai, api).generate(answer_request(on_delta=deltas.append))
    assert info.value.code == ErrorCode.UPSTREAM_ERROR
    assert deltas == ["Nor", "th"]  # what arrived before the failure was still shown


@pytest.mark.parametrize("api", APIS)
def test_content_filter_at_the_end_of_a_stream(fake_openai: FakeOpenAI, api: Literal["chat", "responses"]) -> None:
    fake_openai.always(JsonReply(ANSWER, finish_reason="content_filter"))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai, api).generate(answer_request(on_delta=lambda _: None))
    assert info.value.code == ErrorCode.CONTENT_FILTERED


@pytest.mark.parametrize("api", APIS)
def test_a_stream_slower_than_the_timeout_is_a_model_timeout(
    fake_openai: FakeOpenAI, api: Literal["chat", "responses"]
) -> None:
    # Each chunk arrives well within the read timeout, but the whole answer takes longer than allowed.
    fake_openai.always(JsonReply(ANSWER, chunks=8, chunk_delay_s=0.15))
    deltas: list[str] = []
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai, api).generate(answer_request(on_delta=deltas.append, timeout_s=0.5))
    assert info.value.code == ErrorCode.MODEL_TIMEOUT and info.value.code.value == "MODEL_TIMEOUT"
    assert 0 < len(deltas) < 8
