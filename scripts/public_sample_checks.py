"""The checks of each public sample app (see docs/devhost-samples.md): what each sample says it returns.

Directory names are the copies scripts/check-public-samples.sh makes: `py2-*` from
Azure/azure-functions-durable-python samples-v2/, `dts-*` from Azure-Samples/Durable-Task-Scheduler
samples/durable-functions/python/, `ext-BasicPython` from Azure/azure-functions-durable-extension
test/e2e/Apps/BasicPython.
"""

from __future__ import annotations

import json
import time

from check_public_samples import Host, check, completed_with, expect, needs_blob_storage, refused

CITIES = ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]


# ----- Azure/azure-functions-durable-python samples-v2 ----------------------------------------------


refused(
    "py2-function_chaining",
    "host.json is not valid JSON",
    "its host.json holds two JSON objects; the Functions host's JObject.Parse refuses it too",
)


@check("py2-function_chaining-hostjson-fixed", "chaining")
def _chaining(h: Host) -> str:
    completed_with(h, h.start("/api/orchestrators/my_orchestrator", "GET"), CITIES)
    return "3 activities in order"


@check("py2-blueprint", "blueprint on func.FunctionApp")
def _blueprint(h: Host) -> str:
    completed_with(h, h.start("/api/startOrchestrator", "GET"), CITIES)
    resp = h.client.get(h.base + "/api/HttpTrigger", params={"name": "x"})
    expect(resp.status_code == 200 and "Hello, x." in resp.text, f"HttpTrigger {resp.status_code}")
    return "orchestration + plain HTTP trigger"


@check("py2-simple_sub_orchestration", "sub-orchestration")
def _sub(h: Host) -> str:
    completed_with(h, h.start("/api/orchestrators/orchestrator", "GET"), "Hello Seattle")
    return "result through the child"


refused(
    "py2-serialize_arguments",
    "No module named 'shared_code'",
    "samples-v2 lacks the shared_code/MyClasses.py it imports (the v1 sample has it): an import error on any host",
)


@check("py2-serialize_arguments-with-shared_code", "custom class to_json/from_json")
def _serialize(h: Host) -> str:
    completed_with(h, h.start("/api/orchestrators/orchestrator", "GET"), 5)
    return "input and activity round trip"


@check("py2-orchestration_versioning", "defaultVersion, context.version, sub-orchestrator version")
def _versioning(h: Host) -> str:
    payload = h.start("/api/orchestrators/my_orchestrator", "GET")
    st = h.wait(payload, until={"Running", "Failed", "Completed"})
    deadline = time.monotonic() + 30
    while st.get("customStatus") != "Waiting for Continue event..." and time.monotonic() < deadline:
        expect(st["runtimeStatus"] == "Running", f"status {st['runtimeStatus']}: {st.get('output')}")
        time.sleep(0.2)
        st = h.status(payload)
    h.post_event(payload, "Continue", None)
    completed_with(
        h,
        payload,
        [
            "Orchestration version: 1.0",
            "Suborchestration version (explicit): 0.9",
            "Suborchestration version (default): 1.0",
            "Hello from A!",
        ],
    )
    return "version 1.0 path, explicit 0.9 and default 1.0 children"


needs_blob_storage("py2-fan_in_fan_out")


@check("py2-fan_in_fan_out", "fan-out/fan-in copying files to blobs (Azurite)")
def _fan_in_fan_out(h: Host) -> str:
    from azure.storage.blob import BlobServiceClient

    # The sample backs up the E2_* folders of a v1 app: the v1 copy of this same sample is that tree.
    root = h.apps_root / "v1-fan_in_fan_out"
    files = [p for p in root.rglob("*") if "E2_" in str(p.parent) and p.name in ("__init__.py", "function.json")]
    expect(bool(files), f"no E2_ files under {root}")
    payload = h.start("/api/orchestrators/E2_BackupSiteContent", content=json.dumps(str(root)))
    completed_with(h, payload, sum(p.stat().st_size for p in files))
    assert h.storage is not None
    blobs = BlobServiceClient.from_connection_string(h.storage).get_container_client("backups").list_blobs()
    names = sorted(b.name for b in blobs)
    expect(names == sorted(f"{p.parent.name}_{p.name}" for p in files), f"blobs {names}")
    return f"{len(files)} files, bytes summed, blobs in Azurite"


# ----- Azure-Samples/Durable-Task-Scheduler samples/durable-functions/python -----------------------


@check("dts-hello-cities", "chaining")
def _dts_chain(h: Host) -> str:
    completed_with(h, h.start("/api/StartChaining"), CITIES)
    return "DTS storage provider replaced by SQLite"


@check("dts-hello-cities", "fan-out/fan-in")
def _dts_fan(h: Host) -> str:
    cities = ["Tokyo", "Seattle", "London", "Paris", "Berlin"]
    completed_with(h, h.start("/api/StartFanOutFanIn"), [f"Hello {c}!" for c in cities])
    return "5 activities, results in call order"


refused(
    "dts-fan-out-fan-in",
    "declared in Python but not in the function definition",
    "bp.durable_client_input over app.route binds the client to bp's last function, not the route: "
    "the worker refuses start_fan_out_fan_in the same way",
)


@check("dts-work-item-filtering", "activity, fan-out, sub-orchestration, entity")
def _dts_wif(h: Host) -> str:
    completed_with(h, h.start("/api/orchestrators/greeting"), "Hello, World!")
    completed_with(h, h.start("/api/orchestrators/fanout"), ["Hello, Tokyo!", "Hello, London!", "Hello, Seattle!"])
    completed_with(h, h.start("/api/orchestrators/parent"), "Parent received: Hello, World!")
    completed_with(h, h.start("/api/orchestrators/counter"), 30)
    return "4 starters"


@check("dts-work-item-filtering", "start of an orchestration the app does not have")
def _dts_wif_pending(h: Host) -> str:
    # With DTS and work-item filtering the instance waits Pending for another app; the extension's
    # client refuses an unknown orchestrator of the current app (ArgumentException -> 500 through the
    # SDK), which is what devhost does.
    resp = h.client.post(h.base + "/api/start/orders_orchestration")
    expect(resp.status_code == 500, f"{resp.status_code} {resp.text[:200]}")
    return "refused (500), as the extension without DTS filtering"


@check("dts-work-item-filtering-app-b", "activity with input")
def _dts_wif_b(h: Host) -> str:
    completed_with(h, h.start("/api/orchestrators/orders"), "Shipped order-42 from App B")
    return "App B alone"


# ----- Azure/azure-functions-durable-extension test/e2e/Apps/BasicPython ---------------------------


def _start(h: Host, name: str) -> dict[str, object]:
    return h.start("/api/StartOrchestration", "GET", params={"orchestrationName": name})


@check("ext-BasicPython", "HelloCities")
def _e2e_hello(h: Host) -> str:
    completed_with(h, _start(h, "HelloCities"), CITIES)
    return "chaining"


@check("ext-BasicPython", "HelloCities scheduled start")
def _e2e_scheduled(h: Host) -> str:
    from datetime import UTC, datetime, timedelta

    when = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    payload = h.start("/api/HelloCities_HttpStart_Scheduled", "GET", params={"ScheduledStartTime": when})
    first = h.status(payload)
    expect(first["runtimeStatus"] in {"Pending", "Running"}, f"first status {first['runtimeStatus']}")
    completed_with(h, payload, CITIES)
    done = h.status(payload)
    expect(done["lastUpdatedTime"] >= when[:19], "completed before the scheduled time")
    return "waits on a timer until the time given"


@check("ext-BasicPython", "ActivityInputTypeOrchestrator")
def _e2e_input_types(h: Host) -> str:
    st = h.wait(_start(h, "ActivityInputTypeOrchestrator"))
    out = str(st.get("output"))
    expect(st["runtimeStatus"] == "Completed", f"status {st['runtimeStatus']}: {out[:400]}")
    for want in (
        "Received byte[]: [1, 2, 3, 4, 5]",
        "Received byte[]: []",
        "Received byte: 42",
        "Received CustomClass: {Name: Test, Age: 25, Duration: 01:00:00, Data: [1, 2, 3]}",
        "Received int[]: [1, 2, 3, 4, 5]",
        "Received string: Test string input",
        "Received CustomClass[]: [{Name: Test1, Age: 25, Duration: 00:30:00, Data: [1, 2, 3]}, "
        "{Name: Test2, Age: 30, Duration: 00:45:00, Data: []}]",
    ):
        expect(want in out, f"missing {want!r} in {out[:400]}")
    expect("Error:" not in out, out[:400])
    return "the extension's 7 asserts"


@check("ext-BasicPython", "RethrowActivityException")
def _e2e_rethrow(h: Host) -> str:
    st = h.wait(_start(h, "RethrowActivityException"))
    expect(st["runtimeStatus"] == "Failed", f"status {st['runtimeStatus']}")
    expect("This activity failed" in str(st["output"]), str(st["output"])[:300])
    return "Failed, message in output"


@check("ext-BasicPython", "CatchActivityException")
def _e2e_catch(h: Host) -> str:
    st = h.wait(_start(h, "CatchActivityException"))
    expect(st["runtimeStatus"] == "Completed", f"status {st['runtimeStatus']}")
    expect(str(st["output"]).startswith("Caught exception: ") and "This activity failed" in st["output"], st["output"])
    return "Completed, caught"


@check("ext-BasicPython", "RetryActivityFunction / CustomRetryActivityFunction")
def _e2e_retry(h: Host) -> str:
    completed_with(h, _start(h, "RetryActivityFunction"), "Success")
    completed_with(h, _start(h, "CustomRetryActivityFunction"), "Success")
    return "second attempt succeeds after 5 s"


@check("ext-BasicPython", "Throw/Catch/RetryEntityOrchestration")
def _e2e_entities(h: Host) -> str:
    st = h.wait(_start(h, "ThrowEntityOrchestration"))
    expect(st["runtimeStatus"] == "Failed" and "This entity failed" in str(st["output"]), str(st)[:400])
    st = h.wait(_start(h, "CatchEntityOrchestration"))
    expect(st["runtimeStatus"] == "Completed" and "This entity failed" in str(st["output"]), str(st)[:400])
    completed_with(h, _start(h, "RetryEntityOrchestration"), "Success")
    return "entity error raised, caught, retried"


@check("ext-BasicPython", "ExternalEventOrchestrator")
def _e2e_event(h: Host) -> str:
    # The app's orchestrator never yields the wait, so it completes at once; the starter then raises
    # an event to an ended instance, which the client reports as an error (400 from the app).
    payload = _start(h, "ExternalEventOrchestrator")
    completed_with(h, payload, "Orchestrator Finished!")
    resp = h.client.post(h.base + "/api/SendExternalEvent_HttpStart", json=payload["id"])
    expect(resp.status_code == 400, f"{resp.status_code} {resp.text[:300]}")
    ended = resp.text
    resp = h.client.post(h.base + "/api/SendExternalEvent_HttpStart", json="no-such-instance")
    expect(resp.status_code == 400, f"{resp.status_code} {resp.text[:200]}")
    return f"completed at once; event to it: {ended[:80]!r}"


@check("ext-BasicPython", "LargeOutputOrchestrator")
def _e2e_large(h: Host) -> str:
    payload = h.start("/api/LargeOutputOrchestrator_HttpStart", json=1024)
    st = h.wait(payload)
    expect(st["runtimeStatus"] == "Completed", f"status {st['runtimeStatus']}")
    resp = h.client.get(h.base + "/api/LargeOutputOrchestrator_Query_Output", params={"id": payload["id"]})
    out = resp.json()
    expect(out[0] == "Hello Tokyo!" and out[1] == "A" * 1024 * 1024, "output differs")
    return "1 MB output through get_status"


@check("ext-BasicPython", "GetAllInstances / GetRunningInstances")
def _e2e_query(h: Host) -> str:
    payload = _start(h, "HelloCities")
    h.wait(payload)
    resp = h.client.get(h.base + "/api/GetAllInstances")
    ids = [i["instanceId"] for i in resp.json()]
    expect(payload["id"] in ids, "instance missing from get_status_all")
    resp = h.client.get(h.base + "/api/GetRunningInstances")
    running = {i["runtimeStatus"] for i in resp.json()}
    expect(resp.status_code == 200 and running <= {"Running", "Pending", "ContinuedAsNew"}, str(running))
    return f"{len(ids)} instances listed"


@check("ext-BasicPython", "Suspend/Resume/Terminate")
def _e2e_suspend(h: Host) -> str:
    payload = _start(h, "LongRunningOrchestrator")
    h.wait(payload, until={"Running"})
    iid = payload["id"]
    ok = h.client.post(h.base + "/api/SuspendInstance", params={"instanceId": iid})
    expect(ok.status_code == 200 and h.status(payload)["runtimeStatus"] == "Suspended", ok.text)
    again = h.client.post(h.base + "/api/SuspendInstance", params={"instanceId": iid})
    expect(again.status_code == 400, f"second suspend {again.status_code}")
    ok = h.client.post(h.base + "/api/ResumeInstance", params={"instanceId": iid})
    expect(ok.status_code == 200, ok.text)
    again = h.client.post(h.base + "/api/ResumeInstance", params={"instanceId": iid})
    expect(again.status_code == 400, f"second resume {again.status_code}")
    ok = h.client.post(h.base + "/api/TerminateInstance", params={"instanceId": iid})
    expect(ok.status_code == 200, ok.text)
    st = h.wait(payload)
    expect(st["runtimeStatus"] == "Terminated", st["runtimeStatus"])
    # The SDK treats the 410 of an ended instance as success.
    again = h.client.post(h.base + "/api/TerminateInstance", params={"instanceId": iid})
    expect(again.status_code == 200, f"second terminate {again.status_code}")
    return "states and refusals as the extension's e2e tests expect"


@check("ext-BasicPython", "TimeoutOrchestrator")
def _e2e_timeout(h: Host) -> str:
    p1 = h.start("/api/TimeoutOrchestrator_HttpStart", "GET", params={"timeoutSeconds": "2"})
    p2 = h.start("/api/TimeoutOrchestrator_HttpStart", "GET", params={"timeoutSeconds": "10"})
    completed_with(h, p1, "The activity function timed out")
    completed_with(h, p2, "The activity function completed successfully")
    return "timer wins / activity wins"


@check("ext-BasicPython", "PurgeOrchestrationHistory")
def _e2e_purge(h: Host) -> str:
    from datetime import UTC, datetime, timedelta

    # Without purgeStartTime the SDK raises (python#560; the extension's e2e test skips Python there).
    start = (datetime.now(UTC) - timedelta(days=365)).isoformat()
    resp = h.client.get(h.base + "/api/PurgeOrchestrationHistory", params={"purgeStartTime": start})
    expect(resp.status_code == 200 and resp.text.startswith("Purged "), resp.text[:300])
    n = int(resp.text.split()[1])
    expect(n > 0, resp.text)
    after = h.client.get(h.base + "/api/GetAllInstances").json()
    expect(all(i["runtimeStatus"] not in {"Completed", "Failed", "Terminated"} for i in after), "ended ones left")
    return resp.text


@check("ext-BasicPython", "ClassBasedEntityOrchestration")
def _e2e_class_entity(h: Host) -> str:
    want = "IConfiguration: yes, MyInjectedService: yes, BlobContainerClient: yes, Number: 42"
    completed_with(h, _start(h, "ClassBasedEntityOrchestration"), want)
    return "function entity set/get through call_entity"


@check("ext-BasicPython", "IsReplaying* (5 orchestrators)")
def _e2e_is_replaying(h: Host) -> str:
    completed_with(
        h, _start(h, "IsReplayingBasic"), {"before_activity": True, "after_activity": False, "activity_result": "hello"}
    )
    labels = ["start", "after_first", "after_second", "after_third"]
    snapshots = [{"step": i, "label": label, "is_replaying": i < 3} for i, label in enumerate(labels)]
    completed_with(
        h, _start(h, "IsReplayingMultiActivity"), {"snapshots": snapshots, "activities": ["one", "two", "three"]}
    )
    completed_with(h, _start(h, "IsReplayingConditionalLog"), {"live_log_count": 1, "activity_result": "logged"})
    completed_with(
        h,
        _start(h, "IsReplayingCounter"),
        {"non_replay_count": 1, "replay_count": 3, "total_checkpoints": 4, "activities": ["a", "b", "c"]},
    )
    completed_with(
        h,
        _start(h, "IsReplayingFanOutFanIn"),
        {"before_fan_out": True, "after_fan_in": False, "activities": ["alpha", "beta", "gamma"]},
    )
    return "is_replaying true on replayed steps, false on the live one"
