"""Broken app: an orchestrator whose context_name is not "context".

DFApp binds the orchestrator through a generated handle whose parameter is named ``context``; the worker then
sees a ``context`` parameter that is no binding and must be an azure.functions.Context (it is not), so the
app is refused (microsoft/durabletask-python#171 describes the limitation).
"""

import azure.durable_functions as df

app = df.DFApp()


@app.orchestration_trigger(context_name="ctx")
def work(ctx: df.DurableOrchestrationContext):  # noqa: ANN201
    return (yield ctx.call_activity("say", "x"))


@app.activity_trigger(input_name="text")
def say(text: str) -> str:
    return text
