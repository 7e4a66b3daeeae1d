"""Durable test app with tight host.json limits: timeouts, action cap, concurrency, versions."""

import asyncio
import threading

import azure.durable_functions as df

app = df.DFApp()

# Set by tests to let blocked activities finish.
release = threading.Event()


@app.activity_trigger(input_name="name")
def hello(name: str) -> str:
    """Greet."""
    return f"Hello {name}!"


@app.activity_trigger(input_name="seconds")
async def hang(seconds: float) -> str:
    """Sleep longer than functionTimeout."""
    await asyncio.sleep(seconds)
    return "woke up"


@app.activity_trigger(input_name="limit")
def block(limit: float) -> bool:
    """Hold a worker thread until the test releases it (or the limit passes)."""
    return release.wait(limit)


@app.orchestration_trigger(context_name="context")
def too_many(context: df.DurableOrchestrationContext):
    """Schedule more actions than maxOrchestrationActions allows."""
    results = yield context.task_all([context.call_activity("hello", str(i)) for i in range(context.get_input())])
    return len(results)


@app.orchestration_trigger(context_name="context")
def timeout_orch(context: df.DurableOrchestrationContext):
    """Call an activity that exceeds the function timeout."""
    return (yield context.call_activity("hang", 10))


@app.orchestration_trigger(context_name="context")
def blocker(context: df.DurableOrchestrationContext):
    """Occupy one activity worker."""
    return (yield context.call_activity("block", 60))


@app.orchestration_trigger(context_name="context")
def greeter(context: df.DurableOrchestrationContext):
    """Three sequential greetings."""
    out = []
    for name in ("a", "b", "c"):
        out.append((yield context.call_activity("hello", name)))
    return out


@app.orchestration_trigger(context_name="context")
def version_orch(context: df.DurableOrchestrationContext):
    """Report the orchestration version and those of two sub-orchestrations."""
    default_child = yield context.call_sub_orchestrator("version_child", None)
    explicit_child = yield context.call_sub_orchestrator("version_child", None, version="0.9")
    return [context.version, default_child, explicit_child]


@app.orchestration_trigger(context_name="context")
def version_child(context: df.DurableOrchestrationContext):
    """Return this orchestration's version."""
    return context.version
