"""Issue 26 over the fake server: a stream the server cut is not the model's answer, and deadlines hold.

llama.cpp's server ends a running stream with ``[DONE]`` and no finish reason when another request arrives, and
sends only ``: ping`` comments while it reads a long prompt; the fake does both on cue.
"""

from __future__ import annotations

import json
import math
import socket

import pytest

from shared.executors.runner import run_executor
from shared.jobs.contracts import RETRYABLE_CODES, ErrorCode, ProviderError
from shared.jobs.plan import SqlDraft
from shared.providers.clients import Clients
from shared.providers.llm.openai import OpenAIChatProvider, build_llm_provider
from shared.providers.llm.openai_errors import UNREACHABLE_RETRY_MS
from shared.providers.llm.usage import DEFAULT_FACTOR
from shared.runtime.settings import Settings
from tests.fakes.openai_server import CutStreamReply, FakeOpenAI, JsonReply, PingReply
from tests.providers.llm.helpers import SQL_DRAFT, sql_request
from tests.providers.llm.test_executors_over_fake import PLAN, _payload, clients  # noqa: F401 (fixture)

# A plan cut mid-JSON, as the server sent it before it dropped the request.
CUT_PLAN = ['{"steps": [{"id": "docs", "kind": "consult_rag", ', '"title": "Docs", "input": {"qu']


def _provider(base_url: str, api: str = "chat") -> OpenAIChatProvider:
    return build_llm_provider(Settings(llm_provider="openai", openai_base_url=base_url, llm_api=api))  # type: ignore[arg-type]


@pytest.mark.parametrize("ending", ["done", "drop"])
def test_a_stream_ended_without_a_finish_reason_is_an_upstream_failure(fake_openai: FakeOpenAI, ending: str) -> None:
    fake_openai.always(CutStreamReply(['{"sql": "SELECT region, SUM(amo'], ending=ending))  # type: ignore[arg-type]
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url).generate(sql_request())
    error = info.value
    assert error.code == ErrorCode.UPSTREAM_ERROR and error.code in RETRYABLE_CODES, error.message
    assert "EOF" not in error.message and "not a valid" not in error.message
    assert error.output is None  # nothing to show the model: it is not its answer
    # The prompt was read and part of an answer generated: both count.
    assert error.usage is not None and error.usage.tokens_input > 0 and error.usage.tokens_output > 0


def test_a_cut_stream_that_happens_to_be_valid_json_is_still_not_an_answer(fake_openai: FakeOpenAI) -> None:
    # The cut fell right after a complete object: without a finish reason it is still not the model's answer.
    fake_openai.always(CutStreamReply(['{"sql": "SELECT 1"}']))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url).generate(sql_request())
    assert info.value.code == ErrorCode.UPSTREAM_ERROR


def test_a_stream_with_no_chunk_at_all_stays_a_final_error_naming_the_context_window(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(CutStreamReply([], ending="nothing"))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url).generate(sql_request())
    assert info.value.code == ErrorCode.BAD_REQUEST and info.value.code not in RETRYABLE_CODES
    assert "without output or a finish reason" in info.value.message and "context window" in info.value.message


def test_a_cut_plan_is_retried_not_repaired(fake_openai: FakeOpenAI, clients: Clients) -> None:  # noqa: F811
    fake_openai.script(CutStreamReply(CUT_PLAN), task="plan")
    out = run_executor(_payload("plan", {"question": "What is the refund policy?"}), clients=clients)
    assert out["status"] == "failed" and out["error"]["code"] == "UPSTREAM_ERROR"
    # No rejected output: the policy's repair turn is only for the model's own invalid reply.
    assert not (out.get("result") or {}).get("rejected_output")
    fake_openai.always(JsonReply(PLAN), task="plan")
    again = run_executor(_payload("plan", {"question": "What is the refund policy?"}), clients=clients)
    assert again["status"] == "success", again


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_keep_alive_comments_do_not_stretch_the_deadline(fake_openai: FakeOpenAI, api: str) -> None:
    # 200 pings 0.05 s apart (10 s) before the answer; the call has 1 s. The httpx read timeout restarts at
    # every ping, so only the call's own watchdog can stop it: the server sees the client go long before its end.
    fake_openai.always(PingReply(count=200, every_s=0.05, then=JsonReply(SQL_DRAFT)))
    with pytest.raises(ProviderError) as info:
        _provider(fake_openai.base_url, api).generate(sql_request(timeout_s=1))
    assert info.value.code == ErrorCode.MODEL_TIMEOUT, info.value.message
    assert "within 1s" in info.value.message
    assert 0 < fake_openai.pings_sent < 200


def test_pings_within_the_deadline_are_harmless(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(PingReply(count=3, every_s=0.01, then=JsonReply(SQL_DRAFT)))
    response = _provider(fake_openai.base_url).generate(sql_request(timeout_s=30))
    assert response.output == SqlDraft.model_validate(SQL_DRAFT) and fake_openai.pings_sent == 3


def test_a_server_that_refuses_connections_is_retried_after_a_restart_s_worth() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with pytest.raises(ProviderError) as info:
        _provider(f"http://127.0.0.1:{port}/v1").generate(sql_request(timeout_s=5))
    assert info.value.code == ErrorCode.UPSTREAM_ERROR
    # With the policy's 3 tries, two waits of at least this outlast a local server's ~5 s restart.
    assert info.value.retry_after_ms == UNREACHABLE_RETRY_MS >= 5000


# --- Token counts: the server's when it reports them, a calibrated estimate when not ---------------------------


def test_usage_on_the_finishing_chunk_is_taken(fake_openai: FakeOpenAI) -> None:
    fake_openai.always(JsonReply(SQL_DRAFT, usage=(321, 45), usage_chunk="final"))
    response = _provider(fake_openai.base_url).generate(sql_request())
    assert (response.tokens_input, response.tokens_output, response.usage_estimated) == (321, 45, False)


def test_unreported_usage_is_estimated_high_then_calibrated_by_the_models_reported_counts(
    fake_openai: FakeOpenAI,
) -> None:
    provider = _provider(fake_openai.base_url)
    fake_openai.always(JsonReply(SQL_DRAFT, usage_chunk="none"))
    first = provider.generate(sql_request(model="m"))
    plain = math.ceil(len(fake_openai.requests[-1].system_text + "\n" + fake_openai.requests[-1].user_text) / 4)
    assert first.usage_estimated and first.tokens_input == math.ceil(plain * DEFAULT_FACTOR)
    # A call of the same model that the server counted: its counts were twice the text estimate.
    fake_openai.always(JsonReply(SQL_DRAFT, usage=(2 * plain, 2 * math.ceil(len(json.dumps(SQL_DRAFT)) / 4))))
    reported = provider.generate(sql_request(model="m"))
    assert not reported.usage_estimated and 1.9 < provider.calibration.factor("m") < 2.1
    fake_openai.always(JsonReply(SQL_DRAFT, usage_chunk="none"))
    again = provider.generate(sql_request(model="m"))
    assert again.usage_estimated and again.tokens_input == math.ceil(plain * provider.calibration.factor("m"))
    # Another model has learned nothing.
    assert provider.calibration.factor("other") == DEFAULT_FACTOR


def test_a_grammar_keeps_small_item_counts_so_a_repeated_step_cannot_run_to_max_tokens() -> None:
    from shared.executors.plan import SHOWN_MAX_STEPS, plan_output_model
    from shared.providers.llm.openai_schemas import grammar_safe, output_schema

    steps = grammar_safe(output_schema(plan_output_model()).full_schema)["properties"]["steps"]
    assert (steps["minItems"], steps["maxItems"]) == (1, SHOWN_MAX_STEPS)
    # Large counts and lengths go (a grammar would unroll them); small ones stay.
    assert grammar_safe({"type": "array", "maxItems": 500, "items": {"type": "string", "maxLength": 9000}}) == {
        "type": "array",
        "items": {"type": "string"},
    }
    assert grammar_safe({"type": "string", "maxLength": 9, "minLength": 1}) == {"type": "string", "maxLength": 9}
