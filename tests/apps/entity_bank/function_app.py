"""Bank account entities and a transfer orchestration (the public samples' bank pattern).

The Python SDK has no critical sections (``context.lock`` is .NET only), so a transfer relies on what
entities guarantee: each account runs one operation at a time, in order, and ``withdraw`` checks the
balance inside that operation. A transfer withdraws first and deposits only after the withdrawal
succeeded, so no money is made or lost and no account goes below zero however many transfers race.
"""

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


class InsufficientFunds(Exception):
    """A withdrawal larger than the balance."""


@app.entity_trigger(context_name="context", entity_name="Account")
def account(context: df.DurableEntityContext) -> None:
    """deposit / withdraw / balance / close on one account; amounts are positive integers (cents)."""
    balance = context.get_state(lambda: 0)
    operation = context.operation_name
    if operation == "balance":
        context.set_result(balance)
        return
    if operation == "close":
        context.set_result(balance)
        context.destruct_on_exit()  # after set_result, which marks the entity as existing
        return
    amount = context.get_input()
    if not isinstance(amount, int) or amount <= 0:
        raise ValueError(f"amount must be a positive integer, got {amount!r}")
    if operation == "deposit":
        balance += amount
    elif operation == "withdraw":
        if amount > balance:
            raise InsufficientFunds(f"insufficient funds: balance {balance}, asked {amount}")
        balance -= amount
    else:
        raise ValueError(f"unknown operation {operation}")
    context.set_state(balance)
    context.set_result(balance)


@app.route(route="orchestrators/{functionName}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def http_start(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Start the orchestrator named in the URL with the JSON body as input."""
    instance_id = await client.start_new(req.route_params["functionName"], client_input=req.get_json())
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def transfer(context: df.DurableOrchestrationContext):
    """Move ``amount`` from one account to another, or report why not."""
    args = context.get_input()
    source = df.EntityId("Account", args["from"])
    target = df.EntityId("Account", args["to"])
    try:
        left = yield context.call_entity(source, "withdraw", args["amount"])
    except Exception as exc:  # the account's own error: nothing was withdrawn
        return {"ok": False, "reason": str(exc)}
    received = yield context.call_entity(target, "deposit", args["amount"])
    return {"ok": True, "source_balance": left, "target_balance": received}


@app.orchestration_trigger(context_name="context")
def open_accounts(context: df.DurableOrchestrationContext):
    """Deposit an opening amount in each account, all at once."""
    deposits = context.get_input()
    calls = [context.call_entity(df.EntityId("Account", key), "deposit", amount) for key, amount in deposits.items()]
    return (yield context.task_all(calls))
