"""The workbook and alert rules load the documented KQL files, and cover what the issue asks for."""

from __future__ import annotations

import re

from tests.infra.bicep import INFRA, REPO, body, module, resources, variable

KQL_DIR = INFRA / "monitoring"
DOC = REPO / "docs" / "monitoring.md"
CHARTS = {
    "jobs-by-status",
    "step-latency-by-executor",
    "failures-by-error-code",
    "tokens-and-cost-per-day",
    "job-cost-by-meter",
    "jobs-waiting-for-users",
}
ALERTS = {"alert-failed-job-rate", "alert-jobs-waiting-too-long"}


def test_the_kql_files_are_exactly_the_charts_and_alerts() -> None:
    assert {p.stem for p in KQL_DIR.glob("*.kql")} == CHARTS | ALERTS


def test_the_workbook_has_one_chart_per_query_file() -> None:
    charts = variable(module("workbook"), "charts")
    assert {c["name"] for c in charts} == CHARTS
    for chart in charts:
        load = chart["query"]["function"]
        assert load["type"] == "load_text_content"
        assert load["parameters"]["file_path"] == f"../monitoring/{chart['name']}.kql"
    workbook = body(resources(module("workbook"), "Microsoft.Insights/workbooks")["workbook"])
    assert workbook["kind"] == "shared"
    assert workbook["properties"]["sourceId"] == "applicationInsightsId"


def test_two_alert_rules_on_failed_job_rate_and_waiting_jobs() -> None:
    rules = resources(module("alerts"), "Microsoft.Insights/scheduledQueryRules")
    assert set(rules) == {"failedJobRate", "jobsWaitingTooLong"}
    text = (INFRA / "modules" / "alerts.bicep").read_text()
    for stem in ALERTS:
        assert f"loadTextContent('../monitoring/{stem}.kql')" in text
    rate = body(rules["failedJobRate"])["properties"]["criteria"]["allOf"][0]
    assert rate["metricMeasureColumn"] == "failed_rate_percent"
    assert "failed_rate_percent" in (KQL_DIR / "alert-failed-job-rate.kql").read_text()
    assert rate["threshold"] == "failedJobRatePercent"
    waiting = (KQL_DIR / "alert-jobs-waiting-too-long.kql").read_text()
    assert "{WaitingMinutes}" in waiting
    assert "'{WaitingMinutes}', string(jobWaitingMinutes)" in text


def test_every_query_is_documented_verbatim() -> None:
    doc = DOC.read_text()
    blocks = re.findall(r"```kusto\n(.*?)\n```", doc, re.S)
    for path in sorted(KQL_DIR.glob("*.kql")):
        assert path.read_text().rstrip("\n") in blocks, f"docs/monitoring.md does not show {path.name} as it is"
        assert f"`infra/monitoring/{path.name}`" in doc
    assert len(blocks) == len(CHARTS | ALERTS)
