"""A whole job on a real devhost process, its spans captured with the SDK's InMemorySpanExporter:
one trace per job, HTTP start -> every executor, with the job and GenAI attributes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.devhost.hostproc import REPO_ROOT, DevHostProcess
from tests.jobs.jobclient import JobClient

WRAPPER = Path(__file__).resolve().parent / "devhost_spans.py"
DOCS_Q = "What does the returns policy say about refunds after 30 days?"
SQL_Q = "Which region had the most returns in Q3?"


class TracedDevHost(DevHostProcess):
    """devhost started through the span-capturing wrapper."""

    def __init__(self, *args: Any, spans_file: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spans_file = spans_file

    def command(self) -> list[str]:
        cmd = super().command()
        assert cmd[:3] == [sys.executable, "-m", "devhost"]
        return [sys.executable, str(WRAPPER), str(self.spans_file), *cmd[3:]]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], list[dict[str, Any]]]]:
    data = tmp_path_factory.mktemp("traced-host")
    spans_file = data / "spans.json"
    # No exporter settings: the only telemetry is the in-memory exporter the wrapper installs.
    env = {
        "JOB_RETRY_FIRST_INTERVAL_MS": "50",
        "APPLICATIONINSIGHTS_CONNECTION_STRING": "",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    }
    host = TracedDevHost(REPO_ROOT, data, env=env, spans_file=spans_file)
    host.start()
    try:
        jobs = JobClient(host)
        ids = {"docs": jobs.submit(DOCS_Q), "sql": jobs.submit(SQL_Q)}
        for job_id in ids.values():
            view = jobs.wait(job_id)
            assert view["status"] == "completed", view.get("error")
    finally:
        code = host.stop()
    assert code == 0, host.output()
    yield ids, json.loads(spans_file.read_text())


def _job_spans(spans: list[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["attributes"].get("job.id") == job_id]


def test_each_job_is_one_trace_rooted_at_the_http_start(traced: tuple[dict[str, str], list[dict[str, Any]]]) -> None:
    ids, spans = traced
    roots = {}
    for name, job_id in ids.items():
        mine = _job_spans(spans, job_id)
        (root,) = [s for s in mine if s["name"] == "job.start"]
        assert root["parent_span_id"] is None
        executors = [s for s in mine if s["name"].startswith("executor ")]
        assert executors, f"no executor spans for the {name} job"
        for span in executors:
            assert span["trace_id"] == root["trace_id"]
            assert span["parent_span_id"] == root["span_id"]
        # Nothing of this trace belongs to another job.
        assert {s["attributes"].get("job.id") for s in spans if s["trace_id"] == root["trace_id"]} == {job_id}
        roots[name] = root["trace_id"]
    assert roots["docs"] != roots["sql"]


def test_executor_spans_carry_job_and_genai_attributes(traced: tuple[dict[str, str], list[dict[str, Any]]]) -> None:
    ids, spans = traced
    expected_types = {"docs": {"consult_rag", "generate_response"}, "sql": {"execute_azure_sql", "generate_response"}}
    for name, job_id in ids.items():
        executors = [s for s in _job_spans(spans, job_id) if s["name"].startswith("executor ")]
        types = {s["attributes"]["executor.type"] for s in executors}
        assert expected_types[name] <= types
        for span in executors:
            attrs = span["attributes"]
            assert span["name"] == f"executor {attrs['executor.type']}"
            assert span["kind"] == "INTERNAL"
            assert attrs["job.step_id"] and attrs["executor.task_id"]
            assert attrs["executor.attempt"] >= 1
            assert attrs["executor.status"] == "success" and span["status"] == "OK"
            assert attrs["gen_ai.usage.input_tokens"] >= 0 and attrs["gen_ai.usage.output_tokens"] >= 0
            assert attrs["job.estimated_cost"] >= 0
        answer = next(s for s in executors if s["attributes"]["executor.type"] == "generate_response")
        attrs = answer["attributes"]
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.response.model"] and attrs["gen_ai.request.model"]
        assert attrs["gen_ai.system"] == "offline"
        assert attrs["gen_ai.usage.output_tokens"] > 0
