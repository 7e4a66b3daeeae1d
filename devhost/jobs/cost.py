"""The job's cost in one line for ``ask`` and ``jobs show`` (the breakdown is the view's ``cost``, with --json)."""

from __future__ import annotations

from typing import Any


def _quantity(value: Any) -> str:
    number = float(value or 0)
    return f"{number:.0f}" if number == int(number) else f"{number:.3g}"


def cost_line(view: dict[str, Any]) -> str | None:
    """'cost: $0.000014 USD + price unknown: storage.transactions 43 transaction (azure_storage, …)', or None."""
    cost = view.get("cost")
    if not isinstance(cost, dict):
        return None
    if cost.get("error"):
        return f"cost: not available ({cost['error']})"
    total = float(cost.get("total") or 0)
    line = f"cost: ${total:.6f} {cost.get('currency', 'USD')}"
    unknown = [u for u in cost.get("unknown") or [] if isinstance(u, dict)]
    if unknown:
        shown = ", ".join(f"{u.get('meter')} {_quantity(u.get('quantity'))} {u.get('unit')}" for u in unknown[:4])
        more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        line += f" + price unknown: {shown}{more}"
    table = cost.get("price_table") or {}
    return f"{line} ({cost.get('backend')}, {cost.get('hosting')}; prices {table.get('version')})"


def quote_line(view: dict[str, Any]) -> str | None:
    """'quote: $0.000120 to $0.031000 USD + price unknown: storage.transactions 31-271 transaction (prices 2026-11)'."""
    quote = view.get("quote")
    if not isinstance(quote, dict):
        return None
    currency = quote.get("currency", "USD")
    line = f"quote: ${float(quote.get('low') or 0):.6f} to ${float(quote.get('high') or 0):.6f} {currency}"
    unknown = [u for u in quote.get("unknown") or [] if isinstance(u, dict)]
    if unknown:
        ranges = [f"{_quantity(u.get('low'))}-{_quantity(u.get('high'))}" for u in unknown[:4]]
        shown = ", ".join(f"{u.get('meter')} {r} {u.get('unit')}" for u, r in zip(unknown, ranges, strict=False))
        more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        line += f" + price unknown: {shown}{more}"
    return f"{line} (prices {quote.get('price_table_version')})"
