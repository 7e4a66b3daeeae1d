"""Custom classes as orchestration and activity payloads through to_json/from_json."""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


class Order:
    """An order line the activities price."""

    def __init__(self, sku: str, quantity: int, unit_price: float) -> None:
        self.sku = sku
        self.quantity = quantity
        self.unit_price = unit_price

    @staticmethod
    def to_json(obj: Order) -> dict[str, Any]:
        """Serialise for the durable payload."""
        return {"sku": obj.sku, "quantity": obj.quantity, "unit_price": obj.unit_price}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Order:
        """Rebuild from the durable payload."""
        return Order(data["sku"], data["quantity"], data["unit_price"])


class Invoice:
    """The priced result."""

    def __init__(self, lines: list[str], total: float) -> None:
        self.lines = lines
        self.total = total

    @staticmethod
    def to_json(obj: Invoice) -> dict[str, Any]:
        """Serialise for the durable payload."""
        return {"lines": obj.lines, "total": obj.total}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Invoice:
        """Rebuild from the durable payload."""
        return Invoice(data["lines"], data["total"])


@app.route(route="invoice", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_invoice(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    """Body: a list of {"sku","quantity","unit_price"}; started with Order objects as input."""
    orders = [Order(o["sku"], o["quantity"], o["unit_price"]) for o in req.get_json()]
    instance_id = await client.start_new("make_invoice", None, orders)
    return client.create_check_status_response(req, instance_id)


@app.orchestration_trigger(context_name="context")
def make_invoice(context: df.DurableOrchestrationContext):
    """Price each Order in an activity (objects cross the boundary), then total them into an Invoice."""
    orders = context.get_input()
    if not all(isinstance(o, Order) for o in orders):
        raise TypeError(f"expected Order objects, got {[type(o).__name__ for o in orders]}")
    priced = []
    for order in orders:
        priced.append((yield context.call_activity("price_order", order)))
    invoice = yield context.call_activity("total_invoice", priced)
    if not isinstance(invoice, Invoice):
        raise TypeError(f"expected an Invoice, got {type(invoice).__name__}")
    return {"lines": invoice.lines, "total": invoice.total, "type": type(invoice).__name__}


@app.activity_trigger(input_name="order")
def price_order(order: Order) -> Order:
    """Apply a 10% discount from 10 units up; returns the Order with its effective unit price."""
    if not isinstance(order, Order):
        raise TypeError(f"expected an Order, got {type(order).__name__}")
    price = order.unit_price * (0.9 if order.quantity >= 10 else 1.0)
    return Order(order.sku, order.quantity, round(price, 2))


@app.activity_trigger(input_name="orders")
def total_invoice(orders: list[Order]) -> Invoice:
    """Build the Invoice."""
    lines = [f"{o.sku} x{o.quantity} @ {o.unit_price:.2f}" for o in orders]
    return Invoice(lines, round(sum(o.quantity * o.unit_price for o in orders), 2))
