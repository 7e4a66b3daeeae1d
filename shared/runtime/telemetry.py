"""OpenTelemetry for jobs: one trace per job, one span per executor, logs with the same dimensions.

Nothing happens at import. ``configure_telemetry()`` runs once, on first use:

* ``APPLICATIONINSIGHTS_CONNECTION_STRING`` set: export through azure-monitor-opentelemetry, with an
  Entra token when ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` says ``Authorization=AAD`` (the
  Bicep disables local auth on the Application Insights component).
* else ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: export OTLP if an OTLP exporter package is installed
  (none is by default; then a warning is logged once and telemetry stays off).
* else off: spans are no-ops, unless a test or the dev host called ``install_span_exporter()``.

Trace context crosses the Durable boundary explicitly: the HTTP start calls ``inject_trace_context()``
inside ``job_span()`` and puts the carrier in the orchestration input; the orchestrator copies it
unchanged into each activity's ``execution_context["trace"]``; ``executor_span(carrier=...)`` parents
the executor span on it. The orchestrator itself never starts spans (replays would duplicate them); it
calls ``log_job_status()`` when ``not context.is_replaying``, through ``orchestrators.run.record.set_job_events``
(function_app.py installs this module there: orchestrator code does not import it).

Attribute names follow the OpenTelemetry GenAI semantic conventions where one exists; the rest are app
attributes. The workbook and alert queries in ``infra/monitoring/*.kql`` read these exact names.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.jobs.contracts import ExecutorOutput

logger = logging.getLogger(__name__)

TRACER_NAME = "durable_ai_jobs"

# GenAI semantic-convention attributes.
ATTR_GEN_AI_OPERATION = "gen_ai.operation.name"
ATTR_GEN_AI_SYSTEM = "gen_ai.system"
ATTR_GEN_AI_PROVIDER = "gen_ai.provider.name"
ATTR_GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
ATTR_GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
ATTR_GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
ATTR_GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# General semantic-convention attribute for the class of an error. The Azure Monitor exporter consumes it
# without keeping it in customDimensions, so the code is also written under an app attribute.
ATTR_ERROR_TYPE = "error.type"
ATTR_EXECUTOR_ERROR_CODE = "executor.error_code"
ATTR_JOB_ERROR_CODE = "job.error_code"
# App attributes.
ATTR_JOB_ID = "job.id"
ATTR_STEP_ID = "job.step_id"
ATTR_JOB_STATUS = "job.status"
ATTR_JOB_PREVIOUS_STATUS = "job.previous_status"
ATTR_JOB_WAITING_KIND = "job.waiting_kind"
ATTR_JOB_COST = "job.estimated_cost"
ATTR_EXECUTOR_TYPE = "executor.type"
ATTR_EXECUTOR_TASK_ID = "executor.task_id"
ATTR_EXECUTOR_ATTEMPT = "executor.attempt"
ATTR_EXECUTOR_STATUS = "executor.status"
ATTR_TOTAL_TOKENS = "job.usage.total_tokens"
ATTR_EVENT_NAME = "job.event"
# The job.cost event (log_job_cost): who started the job, what it runs, and its ledger.
ATTR_JOB_OWNER = "job.owner"
ATTR_JOB_WORKFLOW = "job.workflow"
ATTR_COST_TOTAL = "job.cost.total"
ATTR_COST_CURRENCY = "job.cost.currency"
ATTR_COST_COMPLETE = "job.cost.complete"
ATTR_COST_BACKEND = "job.cost.backend"
ATTR_COST_HOSTING = "job.cost.hosting"
ATTR_COST_UNKNOWN = "job.cost.unknown"
ATTR_COST_MODELS = "job.cost.models"
ATTR_COST_METERS = "job.cost.meters"
ATTR_COST_PRICE_TABLE = "job.cost.price_table"

# The log event the orchestrator emits on every job status change (the workbook's job charts read it).
JOB_STATUS_EVENT = "job.status"
EXECUTOR_DONE_EVENT = "executor.done"
# The log event of a finished job's cost ledger (shared/runtime/ledger.py; docs/costs.md).
JOB_COST_EVENT = "job.cost"

# settings.llm_provider -> gen_ai provider value of the semantic conventions.
_GEN_AI_PROVIDERS: dict[str, str] = {"azure_openai": "azure.ai.openai", "openai": "openai", "offline": "offline"}

TelemetryMode = Literal["azure_monitor", "otlp", "in_memory", "off"]

_lock = threading.Lock()
_mode: TelemetryMode | None = None
_provider: TracerProvider | None = None
_propagator = TraceContextTextMapPropagator()
# The dimensions of the executor span open in this context: no-op spans carry no attributes, and logs
# must carry the dimensions even when tracing is off.
_executor_dims: ContextVar[dict[str, str | int] | None] = ContextVar("executor_dims", default=None)


def configure_telemetry() -> TelemetryMode:
    """Set up exporting once (idempotent) from the settings and return the mode in use."""
    global _mode
    if _mode is not None:
        return _mode
    with _lock:
        if _mode is None:
            _mode = _configure_from_settings()
            logger.info("telemetry mode: %s", _mode)
        return _mode


def _configure_from_settings() -> TelemetryMode:
    from shared.runtime.settings import get_settings

    settings = get_settings()
    if settings.applicationinsights_connection_string is not None:
        from azure.monitor.opentelemetry import configure_azure_monitor

        options: dict[str, Any] = {
            "connection_string": settings.applicationinsights_connection_string.get_secret_value(),
            "logger_name": "",
        }
        # Jobs are few and costly: keep every job trace unless the standard sampler variables say otherwise
        # (the distro's default rate-limited sampler would drop some).
        if not settings.otel_traces_sampler:
            options["sampling_ratio"] = 1.0
        auth = os.environ.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", "")
        if "authorization=aad" in auth.lower():
            options["credential"] = _entra_credential(auth, settings.azure_client_id)
        configure_azure_monitor(**options)
        return "azure_monitor"
    if settings.otel_exporter_otlp_endpoint:
        return _configure_otlp(settings.otel_exporter_otlp_endpoint)
    return "off"


def _entra_credential(auth: str, default_client_id: str | None) -> Any:
    """The managed identity named in ``Authorization=AAD;ClientId=<id>`` (or AZURE_CLIENT_ID)."""
    from azure.identity import ManagedIdentityCredential

    parts = dict(p.split("=", 1) for p in auth.split(";") if "=" in p)
    client_id = next((v for k, v in parts.items() if k.strip().lower() == "clientid"), None) or default_client_id
    return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()


def _configure_otlp(endpoint: str) -> TelemetryMode:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        logger.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set (%s) but opentelemetry-exporter-otlp-proto-http is not "
            "installed; telemetry stays off",
            endpoint,
        )
        return "off"
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    # The exporter reads the endpoint (and headers) from the standard OTEL_EXPORTER_OTLP_* variables.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _use_provider(provider)
    return "otlp"


def _use_provider(provider: TracerProvider) -> None:
    global _provider
    _provider = provider


def install_span_exporter(exporter: SpanExporter) -> TracerProvider:
    """Send every span of this module to ``exporter`` synchronously (tests, the dev host)."""
    global _mode
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with _lock:
        _use_provider(provider)
        _mode = "in_memory"
    return provider


def reset_telemetry() -> None:
    """Forget the configured mode and provider (tests). Azure Monitor set-up cannot be undone."""
    global _mode, _provider
    with _lock:
        _mode = None
        _provider = None


def get_tracer() -> Tracer:
    """The tracer for app spans: the installed provider's, else the global one (a no-op when off)."""
    if _provider is not None:
        return _provider.get_tracer(TRACER_NAME)
    return trace.get_tracer(TRACER_NAME)


def inject_trace_context() -> dict[str, str]:
    """The W3C ``traceparent``/``tracestate`` of the current span (empty when there is none)."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier


def extract_trace_context(carrier: Mapping[str, str] | None) -> Context | None:
    """A context whose parent is the span in ``carrier``, or None when it holds no valid trace."""
    if not carrier:
        return None
    clean = {str(k).lower(): str(v) for k, v in carrier.items() if isinstance(v, str)}
    ctx = _propagator.extract(clean)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def job_dimensions(
    *,
    job_id: str,
    step_id: str | None = None,
    executor_type: str | None = None,
    task_id: str | None = None,
    attempt: int | None = None,
) -> dict[str, str | int]:
    """The job dimensions shared by spans and log records (``None`` values are left out)."""
    dims: dict[str, str | int] = {ATTR_JOB_ID: job_id}
    if step_id:
        dims[ATTR_STEP_ID] = step_id
    if executor_type:
        dims[ATTR_EXECUTOR_TYPE] = executor_type
    if task_id:
        dims[ATTR_EXECUTOR_TASK_ID] = task_id
    if attempt is not None:
        dims[ATTR_EXECUTOR_ATTEMPT] = attempt
    return dims


class JobLoggerAdapter(logging.LoggerAdapter[logging.Logger]):
    """A logger that adds the job dimensions to every record (they become customDimensions)."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        """Merge the adapter's dimensions under any per-call ``extra``."""
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


def job_logger(base: logging.Logger, **dimensions: Any) -> JobLoggerAdapter:
    """``base`` with the dimensions of ``job_dimensions(**dimensions)`` on every record."""
    return JobLoggerAdapter(base, job_dimensions(**dimensions))


@contextmanager
def job_span(*, job_id: str, name: str = "job.start", attributes: Mapping[str, Any] | None = None) -> Iterator[Span]:
    """A span for the HTTP start of a job; call ``inject_trace_context()`` inside it for the carrier."""
    configure_telemetry()
    attrs: dict[str, Any] = {ATTR_JOB_ID: job_id, **(attributes or {})}
    with get_tracer().start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=attrs) as span:
        yield span


@contextmanager
def executor_span(
    *,
    job_id: str,
    step_id: str,
    executor_type: str,
    task_id: str,
    attempt: int,
    carrier: Mapping[str, str] | None = None,
) -> Iterator[Span]:
    """A span around one executor run, parented on ``carrier`` (the job's trace) when it holds one."""
    configure_telemetry()
    attrs = job_dimensions(
        job_id=job_id, step_id=step_id, executor_type=executor_type, task_id=task_id, attempt=attempt
    )
    parent = extract_trace_context(carrier)
    token = _executor_dims.set(attrs)
    try:
        with get_tracer().start_as_current_span(
            f"executor {executor_type}", context=parent, kind=SpanKind.INTERNAL, attributes=attrs
        ) as span:
            yield span
    finally:
        _executor_dims.reset(token)


def record_executor_output(
    span: Span,
    output: ExecutorOutput,
    *,
    requested_model: str | None = None,
    provider: str | None = None,
    operation: str = "chat",
) -> None:
    """Put the executor's outcome on its span (status, model, tokens, cost, error) and log it."""
    attrs: dict[str, str | int | float] = {
        ATTR_EXECUTOR_STATUS: output.status,
        ATTR_GEN_AI_INPUT_TOKENS: output.usage.tokens_input,
        ATTR_GEN_AI_OUTPUT_TOKENS: output.usage.tokens_output,
        ATTR_TOTAL_TOKENS: output.usage.total_tokens,
        ATTR_JOB_COST: output.usage.estimated_cost,
    }
    if output.usage.estimated:
        # The server reported no usage; the token counts are estimates (issue 10, item 4).
        attrs["job.usage.estimated"] = True
    dims = dict(_executor_dims.get() or {})
    executor_type = str(dims.get(ATTR_EXECUTOR_TYPE) or "") or None
    if output.model_used:
        attrs[ATTR_GEN_AI_RESPONSE_MODEL] = output.model_used
        attrs[ATTR_GEN_AI_REQUEST_MODEL] = requested_model or output.model_used
        attrs[ATTR_GEN_AI_OPERATION] = operation
        system = provider or _current_provider()
        if system:
            attrs[ATTR_GEN_AI_SYSTEM] = system
            attrs[ATTR_GEN_AI_PROVIDER] = system
    elif requested_model:
        attrs[ATTR_GEN_AI_REQUEST_MODEL] = requested_model
    if output.error is not None:
        attrs[ATTR_ERROR_TYPE] = output.error.code.value
        attrs[ATTR_EXECUTOR_ERROR_CODE] = output.error.code.value
    span.set_attributes(attrs)
    if output.status == "failed":
        # The code, not the message: messages may quote user input.
        span.set_status(Status(StatusCode.ERROR, str(attrs.get(ATTR_ERROR_TYPE, "failed"))))
    else:
        span.set_status(Status(StatusCode.OK))

    extra: dict[str, Any] = {ATTR_EVENT_NAME: EXECUTOR_DONE_EVENT, **dims, **attrs}
    level = logging.WARNING if output.status == "failed" else logging.INFO
    logger.log(
        level,
        "executor %s %s (model=%s, tokens=%d, cost=%.6f, error=%s)",
        executor_type or "?",
        output.status,
        output.model_used or "-",
        output.usage.total_tokens,
        output.usage.estimated_cost,
        output.error.code.value if output.error else "-",
        extra=extra,
    )


def log_job_status(
    *,
    job_id: str,
    status: str,
    previous_status: str | None = None,
    error_code: str | None = None,
    waiting_kind: str | None = None,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
) -> None:
    """Log a job status change as the ``job.status`` event (orchestrator: only when not replaying)."""
    configure_telemetry()
    extra: dict[str, Any] = {ATTR_EVENT_NAME: JOB_STATUS_EVENT, ATTR_JOB_ID: job_id, ATTR_JOB_STATUS: status}
    if previous_status:
        extra[ATTR_JOB_PREVIOUS_STATUS] = previous_status
    if error_code:
        extra[ATTR_ERROR_TYPE] = error_code
        extra[ATTR_JOB_ERROR_CODE] = error_code
    if waiting_kind:
        extra[ATTR_JOB_WAITING_KIND] = waiting_kind
    level = logging.WARNING if status == "failed" else logging.INFO
    (log or logger).log(level, "job %s is %s", job_id, status, extra=extra)


def log_job_cost(
    *,
    job_id: str,
    status: str,
    events: Any,
    owner: str | None = None,
    workflow: str | None = None,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
) -> dict[str, Any] | None:
    """Log a finished job's ledger as the ``job.cost`` event (orchestrator: once, when not replaying).

    Dimensions: the total, currency, whether every meter had a price, the backend and hosting plan, the meters
    without a price, the models, and each meter's quantity and cost as JSON (the workbook groups by day, user,
    workflow, model and meter). Telemetry never fails a job: a ledger that cannot be built is a warning.
    """
    try:
        from shared.runtime.history_counts import history_rows, started_at
        from shared.runtime.ledger import view_cost

        rows = history_rows(events)
        cost = view_cost(rows, started_at(rows))
    except Exception as exc:  # noqa: BLE001 - telemetry must not fail the orchestration
        logger.warning("job %s: cost ledger not built: %s", job_id, exc)
        return None
    return emit_job_cost(job_id=job_id, status=status, cost=cost, owner=owner, workflow=workflow, log=log)


def emit_job_cost(
    *,
    job_id: str,
    status: str,
    cost: dict[str, Any],
    owner: str | None = None,
    workflow: str | None = None,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
) -> dict[str, Any] | None:
    """Log the ``job.cost`` event of a ledger already built (the view's ``cost``); None when it has no total."""
    import json

    if cost.get("total") is None:
        return None
    configure_telemetry()
    meters = {m["meter"]: {"quantity": m["quantity"], "unit": m["unit"], "cost": m["cost"]} for m in cost["by_meter"]}
    models = [name.split(":", 1)[1] for name in meters if name.startswith("llm.tokens:")]
    extra: dict[str, Any] = {
        ATTR_EVENT_NAME: JOB_COST_EVENT,
        ATTR_JOB_ID: job_id,
        ATTR_JOB_STATUS: status,
        ATTR_COST_TOTAL: cost["total"],
        ATTR_COST_CURRENCY: cost["currency"],
        ATTR_COST_COMPLETE: cost["complete"],
        ATTR_COST_BACKEND: cost["backend"],
        ATTR_COST_HOSTING: cost["hosting"],
        ATTR_COST_UNKNOWN: ",".join(u["meter"] for u in cost["unknown"]),
        ATTR_COST_MODELS: ",".join(models),
        ATTR_COST_METERS: json.dumps(meters, separators=(",", ":")),
        ATTR_COST_PRICE_TABLE: cost["price_table"]["version"],
        # Empty rather than absent, so the workbook's group by user and workflow always has the column.
        ATTR_JOB_OWNER: owner or "",
        ATTR_JOB_WORKFLOW: workflow or "ask",
    }
    (log or logger).info("job %s cost %.8f %s", job_id, cost["total"], cost["currency"], extra=extra)
    return cost


def _current_provider() -> str | None:
    try:
        from shared.runtime.settings import get_settings

        return _GEN_AI_PROVIDERS.get(get_settings().llm_provider, get_settings().llm_provider)
    except Exception:  # a settings error is reported where settings are used, not in telemetry
        return None
