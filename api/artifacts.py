"""GET /api/jobs/{id}/artifacts/{ref}: a file a step of the job produced (a chart, a CSV), for whoever sees the job.

The same auth and ownership as the job view: another user's job answers 404 exactly like a missing one. The
bytes come from the artifact store (shared/runtime/artifacts.py), keyed by the job id, so a ref of another job
is never found. Files were written by model code: only images are shown inline; everything else is an
attachment, with ``nosniff`` and a sandboxing CSP, so nothing a file holds runs in the console's origin.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df
import azure.functions as func

from api.common import owned_status, request_caller, route_auth_level
from api.errors import ApiError, guarded

# Shown in the page (an <img>); any other type is downloaded.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif"})


async def artifact(
    req: func.HttpRequest, client: df.DurableOrchestrationClient, job_id: str, ref: str
) -> func.HttpResponse:
    """The bytes of one artifact of a job the caller may see."""
    from shared.runtime.artifacts import get_artifact_store, valid_ref
    from shared.runtime.settings import get_settings

    if not valid_ref(ref):
        raise ApiError(400, "INVALID_REQUEST", f"{ref!r} is not an artifact reference", field="ref")
    caller = request_caller(req)
    status = await owned_status(client, job_id, caller)
    store = get_artifact_store(get_settings())
    found = store.get(job_id, ref)
    if found is None and _carries_steps(status):
        # A fork shows the files of the steps it carried over: they are the origin's (only those refs).
        origin = _carried_origin(await owned_status(client, job_id, caller, history=True), ref)
        found = store.get(origin, ref) if origin else None
    if found is None:
        raise ApiError(404, "ARTIFACT_NOT_FOUND", f"job {job_id} has no artifact {ref!r}", field="ref")
    meta, data = found
    safe_name = "".join(c if c.isalnum() or c in "._-" else "_" for c in meta.name)[:120] or "artifact"
    disposition = "inline" if meta.media_type in INLINE_TYPES else "attachment"
    headers = {
        "Content-Disposition": f'{disposition}; filename="{safe_name}"',
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, max-age=300",
    }
    media_type = meta.media_type if meta.media_type in INLINE_TYPES else "application/octet-stream"
    return func.HttpResponse(data, status_code=200, mimetype=media_type, headers=headers)


def _carries_steps(status: dict[str, Any]) -> bool:
    custom = status.get("customStatus")
    steps = custom.get("steps") if isinstance(custom, dict) else None
    return isinstance(steps, list) and any(isinstance(s, dict) and s.get("carried_from") for s in steps)


def _carried_origin(status: dict[str, Any], ref: str) -> str | None:
    """The job that wrote ``ref``, when it is a file of a step this fork carried over (from its base)."""
    from shared.jobs.fork import carried_base

    base = carried_base(status.get("historyEvents") or [])
    for item in base.carried if base else []:
        files = (item.output or {}).get("files")
        refs = {f.get("ref") for f in files if isinstance(f, dict)} if isinstance(files, list) else set()
        if ref in refs and item.step.carried_from:
            return item.step.carried_from
    return None


def register(bp: df.Blueprint) -> None:
    """Register the artifact route on the blueprint."""

    @bp.route(route="jobs/{job_id}/artifacts/{ref}", methods=["GET"], auth_level=route_auth_level())
    @bp.durable_client_input(client_name="client")
    async def get_artifact(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        """GET /api/jobs/{job_id}/artifacts/{ref}."""
        params = req.route_params
        return await guarded("get_artifact", lambda: artifact(req, client, params["job_id"], params["ref"]))
