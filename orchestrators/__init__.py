"""Orchestrator functions of the app."""

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from orchestrators.job import job_orchestrator_body
from orchestrators.workflow import workflow_part_body

blueprint = df.Blueprint()


@blueprint.orchestration_trigger(context_name="context", orchestration="job_orchestrator")
def job_orchestrator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Run one AI job (the body lives in orchestrators/job.py)."""
    return (yield from job_orchestrator_body(context))


@blueprint.orchestration_trigger(context_name="context", orchestration="workflow_part")
def workflow_part(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    """Run a part of a workflow run: a parallel branch or a sub-workflow (orchestrators/workflow.py)."""
    return (yield from workflow_part_body(context))
