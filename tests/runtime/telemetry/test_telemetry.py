"""shared.runtime.telemetry with the OpenTelemetry SDK's in-memory exporter: spans, attributes, parenting, logs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from shared.jobs.contracts import ErrorCode, ExecutorOutput, Usage
from shared.runtime import telemetry
from shared.runtime.settings import reset_settings

_ENV = ("APPLICATIONINSIGHTS_CONNECTION_STRING", "OTEL_EXPORTER_OTLP_ENDPOINT", "LLM_PROVIDER")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    telemetry.reset_telemetry()
    yield
    telemetry.reset_telemetry()
    reset_settings()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    exp = InMemorySpanExporter()
    telemetry.install_span_exporter(exp)
    return exp


def _success() -> ExecutorOutput:
    return ExecutorOutput(
        status="success",
        result={"answer": "42"},
        usage=Usage(tokens_input=120, tokens_output=30, estimated_cost=0.000096),
        model_used="gpt-4.1-mini",
    )


def test_executor_span_carries_job_dimensions_and_genai_attributes(exporter: InMemorySpanExporter) -> None:
    with telemetry.executor_span(
        job_id="job-1", step_id="s2", executor_type="generate_response", task_id="job-1:s2:1", attempt=2
    ) as span:
        telemetry.record_executor_output(span, _success(), provider="azure.ai.openai")

    (finished,) = exporter.get_finished_spans()
    assert finished.name == "executor generate_response"
    assert finished.kind is SpanKind.INTERNAL
    attrs = dict(finished.attributes or {})
    assert attrs == {
        "job.id": "job-1",
        "job.step_id": "s2",
        "executor.type": "generate_response",
        "executor.task_id": "job-1:s2:1",
        "executor.attempt": 2,
        "executor.status": "success",
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "azure.ai.openai",
        "gen_ai.provider.name": "azure.ai.openai",
        "gen_ai.request.model": "gpt-4.1-mini",
        "gen_ai.response.model": "gpt-4.1-mini",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "job.usage.total_tokens": 150,
        "job.estimated_cost": 0.000096,
    }
    assert finished.status.status_code is StatusCode.OK


def test_failed_output_sets_error_type_and_error_status(exporter: InMemorySpanExporter) -> None:
    output = ExecutorOutput.failure(ErrorCode.SQL_REJECTED, "DELETE is not allowed: secret-ish user text")
    with telemetry.executor_span(
        job_id="job-2", step_id="s1", executor_type="execute_azure_sql", task_id="t", attempt=1
    ) as span:
        telemetry.record_executor_output(span, output)

    (finished,) = exporter.get_finished_spans()
    attrs = dict(finished.attributes or {})
    assert attrs["executor.status"] == "failed"
    assert attrs["error.type"] == "SQL_REJECTED"
    assert attrs["executor.error_code"] == "SQL_REJECTED"
    assert "gen_ai.response.model" not in attrs  # no model was used
    assert finished.status.status_code is StatusCode.ERROR
    # The span status carries the code only, never the message (which may quote user input).
    assert finished.status.description == "SQL_REJECTED"


def test_provider_defaults_to_the_configured_llm_provider(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_PROVIDER", "azure_openai")
    reset_settings()
    with telemetry.executor_span(job_id="j", step_id="s", executor_type="consult_rag", task_id="t", attempt=1) as span:
        telemetry.record_executor_output(span, _success(), operation="embeddings")
    attrs = dict(exporter.get_finished_spans()[0].attributes or {})
    assert attrs["gen_ai.system"] == "azure.ai.openai"
    assert attrs["gen_ai.operation.name"] == "embeddings"


def test_trace_context_crosses_a_durable_payload(exporter: InMemorySpanExporter) -> None:
    with telemetry.job_span(job_id="job-3") as job:
        carrier = telemetry.inject_trace_context()
    assert set(carrier) >= {"traceparent"}
    # The carrier travels inside JSON orchestration and activity inputs.
    travelled = json.loads(json.dumps({"execution_context": {"trace": carrier}}))["execution_context"]["trace"]

    # An activity runs later, elsewhere, with no current span.
    token = otel_context.attach(otel_context.Context())
    try:
        for step in ("s1", "s2"):
            with telemetry.executor_span(
                job_id="job-3", step_id=step, executor_type="consult_rag", task_id=step, attempt=1, carrier=travelled
            ) as span:
                telemetry.record_executor_output(span, _success())
    finally:
        otel_context.detach(token)

    spans = {s.name + ":" + str((s.attributes or {}).get("job.step_id", "")): s for s in exporter.get_finished_spans()}
    root = spans["job.start:"]
    assert root.parent is None
    assert dict(root.attributes or {}) == {"job.id": "job-3"}
    job_ctx = job.get_span_context()
    for step in ("s1", "s2"):
        child = spans[f"executor consult_rag:{step}"]
        assert child.context.trace_id == job_ctx.trace_id
        assert child.parent is not None and child.parent.span_id == job_ctx.span_id


def test_without_a_carrier_the_executor_span_uses_the_current_context(exporter: InMemorySpanExporter) -> None:
    tracer = telemetry.get_tracer()
    with tracer.start_as_current_span("activity") as outer:
        with telemetry.executor_span(job_id="j", step_id="s", executor_type="plan", task_id="t", attempt=1):
            pass
    child = next(s for s in exporter.get_finished_spans() if s.name == "executor plan")
    assert child.parent is not None and child.parent.span_id == outer.get_span_context().span_id


@pytest.mark.parametrize(
    "carrier",
    [None, {}, {"traceparent": "garbage"}, {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}],
    ids=["none", "empty", "garbage", "all-zero"],
)
def test_an_unusable_carrier_starts_a_new_trace(exporter: InMemorySpanExporter, carrier: dict[str, str] | None) -> None:
    assert telemetry.extract_trace_context(carrier) is None
    with telemetry.executor_span(
        job_id="j", step_id="s", executor_type="plan", task_id="t", attempt=1, carrier=carrier
    ):
        pass
    (finished,) = exporter.get_finished_spans()
    assert finished.parent is None


def test_inject_outside_any_span_is_empty() -> None:
    assert telemetry.inject_trace_context() == {}


def test_logs_carry_the_same_dimensions(exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="shared.runtime.telemetry")
    output = ExecutorOutput.failure(ErrorCode.RATE_LIMITED, "429", model_used="gpt-4.1-mini")
    with telemetry.executor_span(
        job_id="job-4", step_id="s3", executor_type="generate_response", task_id="t3", attempt=3
    ) as span:
        telemetry.record_executor_output(span, output)
    record = next(r for r in caplog.records if getattr(r, "job.event", None) == "executor.done")
    assert record.levelno == logging.WARNING
    assert getattr(record, "job.id") == "job-4"
    assert getattr(record, "job.step_id") == "s3"
    assert getattr(record, "executor.type") == "generate_response"
    assert getattr(record, "executor.attempt") == 3
    assert getattr(record, "error.type") == "RATE_LIMITED"
    assert getattr(record, "gen_ai.response.model") == "gpt-4.1-mini"


def test_logs_carry_dimensions_even_when_tracing_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="shared.runtime.telemetry")
    assert telemetry.configure_telemetry() == "off"
    with telemetry.executor_span(
        job_id="job-5", step_id="s1", executor_type="consult_rag", task_id="t", attempt=1
    ) as s:
        assert not s.is_recording()
        telemetry.record_executor_output(s, _success())
    record = next(r for r in caplog.records if getattr(r, "job.event", None) == "executor.done")
    assert getattr(record, "job.id") == "job-5"
    assert getattr(record, "executor.type") == "consult_rag"
    assert getattr(record, "gen_ai.usage.input_tokens") == 120


def test_job_logger_adapter_and_status_event(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    log = telemetry.job_logger(logging.getLogger("tests.jobs"), job_id="job-6", step_id="s1")
    log.info("hello", extra={"custom": 1})
    hello = next(r for r in caplog.records if r.getMessage() == "hello")
    assert getattr(hello, "job.id") == "job-6" and getattr(hello, "job.step_id") == "s1"
    assert hello.__dict__["custom"] == 1

    telemetry.log_job_status(
        job_id="job-6", status="waiting_for_user", previous_status="running", waiting_kind="approval"
    )
    telemetry.log_job_status(job_id="job-6", status="failed", error_code="SQL_ERROR")
    events = [r for r in caplog.records if getattr(r, "job.event", None) == "job.status"]
    assert [getattr(r, "job.status") for r in events] == ["waiting_for_user", "failed"]
    assert getattr(events[0], "job.waiting_kind") == "approval"
    assert getattr(events[0], "job.previous_status") == "running"
    assert getattr(events[1], "error.type") == "SQL_ERROR"
    assert getattr(events[1], "job.error_code") == "SQL_ERROR"
    assert events[1].levelno == logging.WARNING


def test_configure_is_idempotent_and_off_without_settings() -> None:
    assert telemetry.configure_telemetry() == "off"
    assert telemetry.configure_telemetry() == "off"


def test_otlp_without_the_exporter_package_logs_once_and_stays_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the OTLP exporter is installed here")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    reset_settings()
    caplog.set_level(logging.WARNING, logger="shared.runtime.telemetry")
    assert telemetry.configure_telemetry() == "off"
    assert telemetry.configure_telemetry() == "off"
    warnings = [r for r in caplog.records if "OTEL_EXPORTER_OTLP_ENDPOINT" in r.getMessage()]
    assert len(warnings) == 1


def test_import_configures_nothing() -> None:
    code = (
        "import shared.runtime.telemetry as t\n"
        "from opentelemetry import trace\n"
        "assert t._mode is None and t._provider is None\n"
        "assert type(trace.get_tracer_provider()).__name__ == 'ProxyTracerProvider'\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_azure_monitor_mode_uses_the_managed_identity_named_in_the_auth_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import azure.monitor.opentelemetry as distro

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(distro, "configure_azure_monitor", lambda **kw: calls.append(kw))
    monkeypatch.setenv(
        "APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=00000000-0000-0000-0000-000000000000"
    )
    monkeypatch.setenv("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", "Authorization=AAD;ClientId=1111-client")
    reset_settings()
    assert telemetry.configure_telemetry() == "azure_monitor"
    assert telemetry.configure_telemetry() == "azure_monitor"
    (kwargs,) = calls
    assert kwargs["connection_string"] == "InstrumentationKey=00000000-0000-0000-0000-000000000000"
    credential = kwargs["credential"]
    assert type(credential).__name__ == "ManagedIdentityCredential"


def test_azure_monitor_mode_without_entra_auth_passes_no_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    import azure.monitor.opentelemetry as distro

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(distro, "configure_azure_monitor", lambda **kw: calls.append(kw))
    monkeypatch.setenv(
        "APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=00000000-0000-0000-0000-000000000000"
    )
    monkeypatch.delenv("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", raising=False)
    reset_settings()
    assert telemetry.configure_telemetry() == "azure_monitor"
    assert "credential" not in calls[0]


def test_real_azure_monitor_set_up_records_spans_and_exits_cleanly() -> None:
    code = (
        "from shared.runtime import telemetry\n"
        "from opentelemetry import trace\n"
        "assert telemetry.configure_telemetry() == 'azure_monitor'\n"
        "assert type(trace.get_tracer_provider()).__name__ == 'TracerProvider'\n"
        "assert type(trace.get_tracer_provider().sampler).__name__ == 'ApplicationInsightsSampler'\n"
        "with telemetry.job_span(job_id='j') as span:\n"
        "    assert span.is_recording()\n"
        "    assert telemetry.inject_trace_context()['traceparent'].startswith('00-')\n"
        "print('ok')\n"
    )
    env = {
        **os.environ,
        # A closed loopback port: nothing leaves the machine.
        "APPLICATIONINSIGHTS_CONNECTION_STRING": (
            "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=http://127.0.0.1:9/"
        ),
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING": "Authorization=AAD;ClientId=11111111-1111-1111-1111-111111111111",
        "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
