"""Storage input and output bindings as public samples use them, run by devhost on Azurite.

Every container, queue and table is named ``bind...``: the tests share one Azurite with other modules.

- ``PUT /api/docs/{name}``: the body goes to ``%DOCS_CONTAINER%/<name>`` (blob output) and two messages to
  ``bind-doc-events`` (queue output, a list); ``?fail=1`` raises after setting both, so neither is written.
- ``GET /api/docs/{name}``: ``bind-docs/<name>`` as an ``InputStream`` (404 when it is missing: the input is None);
  ``GET /api/text/{name}``: the same blob as ``str`` (``data_type=STRING``).
- ``POST /api/stamped``: blob outputs named with ``{rand-guid}`` and ``{DateTime}``.
- ``on_doc_event`` (queue trigger on ``bind-doc-events``): its ``$return`` goes to ``bind-seen/<name>.txt``,
  ``{name}`` being the message's JSON property, and one table entity to ``bindevents`` (RowKey: the message id).
- ``on_incoming`` (blob trigger on ``bind-incoming/{name}``, a ``bytes`` parameter): writes ``bind-processed/<name>``.
- ``PUT /api/people/{pk}/{rk}`` (table output, one entity), ``POST /api/people`` (a list),
  ``GET /api/people/{pk}/{rk}`` (one entity or 404), ``GET /api/people/{pk}?min=`` (partition, filter, take 2).
- ``POST /api/copy/{name}`` starts ``copy_orchestrator``, whose ``copy_doc`` activity reads ``bind-docs/<name>``
  (blob input by the activity's input property) and writes ``bind-copies/<name>`` (blob output).
- ``stamp_on_start`` (timer, runOnStartup) writes ``bind-timer/started.txt``.
- ``POST /api/outbox`` queues a str, bytes and a dict on ``bind-outbox``, which nobody reads.
- ``elsewhere`` (identity-based connection) and ``mailer`` (a SendGrid output) cannot run locally: devhost names
  them at start and the functions still run.
"""

import json

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
STORAGE = "AzureWebJobsStorage"


@app.route(route="docs/{name}", methods=["PUT"])
@app.blob_output(arg_name="doc", path="%DOCS_CONTAINER%/{name}", connection=STORAGE)
@app.queue_output(arg_name="events", queue_name="bind-doc-events", connection=STORAGE)
def put_doc(req: func.HttpRequest, doc: func.Out[bytes], events: func.Out[list[str]]) -> func.HttpResponse:
    name = req.route_params["name"]
    doc.set(req.get_body())
    events.set([json.dumps({"name": name, "kind": "put"}), json.dumps({"name": f"{name}-again", "kind": "put"})])
    if req.params.get("fail"):
        raise RuntimeError("failed after setting the outputs")
    return func.HttpResponse(status_code=201)


@app.route(route="docs/{name}", methods=["GET"])
@app.blob_input(arg_name="doc", path="bind-docs/{name}", connection=STORAGE)
def get_doc(req: func.HttpRequest, doc: func.InputStream) -> func.HttpResponse:
    if doc is None:
        return func.HttpResponse("no such doc", status_code=404)
    return func.HttpResponse(doc.read(), mimetype="application/octet-stream")


@app.route(route="text/{name}", methods=["GET"])
@app.blob_input(arg_name="text", path="bind-docs/{name}", connection=STORAGE, data_type=func.DataType.STRING)
def get_text(req: func.HttpRequest, text: str) -> func.HttpResponse:
    if text is None:
        return func.HttpResponse(status_code=404)
    return func.HttpResponse(json.dumps({"type": type(text).__name__, "text": text}), mimetype="application/json")


@app.route(route="stamped", methods=["POST"])
@app.blob_output(arg_name="random", path="bind-stamped/{rand-guid}.txt", connection=STORAGE)
@app.blob_output(arg_name="dated", path="bind-stamped/{DateTime:yyyy}/{DateTime}.txt", connection=STORAGE)
def stamped(req: func.HttpRequest, random: func.Out[str], dated: func.Out[str]) -> func.HttpResponse:
    random.set("random")
    dated.set("dated")
    return func.HttpResponse(status_code=204)


@app.queue_trigger(arg_name="msg", queue_name="bind-doc-events", connection=STORAGE)
@app.blob_output(arg_name="$return", path="bind-seen/{name}.txt", connection=STORAGE)
@app.table_output(arg_name="row", table_name="bindevents", partition_key="events", connection=STORAGE)
def on_doc_event(msg: func.QueueMessage, row: func.Out[str]) -> str:
    body = msg.get_json()
    row.set(json.dumps({"RowKey": msg.id, "Name": body["name"], "DequeueCount": msg.dequeue_count}))
    return f"seen {body['name']} ({body['kind']})"


@app.blob_trigger(arg_name="data", path="bind-incoming/{name}", connection=STORAGE)
@app.blob_output(arg_name="out", path="bind-processed/{name}", connection=STORAGE)
def on_incoming(data: bytes, out: func.Out[str]) -> None:
    out.set(data.decode().upper())


@app.route(route="people/{pk}/{rk}", methods=["PUT"])
@app.table_output(arg_name="person", table_name="bindpeople", partition_key="{pk}", row_key="{rk}", connection=STORAGE)
def put_person(req: func.HttpRequest, person: func.Out[str]) -> func.HttpResponse:
    person.set(req.get_body().decode())
    return func.HttpResponse(status_code=201)


@app.route(route="people", methods=["POST"])
@app.table_output(arg_name="people", table_name="bindpeople", connection=STORAGE)
def post_people(req: func.HttpRequest, people: func.Out[str]) -> func.HttpResponse:
    people.set(req.get_json())
    return func.HttpResponse(status_code=201)


@app.route(route="people/{pk}/{rk}", methods=["GET"])
@app.table_input(arg_name="person", table_name="bindpeople", partition_key="{pk}", row_key="{rk}", connection=STORAGE)
def get_person(req: func.HttpRequest, person: str) -> func.HttpResponse:
    if person is None:
        return func.HttpResponse(status_code=404)
    return func.HttpResponse(person, mimetype="application/json")


@app.route(route="people/{pk}", methods=["GET"])
@app.table_input(
    arg_name="people",
    table_name="bindpeople",
    partition_key="{pk}",
    filter="Age ge {Query.min}",
    take=2,
    connection=STORAGE,
)
def list_people(req: func.HttpRequest, people: str) -> func.HttpResponse:
    return func.HttpResponse(people, mimetype="application/json")


@app.route(route="copy/{name}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_copy(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    instance_id = await client.start_new("copy_orchestrator", None, {"name": req.route_params["name"]})
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def copy_orchestrator(context: df.DurableOrchestrationContext):
    size = yield context.call_activity("copy_doc", context.get_input())
    return size


@app.activity_trigger(input_name="job")
@app.blob_input(arg_name="source", path="bind-docs/{name}", connection=STORAGE, data_type=func.DataType.BINARY)
@app.blob_output(arg_name="copy", path="bind-copies/{name}", connection=STORAGE)
def copy_doc(job: dict, source: bytes, copy: func.Out[bytes]) -> int:
    copy.set(source + b" (copy)")
    return len(source)


@app.timer_trigger(arg_name="timer", schedule="0 0 0 1 1 *", run_on_startup=True)
@app.blob_output(arg_name="stamp", path="bind-timer/started.txt", connection=STORAGE)
def stamp_on_start(timer: func.TimerRequest, stamp: func.Out[str]) -> None:
    stamp.set("started")


@app.route(route="elsewhere", methods=["POST"])
@app.queue_output(arg_name="msg", queue_name="jobs", connection="IdentityStorage")
def elsewhere(req: func.HttpRequest, msg: func.Out[str]) -> str:
    msg.set("not sent")
    return "ran"


@app.route(route="mailer", methods=["POST"])
@app.generic_output_binding(arg_name="mail", type="sendGrid", apiKey="SENDGRID_KEY")
def mailer(req: func.HttpRequest, mail: func.Out[str]) -> str:
    mail.set("{}")
    return "ran"


@app.route(route="outbox", methods=["POST"])
@app.queue_output(arg_name="outbox", queue_name="bind-outbox", connection=STORAGE)
def post_outbox(req: func.HttpRequest, outbox: func.Out[list]) -> func.HttpResponse:
    """Nobody listens on ``bind-outbox``: the test reads the messages as the host wrote them."""
    outbox.set(["text é", b"\x00bytes", {"json": True}])
    return func.HttpResponse(status_code=202)
