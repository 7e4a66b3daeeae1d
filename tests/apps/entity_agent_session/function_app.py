"""An agent session entity: the conversation history lives in an entity an orchestration appends to.

The pattern Microsoft's durable agents use: each turn appends the user's message to the session
entity, reads the history back, asks the model (an activity; here a deterministic stand-in) and
appends the assistant's answer. Clients read a session with ``read_entity_state``.
"""

import json

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

MAX_MESSAGES = 50


@app.entity_trigger(context_name="context")
def session(context: df.DurableEntityContext) -> None:
    """append / history / clear on one conversation."""
    messages = context.get_state(lambda: [])
    operation = context.operation_name
    if operation == "append":
        message = context.get_input()
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise ValueError("a message is {'role': 'user'|'assistant', 'content': str}")
        messages.append({"role": message["role"], "content": str(message.get("content", ""))})
        context.set_state(messages[-MAX_MESSAGES:])
        context.set_result(len(messages))
    elif operation == "history":
        context.set_result(messages)
    elif operation == "clear":
        context.destruct_on_exit()
    else:
        raise ValueError(f"unknown operation {operation}")


@app.activity_trigger(input_name="history")
def model_reply(history: list) -> str:
    """A deterministic stand-in for the model: answers with the turn number and what the user said last."""
    user_turns = [m for m in history if m["role"] == "user"]
    return f"turn {len(user_turns)}: you said '{user_turns[-1]['content']}'"


@app.orchestration_trigger(context_name="context")
def chat(context: df.DurableOrchestrationContext):
    """Run the user's messages as turns of the session; returns the history the entity holds."""
    args = context.get_input()
    entity = df.EntityId("session", args["session"])
    for text in args["messages"]:
        yield context.call_entity(entity, "append", {"role": "user", "content": text})
        history = yield context.call_entity(entity, "history")
        answer = yield context.call_activity("model_reply", history)
        yield context.call_entity(entity, "append", {"role": "assistant", "content": answer})
    return (yield context.call_entity(entity, "history"))


@app.route(route="chat/{session}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_chat(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start a chat run for a session; body: {"messages": [...]}."""
    body = req.get_json()
    payload = {"session": req.route_params["session"], "messages": body["messages"]}
    instance_id = await client.start_new("chat", client_input=payload)
    return client.create_check_status_response(req, instance_id)


@app.route(route="sessions/{session}", methods=["GET", "DELETE"])
@app.durable_client_input(client_name="client")
async def session_state(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """GET: the session's messages (404 when there is none); DELETE: clear it."""
    entity = df.EntityId("session", req.route_params["session"])
    if req.method == "DELETE":
        await client.signal_entity(entity, "clear")
        return func.HttpResponse(status_code=202)
    state = await client.read_entity_state(entity)
    if not state.entity_exists:
        return func.HttpResponse(status_code=404)
    return func.HttpResponse(json.dumps(state.entity_state), mimetype="application/json")
