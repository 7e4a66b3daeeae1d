"""What Application Insights receives: executor spans land in ``dependencies`` and job status events in
``traces``, with the attribute names the workbook and alert queries (infra/monitoring/*.kql) read.

The Azure Monitor exporter's own envelope conversion is used; nothing is sent anywhere.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.jobs.contracts import ErrorCode, ExecutorOutput, Usage
from shared.runtime import telemetry
from shared.runtime.settings import reset_settings

REPO = Path(__file__).resolve().parents[3]
KQL_DIR = REPO / "infra" / "monitoring"
# A syntactically valid connection string pointing at a closed loopback port: nothing is exported.
CONNECTION = "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=http://127.0.0.1:9/"


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL", "true")
    for name in ("APPLICATIONINSIGHTS_CONNECTION_STRING", "OTEL_EXPORTER_OTLP_ENDPOINT", "LLM_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    telemetry.reset_telemetry()
    yield
    telemetry.reset_telemetry()


def _kql_dimension_keys() -> dict[str, set[str]]:
    return {
        p.name: set(re.findall(r'customDimensions\["([^"]+)"\]', p.read_text())) for p in sorted(KQL_DIR.glob("*.kql"))
    }


def _span_properties() -> tuple[str, dict[str, Any]]:
    from azure.monitor.opentelemetry.exporter import AzureMonitorTraceExporter

    spans = InMemorySpanExporter()
    telemetry.install_span_exporter(spans)
    with telemetry.executor_span(
        job_id="job-9", step_id="s1", executor_type="generate_response", task_id="t", attempt=1
    ) as span:
        telemetry.record_executor_output(
            span, ExecutorOutput.failure(ErrorCode.RATE_LIMITED, "429", model_used="gpt-4.1-mini")
        )
    exporter = AzureMonitorTraceExporter(connection_string=CONNECTION)
    envelope: Any = exporter._span_to_envelope(spans.get_finished_spans()[0])
    return envelope.data.base_type, dict(envelope.data.base_data.properties)


def _status_log_properties() -> tuple[str, dict[str, Any]]:
    from azure.monitor.opentelemetry.exporter import AzureMonitorLogExporter

    provider = LoggerProvider()
    logs = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
    log = logging.getLogger("tests.runtime.telemetry.status")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        telemetry.log_job_status(job_id="job-9", status="waiting_for_user", waiting_kind="approval", log=log)
    finally:
        log.removeHandler(handler)
    record = next(r for r in logs.get_finished_logs() if "job.event" in (r.log_record.attributes or {}))
    envelope: Any = AzureMonitorLogExporter(connection_string=CONNECTION)._log_to_envelope(record)
    return envelope.data.base_type, dict(envelope.data.base_data.properties)


def test_executor_spans_become_dependencies_with_the_queried_dimensions() -> None:
    base_type, props = _span_properties()
    assert base_type == "RemoteDependencyData"  # the `dependencies` table
    used = set().union(
        *(keys for name, keys in _kql_dimension_keys().items() if "dependencies" in (KQL_DIR / name).read_text())
    )
    assert used, "no KQL reads executor spans"
    assert used <= set(props), f"queried but never emitted: {sorted(used - set(props))}"
    assert props["executor.status"] == "failed" and props["executor.error_code"] == "RATE_LIMITED"
    assert props["gen_ai.response.model"] == "gpt-4.1-mini"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_job_status_events_become_traces_with_the_queried_dimensions() -> None:
    base_type, props = _status_log_properties()
    assert base_type == "MessageData"  # the `traces` table
    used = set().union(
        *(keys for name, keys in _kql_dimension_keys().items() if _reads(name, "traces", telemetry.JOB_STATUS_EVENT))
    )
    optional = {"job.waiting_kind"}
    assert used - optional <= set(props)
    assert props["job.event"] == telemetry.JOB_STATUS_EVENT == "job.status"
    assert props["job.status"] == "waiting_for_user" and props["job.waiting_kind"] == "approval"


def _reads(name: str, table: str, event: str) -> bool:
    """Whether a KQL file reads this table and filters on this job.event."""
    text = (KQL_DIR / name).read_text()
    return table in text and f'== "{event}"' in text


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_job_cost_events_become_traces_with_the_queried_dimensions(monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.monitor.opentelemetry.exporter import AzureMonitorLogExporter

    provider = LoggerProvider()
    logs = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
    log = logging.getLogger("tests.runtime.telemetry.cost")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    started = {"EventType": 0, "EventId": -1, "Timestamp": "2026-11-24T00:00:00Z", "Input": "{}"}
    try:
        telemetry.log_job_cost(job_id="job-9", status="completed", events=[started], log=log)
    finally:
        log.removeHandler(handler)
    record = next(r for r in logs.get_finished_logs() if "job.event" in (r.log_record.attributes or {}))
    envelope: Any = AzureMonitorLogExporter(connection_string=CONNECTION)._log_to_envelope(record)
    props = dict(envelope.data.base_data.properties)
    used = set().union(
        *(keys for name, keys in _kql_dimension_keys().items() if _reads(name, "traces", telemetry.JOB_COST_EVENT))
    )
    assert used, "no KQL reads the job.cost event"
    assert used <= set(props), f"queried but never emitted: {sorted(used - set(props))}"
    assert props["job.event"] == "job.cost" and props["job.workflow"] == "ask"


def test_every_queried_dimension_is_an_attribute_of_shared_telemetry() -> None:
    attributes = {v for k, v in vars(telemetry).items() if k.startswith("ATTR_")}
    for name, keys in _kql_dimension_keys().items():
        assert keys <= attributes, f"{name} reads {sorted(keys - attributes)}"


def test_queried_statuses_are_job_statuses() -> None:
    from shared.jobs.models import JobStatus

    statuses = set(get_args(JobStatus))
    for path in KQL_DIR.glob("*.kql"):
        text = path.read_text()
        for value in re.findall(r'status (?:==|in) \(?"([a-z_]+)"', text) + re.findall(r'"([a-z_]+)"\)', text):
            if "status" in text:
                assert value in statuses, f"{path.name} compares a status with unknown {value!r}"


def test_usage_is_numeric_in_the_envelope() -> None:
    _, props = _span_properties()
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "job.estimated_cost"):
        float(props[key])
    assert Usage().total_tokens == 0
