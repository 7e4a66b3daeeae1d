"""Fan-out/fan-in: back up every file under a local folder in parallel and add up the bytes copied.

The public sample copies to Blob storage; here the "backup" is another local folder, so the app runs
offline with nothing but the devhost.
"""

import json
import os
import shutil
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.route(route="backup", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_backup(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Body: {"source": "<folder>", "target": "<folder>"}."""
    try:
        job = json.loads(req.get_body())
        source, target = job["source"], job["target"]
    except (ValueError, KeyError, TypeError):
        return func.HttpResponse('Send {"source": "<folder>", "target": "<folder>"}.', status_code=400)
    instance_id = await client.start_new("backup_folder", None, {"source": source, "target": target})
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def backup_folder(context: df.DurableOrchestrationContext):
    """List the files, copy all of them in parallel, return the total size and the file count."""
    job = context.get_input()
    files = yield context.call_activity("list_files", job["source"])
    copies = [
        context.call_activity("copy_file", {"source": job["source"], "target": job["target"], "path": path})
        for path in files
    ]
    sizes = yield context.task_all(copies)
    context.set_custom_status({"files": len(files)})
    return {"files": len(files), "bytes": sum(sizes)}


@app.activity_trigger(input_name="root")
def list_files(root: str) -> list[str]:
    """Every regular file under ``root``, as paths relative to it (sorted for a stable order)."""
    base = Path(root)
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


@app.activity_trigger(input_name="item")
def copy_file(item: dict) -> int:
    """Copy one file into the backup folder, keeping its relative path; returns its size in bytes."""
    source = Path(item["source"]) / item["path"]
    destination = Path(item["target"]) / item["path"]
    os.makedirs(destination.parent, exist_ok=True)
    shutil.copyfile(source, destination)
    return source.stat().st_size
