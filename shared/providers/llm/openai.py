"""The real LLM provider: Azure OpenAI (v1 endpoint), OpenAI, or any OpenAI-compatible server.

One class, ``OpenAIChatProvider``, talks to all three through the plain ``openai.OpenAI`` client
(Azure OpenAI via ``base_url=<endpoint>/openai/v1/``; no ``api-version``, no Azure-specific client).
``build_llm_provider(settings)`` picks the endpoint, the credential and the API from settings and
makes no network or credential call; the first token is fetched on the first request. Its parts: output schemas
(``openai_schemas``), error mapping (``openai_errors``), the streamed text field (``openai_stream``), reading
replies (``openai_replies``).

Decisions (documented here because callers depend on them):

- API: Chat Completions by default; the Responses API with ``LLM_API=responses`` (``store=false``,
  stateless, so the two are interchangeable).
- Structured output (``LLM_OUTPUT_MODE``): ``auto`` (default) asks for a JSON schema
  (``response_format``/``text.format`` of type ``json_schema``, ``strict`` when the pydantic schema can
  be made strict, see ``output_schema``); when the endpoint refuses it (judged by the error's content,
  any 4xx/5xx: llama.cpp answers a 500), it falls back, remembered per model of this provider (one
  provider per endpoint): on OpenAI-compatible servers to llama.cpp's grammar-constrained
  ``{"type": "json_object", "schema": ...}``, then to validated JSON mode (``json_object`` plus the
  schema in the system message). ``json_schema`` and ``json_mode``
  force one; ``tool_call`` forces a function call whose parameters are the schema (for servers that
  do tools but not response formats). Whatever the mode, a reply carrying a call to that function
  instead of content is accepted; a call to any other tool is a BAD_REQUEST.
- An agent's output schema (``request.output_schema``, see shaped.py): the same modes carry a schema whose
  text field is that object (``shaped_output_schema``; strict only when the agent's schema requires every
  property), OpenAI-compatible servers also get it in the system message, and the reply's object is checked
  against the agent's schema before its JSON text fills the field. A refusal that blames the schema, or comes
  in a mode this model served before, is ``OUTPUT_SCHEMA_REFUSED`` (not a refused mode: the model keeps it).
- Output that is not valid JSON or does not validate against ``request.output_type`` is a
  ``ProviderError(BAD_REQUEST)``: not retryable, because the same prompt at the same temperature
  mostly repeats the same output; the orchestrator may fall back to another model. Output cut at
  ``max_tokens`` is BAD_REQUEST too, saying so, also when the server hides it behind another
  ``finish_reason`` (llama.cpp says "tool_calls"): unparseable output at the token limit is a cut.
  A failed call's usage rides on the ``ProviderError`` (``usage``, ``model_used``): it was spent.
  A refusal or ``finish_reason=content_filter`` is CONTENT_FILTERED.
- Errors: 429 → RATE_LIMITED (``retry_after_ms`` from ``retry-after-ms``, else ``retry-after``
  seconds or HTTP date); timeouts (the SDK's, a 408, or the call's overall deadline while
  streaming) → MODEL_TIMEOUT; Azure's 400 ``content_filter`` → CONTENT_FILTERED; 401/403 and
  credential failures → AUTH_FAILED; a 404 on the Responses API → CONFIG_ERROR naming the path and
  ``LLM_API=chat``; other 4xx → BAD_REQUEST; 5xx, connection errors (naming the URL and the cause, and
  whether the stream had started; retried no sooner than ``UNREACHABLE_RETRY_MS``, to outlast a restart),
  failed Responses and errors inside a stream → UPSTREAM_ERROR. A chat stream that ends without a finish
  reason (``[DONE]`` or a dropped connection) was cut by the server, not finished by the model: UPSTREAM_ERROR
  (retried), never validated as output; with no chunk at all it is BAD_REQUEST naming the context window
  (llama.cpp's refusal of a too-long prompt).
  The SDK's own retries are off (``max_retries=0``): the orchestrator owns retries.
- ``model_used``: on Azure, the deployment name that was called (Azure reports the underlying model
  name in ``model``, which is not what a user configures or allow-lists); elsewhere the ``model``
  the response reports (for OpenAI a dated snapshot, priced by its prefix), else the requested one.
- Streaming: every call streams (SSE), so giving up (deadline, timeout) closes the connection and a
  single-slot local server stops generating instead of queueing the retry. ``timeout_s`` is the whole call's
  deadline whatever the server sends: keep-alive comments restart httpx's read timeout, so a watchdog cuts the
  connection when it passes (deadline.py). The output is buffered
  and the JSON parsed once, at the end. When the stream reports no usage (llama.cpp ignores
  ``include_usage``), tokens are estimated from the text, calibrated per model (usage.py), and the response
  says so (``usage_estimated``).
  With ``request.on_delta`` set, ``on_delta`` gets prose, like the offline provider's: the decoded text of
  the output type's first ``str`` field (``AnswerResult.answer``) as it arrives, picked out of the
  JSON deltas by an incremental scanner (``JsonTextFieldStream``); output types without a ``str``
  field get the raw JSON deltas. Chat streams ask for usage with ``stream_options.include_usage``.
- Capability fallbacks (each once per provider and model, remembered): refused output modes (in
  "auto" mode, above); ``temperature`` rejected (reasoning models take only the default) → sent no more for
  that model. Both re-send within the same call's deadline; any other 400 is final.
- Token limit parameter: ``max_completion_tokens`` for Azure OpenAI and OpenAI, ``max_tokens`` for
  other OpenAI-compatible servers (Ollama, LM Studio, vLLM, llama.cpp), which know that one best."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
import openai
from azure.core.exceptions import ClientAuthenticationError
from pydantic import ValidationError

from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.interfaces import LLMRequest, LLMResponse, T
from shared.providers.llm.prompts import PromptError, RenderedPrompt, render_prompt
from shared.providers.llm.shaped import shape_reply
from shared.providers.llm.usage import TokenCalibration

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.runtime.settings import Settings
from shared.providers.llm.openai_errors import (
    ApiKind,
    EndpointKind,
    OutputMode,
    WireMode,
    map_openai_error,
    refuses_output_mode,
    rejects_temperature,
)
from shared.providers.llm.openai_replies import (
    RawOutput,
    read_chat_stream,
    read_responses_stream,
    strip_fences,
    with_raw_control_characters,
)
from shared.providers.llm.openai_schemas import (
    OutputSchema,
    format_instructions,
    grammar_safe,
    names_bad_schema,
    output_schema,
    schema_refused,
    shaped_output_schema,
)
from shared.providers.llm.openai_stream import delta_sink, stream_field

logger = logging.getLogger(__name__)


AZURE_OPENAI_SCOPE = "https://cognitiveservices.azure.com/.default"


OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


_AUTO_CHAIN: dict[str, tuple[WireMode, ...]] = {
    "azure_openai": ("json_schema", "json_mode"),
    "openai": ("json_schema", "json_mode"),
    "openai_compatible": ("json_schema", "json_object_schema", "json_mode"),
}


class OpenAIChatProvider:
    """An ``LLMProvider`` over the ``openai`` SDK (Chat Completions or Responses)."""

    def __init__(
        self,
        client: openai.OpenAI,
        *,
        default_model: str,
        endpoint_kind: EndpointKind,
        api: ApiKind = "chat",
        output_mode: OutputMode = "auto",
    ) -> None:
        """Wrap a configured client; ``client.max_retries`` should be 0."""
        self.client = client
        self.default_model = default_model
        self.endpoint_kind = endpoint_kind
        self.name = "azure_openai" if endpoint_kind == "azure_openai" else "openai"
        self.api = api
        self.output_mode = output_mode
        self.token_param = "max_tokens" if endpoint_kind == "openai_compatible" else "max_completion_tokens"
        # Output modes this endpoint refused, per model ("auto" mode); later calls skip them. The provider
        # is built per endpoint, so the key is (endpoint, model).
        self.refused_modes: dict[str, set[WireMode]] = {}
        # Output modes the endpoint accepted, per model: a later refusal in such a mode, for an agent's output
        # schema, is about that schema (OUTPUT_SCHEMA_REFUSED), not a mode to give up for the model.
        self.served_modes: dict[str, set[WireMode]] = {}
        # Reasoning models (o-series, gpt-5) reject any temperature but the default.
        self.no_temperature_models: set[str] = set()
        # How each model's token counts compare with the text estimate, for calls whose server reports none.
        self.calibration = TokenCalibration()

    @property
    def json_schema_unsupported(self) -> bool:
        """Whether the endpoint refused ``json_schema`` for any model."""
        return any("json_schema" in modes for modes in self.refused_modes.values())

    def generate(self, request: LLMRequest[T]) -> LLMResponse[T]:
        """Render the task's prompt, call the model, and validate its output."""
        model = request.model or self.default_model
        try:
            rendered = render_prompt(request.task, request.inputs)
        except (PromptError, ValueError) as exc:
            raise ProviderError(ErrorCode.INVALID_INPUT, f"cannot build the {request.task} prompt: {exc}") from exc
        if request.output_schema is None:
            schema = output_schema(request.output_type)
        else:
            schema = shaped_output_schema(request.output_type, request.output_schema)
        deadline = time.monotonic() + request.timeout_s
        raw: RawOutput | None = None
        # At most one adjustment per capability (each refused output mode, temperature), then the error stands.
        for _ in range(5):
            mode = self._mode(model)
            holder = RawOutput(text="")
            try:
                raw = self._call(request, rendered, schema, mode, model, deadline, holder)
                self.served_modes.setdefault(model, set()).add(mode)
                break
            except openai.APIStatusError as exc:
                self._adjust(exc, request, mode, model, holder)
            except (openai.OpenAIError, httpx.HTTPError, ClientAuthenticationError, ProviderError) as exc:
                raise self._failed(exc, request, model, holder) from exc
        if raw is None:
            raise ProviderError(ErrorCode.BAD_REQUEST, f"the LLM endpoint kept rejecting the request for {model!r}")
        model_used = model if self.endpoint_kind == "azure_openai" else (raw.model or model)
        raw.estimate_usage(self.calibration, model)
        if raw.usage_estimated:
            logger.info("the LLM endpoint reported no usage for %s; tokens are estimated from the text", model_used)
        try:
            output = self._validate(raw, request, schema, model)
        except ProviderError as exc:
            # The output was generated (and billed) even though it is unusable.
            exc.usage = raw.usage()
            exc.model_used = model_used
            raise
        return LLMResponse(
            output=output,
            tokens_input=raw.tokens_in,
            tokens_output=raw.tokens_out,
            model_used=model_used,
            usage_estimated=raw.usage_estimated,
        )

    def _adjust(
        self, exc: openai.APIStatusError, request: LLMRequest[Any], mode: WireMode, model: str, holder: RawOutput
    ) -> None:
        """Learn from a refused call what to send next time (an output mode, no temperature), or raise its error."""
        chain = _AUTO_CHAIN[self.endpoint_kind]
        if request.output_schema is not None and self._refuses_schema(exc, mode, model):
            raise self._failed(schema_refused(exc), request, model, holder) from exc
        if self.output_mode == "auto" and mode != chain[-1] and refuses_output_mode(exc, mode):
            logger.warning(
                "LLM endpoint refused %s output for %s (%s %s); falling back from now on",
                mode,
                model,
                exc.status_code,
                exc.message[:200],
            )
            self.refused_modes.setdefault(model, set()).add(mode)
        elif exc.status_code == 400 and rejects_temperature(exc) and model not in self.no_temperature_models:
            logger.warning("model %s accepts no temperature; sending none from now on", model)
            self.no_temperature_models.add(model)
        else:
            raise self._failed(exc, request, model, holder) from exc

    def _refuses_schema(self, exc: openai.APIStatusError, mode: WireMode, model: str) -> bool:
        """Whether a refusal is about an agent's output schema rather than the output mode.

        Only modes that send the schema can be refused for it. The endpoint blames the schema in so many words,
        or it has served this mode for this model before (so the mode itself works): either way, giving up the
        mode would not help, and another schema would work. Otherwise it counts as a refused mode, as usual.
        """
        if mode == "json_mode" or not refuses_output_mode(exc, mode):
            return False
        return names_bad_schema(exc) or mode in self.served_modes.get(model, set())

    def _failed(self, exc: BaseException, request: LLMRequest[Any], model: str, holder: RawOutput) -> ProviderError:
        """Map a failed call and attach what it spent: a stream that opened had its prompt read."""
        error = map_openai_error(exc, model=model, timeout_s=request.timeout_s, api=self.api, started=holder.opened)
        if holder.opened and error.usage is None:
            holder.estimate_usage(self.calibration, model)
            error.usage = holder.usage()
            error.model_used = holder.model or model
        return error

    def _mode(self, model: str) -> WireMode:
        if self.output_mode != "auto":
            return self.output_mode
        refused = self.refused_modes.get(model, set())
        chain = _AUTO_CHAIN[self.endpoint_kind]
        return next((mode for mode in chain if mode not in refused), chain[-1])

    def _validate(self, raw: RawOutput, request: LLMRequest[T], schema: OutputSchema, model: str) -> T:
        if raw.refusal:
            raise ProviderError(ErrorCode.CONTENT_FILTERED, f"the model refused: {raw.refusal}"[:1500])
        if raw.finish == "content_filter":
            raise ProviderError(ErrorCode.CONTENT_FILTERED, f"the output of {model!r} was blocked by a content filter")
        if raw.tool_name is not None and raw.tool_name != _tool_name(request):
            raise ProviderError(ErrorCode.BAD_REQUEST, f"the model called an unknown tool {raw.tool_name!r}")
        cut = f"the output of {model!r} was cut at max_tokens={request.max_tokens}; raise constraints.max_tokens"
        if raw.finish == "length":
            raise ProviderError(ErrorCode.BAD_REQUEST, cut)
        text = strip_fences(raw.text)
        if request.output_schema is not None:
            text = _shaped_text(text, request, request.output_schema, model)
        if not text:
            raise ProviderError(ErrorCode.BAD_REQUEST, f"{model!r} returned no output for {request.task}")
        try:
            return request.output_type.model_validate_json(text)
        except ValidationError as exc:
            relaxed = with_raw_control_characters(text, exc)
            if relaxed is not None:
                try:
                    return request.output_type.model_validate(relaxed)
                except ValidationError:
                    pass
            errors = exc.errors(include_url=False)
            ended_early = any(err["type"] == "json_invalid" and "EOF" in err["msg"] for err in errors)
            # Some servers (llama.cpp) report finish_reason "tool_calls" or "stop" for an output that hit
            # the limit: the token count tells. Without usage the count is an estimate, so JSON that ends
            # early near the limit counts as cut.
            # (characters/4 undercounts JSON on small-vocabulary models by up to half).
            at_limit = raw.tokens_out >= request.max_tokens
            if (raw.usage_seen and at_limit) or (ended_early and raw.tokens_out >= request.max_tokens * 0.5):
                raise ProviderError(
                    ErrorCode.BAD_REQUEST, cut + f" (the JSON ends early after ~{raw.tokens_out} tokens)"
                ) from exc
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in errors[:3]
            )
            raise ProviderError(
                ErrorCode.BAD_REQUEST,
                f"{model!r} returned output that is not a valid {schema.name}: {problems}"[:1500],
                output=text,
            ) from exc

    def _call(
        self,
        request: LLMRequest[T],
        rendered: RenderedPrompt,
        schema: OutputSchema,
        mode: WireMode,
        model: str,
        deadline: float,
        holder: RawOutput,
    ) -> RawOutput:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProviderError(ErrorCode.MODEL_TIMEOUT, f"no time left for {model!r} within {request.timeout_s:g}s")
        shaped = request.output_schema is not None
        # The Responses API has no place for llama.cpp's schema: it sends plain JSON mode, the prompt the schema.
        shown: WireMode = "json_mode" if mode == "json_object_schema" and self.api == "responses" else mode
        system = rendered.system + format_instructions(schema, shown, self.endpoint_kind, shaped)
        holder.prompt_text = system + "\n" + rendered.user
        # Every call streams, even when nobody watches the text: giving up (deadline, timeout) then closes
        # the connection, and a server that notices (llama.cpp) stops generating instead of making the
        # retry queue behind an abandoned request.
        sink = delta_sink(request, request.on_delta) if request.on_delta is not None else _ignore
        if self.api == "responses":
            return self._responses(
                request, system, rendered.user, schema, mode, model, remaining, deadline, holder, sink
            )
        return self._chat(request, system, rendered.user, schema, mode, model, remaining, deadline, holder, sink)

    # --- Chat Completions ---

    def _chat(
        self,
        request: LLMRequest[T],
        system: str,
        user: str,
        schema: OutputSchema,
        mode: WireMode,
        model: str,
        timeout: float,
        deadline: float,
        holder: RawOutput,
        sink: Callable[[str], None],
    ) -> RawOutput:
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            self.token_param: request.max_tokens,
            "timeout": timeout,
        }
        if model not in self.no_temperature_models:
            kwargs["temperature"] = request.temperature
        if mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "schema": schema.schema, "strict": schema.strict},
            }
        elif mode == "json_object_schema":
            # llama.cpp's shape: the server compiles the schema to a grammar that constrains sampling.
            kwargs["response_format"] = {"type": "json_object", "schema": grammar_safe(schema.full_schema)}
        elif mode == "json_mode":
            kwargs["response_format"] = {"type": "json_object"}
        elif mode == "tool_call":
            name = _tool_name(request)
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": f"Return the result of the {request.task} task.",
                        "parameters": schema.schema,
                        "strict": schema.strict,
                    },
                }
            ]
            kwargs["tool_choice"] = {"type": "function", "function": {"name": name}}
        stream = self.client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
        holder.opened = True
        return read_chat_stream(stream, sink, deadline, model, request, holder)

    # --- Responses ---

    def _responses(
        self,
        request: LLMRequest[T],
        system: str,
        user: str,
        schema: OutputSchema,
        mode: WireMode,
        model: str,
        timeout: float,
        deadline: float,
        holder: RawOutput,
        sink: Callable[[str], None],
    ) -> RawOutput:
        kwargs: dict[str, Any] = {
            "model": model,
            "instructions": system,
            "input": [{"role": "user", "content": user}],
            "max_output_tokens": request.max_tokens,
            "store": False,
            "timeout": timeout,
        }
        if model not in self.no_temperature_models:
            kwargs["temperature"] = request.temperature
        if mode == "json_schema":
            kwargs["text"] = {
                "format": {"type": "json_schema", "name": schema.name, "schema": schema.schema, "strict": schema.strict}
            }
        elif mode in ("json_mode", "json_object_schema"):
            kwargs["text"] = {"format": {"type": "json_object"}}
        elif mode == "tool_call":
            name = _tool_name(request)
            kwargs["tools"] = [
                {
                    "type": "function",
                    "name": name,
                    "description": f"Return the result of the {request.task} task.",
                    "parameters": schema.schema,
                    "strict": schema.strict,
                }
            ]
            kwargs["tool_choice"] = {"type": "function", "name": name}
        stream = self.client.responses.create(stream=True, **kwargs)
        holder.opened = True
        return read_responses_stream(stream, sink, deadline, model, request.timeout_s, holder)


def _shaped_text(text: str, request: LLMRequest[Any], agent_schema: dict[str, Any], model: str) -> str:
    """The reply with the agent's object checked and put in the text field as JSON (see ``shaped.py``).

    Text that is not a JSON object is left as it is: the output type's validation reports it (cut or invalid).
    """
    try:
        data = json.loads(text)
    except ValueError:
        return text
    field = stream_field(request.output_type)
    if not isinstance(data, dict) or field is None:
        return text
    return json.dumps(shape_reply(data, field, agent_schema, model, text), ensure_ascii=False)


def _ignore(_delta: str) -> None:
    """The sink of a call nobody watches (it still streams, see ``_call``)."""


def _tool_name(request: LLMRequest[Any]) -> str:
    return f"return_{request.task.value}"


def azure_v1_base_url(endpoint: str) -> str:
    """``https://<resource>.openai.azure.com`` (with or without the path) → ``.../openai/v1/``."""
    base = endpoint.strip().rstrip("/")
    if base.endswith("/openai/v1"):
        return base + "/"
    if base.endswith("/openai"):
        return base + "/v1/"
    return base + "/openai/v1/"


def build_llm_provider(settings: Settings, *, credential: TokenCredential | None = None) -> OpenAIChatProvider:
    """The provider for ``settings.llm_provider`` ("azure_openai" or "openai"); no network at build.

    Azure OpenAI uses ``AZURE_OPENAI_API_KEY`` when set, else a bearer-token provider over
    ``credential`` (default: ``DefaultAzureCredential``, with ``AZURE_CLIENT_ID`` as the managed
    identity). "openai" with ``OPENAI_BASE_URL`` is any OpenAI-compatible server (a key is optional).
    Raises ``ProviderError(CONFIG_ERROR)`` when a required setting is missing.
    """
    if settings.llm_provider == "azure_openai":
        if not settings.azure_openai_endpoint:
            raise ProviderError(ErrorCode.CONFIG_ERROR, "LLM_PROVIDER=azure_openai needs AZURE_OPENAI_ENDPOINT")
        api_key: str | Callable[[], str]
        if settings.azure_openai_api_key is not None:
            api_key = settings.azure_openai_api_key.get_secret_value()
            auth = "api key"
        else:
            from azure.identity import get_bearer_token_provider

            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
            api_key = get_bearer_token_provider(credential, AZURE_OPENAI_SCOPE)
            auth = f"Entra ID token ({type(credential).__name__})"
        base_url = azure_v1_base_url(settings.azure_openai_endpoint)
        client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0)
        logger.info(
            "LLM: Azure OpenAI at %s, deployment %s, auth %s, api %s",
            base_url,
            settings.azure_openai_chat_deployment,
            auth,
            settings.llm_api,
        )
        return OpenAIChatProvider(
            client,
            default_model=settings.azure_openai_chat_deployment,
            endpoint_kind="azure_openai",
            api=settings.llm_api,
            output_mode=settings.llm_output_mode,
        )
    if settings.llm_provider == "openai":
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key is not None else None
        if settings.openai_base_url:
            # Local servers (Ollama, LM Studio, vLLM, llama.cpp) ignore the key, but the SDK needs one.
            client = openai.OpenAI(api_key=key or "not-needed", base_url=settings.openai_base_url, max_retries=0)
            kind: EndpointKind = "openai_compatible"
        else:
            if key is None:
                raise ProviderError(
                    ErrorCode.CONFIG_ERROR, "LLM_PROVIDER=openai needs OPENAI_API_KEY or OPENAI_BASE_URL"
                )
            client = openai.OpenAI(api_key=key, base_url=OPENAI_DEFAULT_BASE_URL, max_retries=0)
            kind = "openai"
        logger.info("LLM: %s at %s, model %s, api %s", kind, client.base_url, settings.openai_model, settings.llm_api)
        return OpenAIChatProvider(
            client,
            default_model=settings.openai_model,
            endpoint_kind=kind,
            api=settings.llm_api,
            output_mode=settings.llm_output_mode,
        )
    raise ProviderError(
        ErrorCode.CONFIG_ERROR,
        f"LLM_PROVIDER={settings.llm_provider} is not served by the OpenAI provider (use the offline LLM)",
    )
