"""Reading an OpenAI-compatible reply: chat and Responses streams, finish reasons, usage, raw output.

See ``shared.providers.llm.openai`` for what a cut stream or a missing finish reason means.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from shared.jobs.contracts import ErrorCode, ProviderError, Usage
from shared.jobs.tokens import estimate_tokens
from shared.providers.interfaces import LLMRequest
from shared.providers.llm.deadline import events_within
from shared.providers.llm.usage import TokenCalibration

if TYPE_CHECKING:
    pass
from shared.providers.llm.openai_errors import failed_response_error


@dataclass
class RawOutput:
    """What came back, before validation."""

    text: str
    finish: str | None = None
    refusal: str | None = None
    tool_name: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    model: str | None = None
    usage_seen: bool = False
    usage_estimated: bool = False
    # Set as the call goes, so a failure mid-call can still count what was spent.
    prompt_text: str = ""
    opened: bool = False
    received: list[str] = field(default_factory=list)

    def estimate_usage(self, calibration: TokenCalibration, model: str) -> None:
        """Count tokens from the text when the server reported none (it ignored ``include_usage``); else learn
        from its count how this model's estimates compare (usage.py)."""
        output = self.text or "".join(self.received)
        if self.usage_seen:
            calibration.learn(model, (self.prompt_text, output), (self.tokens_in, self.tokens_out))
            return
        self.tokens_in = calibration.estimate(model, self.prompt_text)
        self.tokens_out = calibration.estimate(model, output)
        self.usage_estimated = True

    def usage(self) -> Usage:
        """What this call spent, as far as is known."""
        return Usage(tokens_input=self.tokens_in, tokens_output=self.tokens_out, estimated=self.usage_estimated)


def with_raw_control_characters(text: str, exc: ValidationError) -> Any | None:
    """The JSON a grammar let through with raw control characters (a newline) inside strings, parsed; else None.

    llama-cpp-python's JSON grammar allows them and Gemma 3 270M wrote one into an answer; they are content, not
    structure, so the reply is read as Python's lenient parser reads it. Any other invalid JSON stays invalid.
    """
    if not any(err["type"] == "json_invalid" and "control character" in err["msg"] for err in exc.errors()):
        return None
    try:
        return json.loads(text, strict=False)
    except ValueError:
        return None


def strip_fences(text: str) -> str:
    """The reply without a Markdown code fence around it."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = re.sub(r"^```[a-zA-Z]*\s*", "", stripped)
        stripped = re.sub(r"\s*```$", "", stripped)
    return stripped


def _timed_out(model: str, timeout_s: float) -> Callable[[], ProviderError]:
    """The error of a call whose overall deadline passed while its answer streamed."""
    return lambda: ProviderError(ErrorCode.MODEL_TIMEOUT, f"model {model!r} did not finish within {timeout_s:g}s")


@dataclass
class _ChatParts:
    """The pieces of a chat stream's first choice, gathered as the chunks come."""

    content: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)


def read_chat_stream(
    stream: Any,
    on_delta: Callable[[str], None],
    deadline: float,
    model: str,
    request: LLMRequest[Any],
    raw: RawOutput,
) -> RawOutput:
    """Read a chat completions stream into ``raw``: text, tool calls, finish reason and usage, within the deadline."""
    timeout_s, max_tokens = request.timeout_s, request.max_tokens
    parts = _ChatParts()
    chunks = 0
    with stream:
        for chunk in events_within(stream, deadline, _timed_out(model, timeout_s)):
            chunks += 1
            if chunk.model:
                raw.model = chunk.model
            if chunk.usage is not None:
                _take_chat_usage(raw, chunk.usage)
            for choice in chunk.choices:
                if choice.index == 0:
                    _read_chat_choice(choice, parts, on_delta, raw)
    raw.text = "".join(parts.content) or "".join(parts.arguments)
    if parts.content:
        raw.tool_name = None
    raw.refusal = "".join(parts.refusal) or None
    if raw.finish is None:
        raise _unfinished(raw, chunks, model, max_tokens)
    return raw


def _unfinished(raw: RawOutput, chunks: int, model: str, max_tokens: int) -> ProviderError:
    """A chat stream that ended without a finish reason: the server stopped the response, the model did not.

    With chunks sent, the answer was cut (llama.cpp's server ends a running stream with ``[DONE]`` and no finish
    reason whenever another request arrives, its default ``interrupt_requests``; a proxy or a dying server may
    drop it): an upstream failure, retried, never judged as the model's output. With nothing sent, the server
    refused the request before generating (llama.cpp does when the prompt plus max_tokens exceeds its context
    window, and says so only in its log): the same request fails the same way, so it is final.
    """
    if not chunks:
        return ProviderError(
            ErrorCode.BAD_REQUEST,
            f"the LLM server ended the response for {model!r} without output or a finish reason; see the "
            f"server's log (a prompt of ~{estimate_tokens(raw.prompt_text)} tokens, plus max_tokens={max_tokens}, "
            "may exceed the model's context window)",
        )
    return ProviderError(
        ErrorCode.UPSTREAM_ERROR,
        f"the LLM server ended the stream for {model!r} without a finish reason after {len(raw.text)} characters: "
        "the response was cut upstream (llama.cpp's server does this to a running request when another one "
        "arrives, unless started with --interrupt_requests false), not finished by the model",
    )


def _take_chat_usage(raw: RawOutput, usage: Any) -> None:
    """Record the token counts a chat completion (or its last stream chunk) reported."""
    raw.tokens_in = usage.prompt_tokens or 0
    raw.tokens_out = usage.completion_tokens or 0
    raw.usage_seen = True


def _read_chat_choice(choice: Any, parts: _ChatParts, on_delta: Callable[[str], None], raw: RawOutput) -> None:
    """Add one streamed delta of the first choice: its text, refusal, tool call and finish reason."""
    delta = choice.delta
    if delta.content:
        parts.content.append(delta.content)
        raw.received.append(delta.content)
        on_delta(delta.content)
    if delta.refusal:
        parts.refusal.append(delta.refusal)
    for call in delta.tool_calls or []:
        function = call.function
        if function is None:
            continue
        if function.name:
            raw.tool_name = raw.tool_name or function.name
        if function.arguments:
            parts.arguments.append(function.arguments)
            raw.received.append(function.arguments)
            on_delta(function.arguments)
    if choice.finish_reason:
        raw.finish = choice.finish_reason


def _responses_output(response: Any) -> RawOutput:
    raw = RawOutput(text="", model=getattr(response, "model", None) or None)
    usage = getattr(response, "usage", None)
    if usage is not None:
        raw.tokens_in = usage.input_tokens or 0
        raw.tokens_out = usage.output_tokens or 0
        raw.usage_seen = True
    status = getattr(response, "status", None)
    if status == "failed":
        error = getattr(response, "error", None)
        raise failed_response_error(getattr(error, "code", None), getattr(error, "message", "unknown error"))
    if status == "incomplete":
        details = getattr(response, "incomplete_details", None)
        reason = getattr(details, "reason", None)
        raw.finish = "content_filter" if reason == "content_filter" else "length"
    texts: list[str] = []
    refusals: list[str] = []
    for item in _items(getattr(response, "output", None)):
        if item.type == "message":
            for part in _items(getattr(item, "content", None)):
                if part.type == "output_text":
                    texts.append(part.text)
                elif part.type == "refusal":
                    refusals.append(part.refusal)
        elif item.type == "function_call" and raw.tool_name is None:
            raw.tool_name = item.name
            raw.text = item.arguments
    if texts:
        raw.text = "".join(texts)
        raw.tool_name = None
    raw.refusal = "".join(refusals) or None
    return raw


def _items(value: Iterable[Any] | None) -> Iterable[Any]:
    return value or ()


def read_responses_stream(
    stream: Any, on_delta: Callable[[str], None], deadline: float, model: str, timeout_s: float, holder: RawOutput
) -> RawOutput:
    """Read a Responses API stream into ``holder``: text, usage and the end event, within the deadline."""
    text: list[str] = []
    arguments: list[str] = []
    final: RawOutput | None = None
    tool_name: str | None = None
    with stream:
        for event in events_within(stream, deadline, _timed_out(model, timeout_s)):
            kind = getattr(event, "type", "")
            if kind == "response.output_text.delta":
                text.append(event.delta)
                holder.received.append(event.delta)
                on_delta(event.delta)
            elif kind == "response.function_call_arguments.delta":
                arguments.append(event.delta)
                holder.received.append(event.delta)
                on_delta(event.delta)
            elif kind == "response.output_item.added" and getattr(event.item, "type", "") == "function_call":
                tool_name = tool_name or event.item.name
            elif kind == "response.refusal.delta":
                continue
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                final = _responses_output(event.response)
            elif kind == "error":
                raise failed_response_error(getattr(event, "code", None), getattr(event, "message", "stream error"))
    if final is None:
        raise ProviderError(ErrorCode.UPSTREAM_ERROR, "the Responses stream ended without a final response")
    # The buffered deltas are the output; the final event is only read for usage and status.
    if text:
        final.text = "".join(text)
        final.tool_name = None
    elif arguments:
        final.text = "".join(arguments)
        final.tool_name = final.tool_name or tool_name
    final.prompt_text = holder.prompt_text
    final.opened = True
    final.received = holder.received
    return final
