"""Generate the committed sample business data (``data/sql/data.sql``) from a fixed seed.

The output is deterministic: running this again produces the same bytes, and a test checks that the
committed file matches. The data is shaped so that typical questions have clear answers: West has
the most returns in Q3 (a faulty batch shipped there in the summer), Electronics has the highest
return rate, revenue peaks in November and December, and product revenues are well separated.

Usage: ``python scripts/generate_sample_data.py [--check]``
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_SQL = REPO_ROOT / "data" / "sql" / "data.sql"

SEED = 20250101
YEAR = 2025
N_CUSTOMERS = 400
N_ORDERS = 3000
BATCH = 500

REGIONS = [(1, "North"), (2, "South"), (3, "East"), (4, "West")]
REGION_WEIGHTS = {1: 25, 2: 20, 3: 25, 4: 30}

CATEGORIES = [(1, "Electronics"), (2, "Furniture"), (3, "Apparel"), (4, "Sports"), (5, "Books")]
# Probability that an order line is returned, by category (before the West summer batch effect).
RETURN_PROB = {1: 0.09, 2: 0.05, 3: 0.12, 4: 0.06, 5: 0.02}
RETURN_REASONS = {
    1: [("Defective", 5), ("Not as described", 2), ("Changed mind", 2), ("Damaged in transit", 1)],
    2: [("Damaged in transit", 4), ("Not as described", 2), ("Changed mind", 2), ("Arrived late", 1)],
    3: [("Wrong size", 6), ("Changed mind", 3), ("Not as described", 1)],
    4: [("Defective", 2), ("Wrong size", 3), ("Changed mind", 3), ("Arrived late", 1)],
    5: [("Damaged in transit", 3), ("Changed mind", 3), ("Arrived late", 1)],
}

# (product_id, name, category_id, list_price, popularity weight)
PRODUCTS: list[tuple[int, str, int, float, int]] = [
    (1, "Aurora Laptop 14", 1, 1299.00, 5),
    (2, "Nimbus Smartphone X", 1, 899.00, 7),
    (3, "Pulse Wireless Earbuds", 1, 149.00, 14),
    (4, "Vista 27in Monitor", 1, 329.00, 6),
    (5, "Echo Smart Speaker", 1, 99.00, 10),
    (6, "Volt Power Bank", 1, 39.00, 16),
    (7, "Oakline Office Chair", 2, 249.00, 6),
    (8, "Harbor Standing Desk", 2, 549.00, 4),
    (9, "Linden Bookshelf", 2, 179.00, 5),
    (10, "Cedar Coffee Table", 2, 219.00, 4),
    (11, "Maple Bar Stool", 2, 89.00, 6),
    (12, "Willow Floor Lamp", 2, 69.00, 7),
    (13, "Summit Rain Jacket", 3, 129.00, 9),
    (14, "Trail Running Shoes", 3, 119.00, 11),
    (15, "Classic Denim Jeans", 3, 59.00, 13),
    (16, "Merino Wool Sweater", 3, 89.00, 8),
    (17, "Everyday Cotton Tee", 3, 19.00, 18),
    (18, "Alpine Down Vest", 3, 149.00, 5),
    (19, "Ridge Mountain Bike", 4, 749.00, 3),
    (20, "Peak Yoga Mat", 4, 35.00, 12),
    (21, "Stride Treadmill", 4, 999.00, 2),
    (22, "Canyon Camping Tent", 4, 199.00, 5),
    (23, "Glide Kayak Paddle", 4, 79.00, 4),
    (24, "Core Dumbbell Set", 4, 129.00, 6),
    (25, "The Quiet Harbor", 5, 18.00, 12),
    (26, "Data at Scale", 5, 45.00, 7),
    (27, "Cooking with Fire", 5, 29.00, 9),
    (28, "A Brief History of Maps", 5, 24.00, 8),
    (29, "Modern Garden Design", 5, 35.00, 6),
    (30, "Kids Science Atlas", 5, 22.00, 10),
]

FIRST_NAMES = [
    "Ava", "Liam", "Noah", "Emma", "Olivia", "Mason", "Sophia", "Lucas", "Mia", "Ethan",
    "Isabella", "James", "Amelia", "Benjamin", "Harper", "Elijah", "Evelyn", "Henry", "Abigail", "Jack",
    "Chloe", "Daniel", "Grace", "Samuel", "Zoe", "David", "Nora", "Owen", "Leah", "Caleb",
]  # fmt: skip
LAST_NAMES = [
    "Smith", "Johnson", "Brown", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez", "Lopez", "Wilson",
    "Anderson", "Thomas", "Moore", "Jackson", "Martin", "Lee", "Perez", "Thompson", "White", "Harris",
    "Clark", "Lewis", "Walker", "Young", "Allen", "King", "Wright", "Scott", "Green", "Baker",
]  # fmt: skip
COMPANY_WORDS_A = [
    "Bluebird", "Granite", "Silver", "Redwood", "Northwind", "Lakeside", "Summit", "Harbor", "Copper", "Evergreen",
    "Pioneer", "Sunrise", "Riverbend", "Ironwood", "Golden", "Stonebridge", "Maplewood", "Brightside",
]  # fmt: skip
COMPANY_WORDS_B = [
    "Outfitters", "Logistics", "Cafe", "Studios", "Supply", "Consulting", "Labs", "Foods", "Traders", "Works",
]  # fmt: skip
CHANNELS = [("Online", 60), ("Store", 40)]
# Relative order volume by month (Jan..Dec): a February dip and a holiday peak.
MONTH_WEIGHTS = [7, 5, 7, 8, 8, 8, 9, 9, 8, 9, 12, 14]


@dataclass
class Tables:
    """All generated rows, by table, in insert order."""

    rows: dict[str, tuple[list[str], list[tuple[object, ...]]]]


def _weighted(rng: random.Random, pairs: Sequence[tuple[object, int]]) -> object:
    return rng.choices([p[0] for p in pairs], weights=[p[1] for p in pairs], k=1)[0]


_Row = tuple[object, ...]
_Product = tuple[int, str, int, float, int]


def generate() -> Tables:
    """Build every row of the sample dataset from the fixed seed."""
    rng = random.Random(SEED)
    tables: dict[str, tuple[list[str], list[_Row]]] = {}
    tables["regions"] = (["region_id", "name"], [(rid, name) for rid, name in REGIONS])
    tables["categories"] = (["category_id", "name"], [(cid, name) for cid, name in CATEGORIES])
    tables["products"] = (
        ["product_id", "name", "category_id", "list_price"],
        [(pid, name, cid, price) for pid, name, cid, price, _ in PRODUCTS],
    )
    customers, contacts, customer_region = _customers(rng)
    tables["customers"] = (["customer_id", "name", "segment", "region_id", "signup_date"], customers)
    tables["customer_contacts"] = (["customer_id", "email", "phone"], contacts)
    orders, items, returns = _orders(rng, customer_region)
    tables["orders"] = (["order_id", "customer_id", "region_id", "order_date", "channel"], orders)
    tables["order_items"] = (["order_item_id", "order_id", "product_id", "quantity", "unit_price"], items)
    tables["returns"] = (
        ["return_id", "order_item_id", "return_date", "reason", "quantity", "refund_amount"],
        returns,
    )
    return Tables(rows=tables)


def _customers(rng: random.Random) -> tuple[list[_Row], list[_Row], dict[int, int]]:
    """The customers, their contact details, and each customer's region."""
    customers: list[_Row] = []
    contacts: list[_Row] = []
    used: set[str] = set()
    customer_region: dict[int, int] = {}
    for cid in range(1, N_CUSTOMERS + 1):
        segment = "Business" if rng.random() < 0.3 else "Consumer"
        name = _unique_name(rng, segment, used)
        region_id = int(_weighted(rng, list(REGION_WEIGHTS.items())))  # type: ignore[call-overload]
        customer_region[cid] = region_id
        signup = date(2022, 1, 1) + timedelta(days=rng.randrange(0, 365 * 3 + 300))
        customers.append((cid, name, segment, region_id, signup.isoformat()))
        handle = name.lower().replace(" ", ".")
        contacts.append((cid, f"{handle}{cid}@example.com", f"+1-555-{rng.randrange(100, 999)}-{cid:04d}"))
    return customers, contacts, customer_region


def _unique_name(rng: random.Random, segment: str, used: set[str]) -> str:
    """A customer name not in ``used`` (and now added to it): a company for business customers, else a person."""
    while True:
        if segment == "Business":
            name = f"{rng.choice(COMPANY_WORDS_A)} {rng.choice(COMPANY_WORDS_B)}"
        else:
            name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        if name not in used:
            used.add(name)
            return name


def _order_dates(rng: random.Random) -> list[date]:
    """The dates of all orders of the year, weighted by month, oldest first."""
    order_dates: list[date] = []
    for _ in range(N_ORDERS):
        month = rng.choices(range(1, 13), weights=MONTH_WEIGHTS, k=1)[0]
        start = date(YEAR, month, 1)
        end = date(YEAR + (month == 12), month % 12 + 1, 1)
        order_dates.append(start + timedelta(days=rng.randrange((end - start).days)))
    order_dates.sort()
    return order_dates


@dataclass(frozen=True)
class _Order:
    """The order a line belongs to: what sets the line's price and how likely it is to come back."""

    order_id: int
    day: date
    region_id: int

    @property
    def in_faulty_batch(self) -> bool:
        """A faulty batch reached the West in the summer: many more returns there in Q3."""
        return self.region_id == 4 and date(YEAR, 6, 20) <= self.day <= date(YEAR, 9, 15)


def _orders(rng: random.Random, customer_region: dict[int, int]) -> tuple[list[_Row], list[_Row], list[_Row]]:
    """The orders, their lines and the returned lines."""
    # A few loyal customers order far more often than the rest.
    cust_weights = [12 if cid % 37 == 0 else (4 if cid % 11 == 0 else 1) for cid in range(1, N_CUSTOMERS + 1)]
    orders: list[_Row] = []
    items: list[_Row] = []
    returns: list[_Row] = []
    for oid, odate in enumerate(_order_dates(rng), start=1):
        cid = rng.choices(range(1, N_CUSTOMERS + 1), weights=cust_weights, k=1)[0]
        region_id = customer_region[cid]
        channel = _weighted(rng, CHANNELS)
        orders.append((oid, cid, region_id, odate.isoformat(), channel))
        order = _Order(oid, odate, region_id)
        for idx in _order_products(rng):
            _add_line(rng, order, PRODUCTS[idx], items, returns)
    return orders, items, returns


def _order_products(rng: random.Random) -> list[int]:
    """The distinct products (indexes into ``PRODUCTS``) of one order, by popularity, in index order."""
    prod_weights = [p[4] for p in PRODUCTS]
    n_lines = rng.choices([1, 2, 3, 4], weights=[45, 30, 17, 8], k=1)[0]
    chosen: set[int] = set()
    while len(chosen) < n_lines:
        chosen.add(rng.choices(range(len(PRODUCTS)), weights=prod_weights, k=1)[0])
    return sorted(chosen)


def _add_line(rng: random.Random, order: _Order, product: _Product, items: list[_Row], returns: list[_Row]) -> None:
    """Add one order line to ``items``, and to ``returns`` when the customer sends it back."""
    pid, _name, cat, price, _w = product
    qty = rng.choices([1, 2, 3, 4, 5], weights=[60, 22, 10, 5, 3] if cat == 5 else [78, 15, 5, 2, 0], k=1)[0]
    # November promotion: 10% off list price.
    unit_price = round(price * 0.9, 2) if order.day.month == 11 else price
    items.append((len(items) + 1, order.order_id, pid, qty, unit_price))
    prob = RETURN_PROB[cat]
    if order.in_faulty_batch:
        prob += 0.22
    if rng.random() < prob:
        returns.append(_return_row(rng, len(returns) + 1, len(items), order, cat, qty, unit_price))


def _return_row(
    rng: random.Random, return_id: int, item_id: int, order: _Order, cat: int, qty: int, unit_price: float
) -> _Row:
    """The return of (part of) one order line: when, why, how many and the refund."""
    rdate = min(order.day + timedelta(days=rng.randrange(3, 28)), date(YEAR, 12, 31))
    reason = _weighted(rng, RETURN_REASONS[cat])
    if order.in_faulty_batch and cat in (1, 4):
        reason = "Defective"
    rqty = rng.randint(1, qty)
    refund = rqty * unit_price
    if reason == "Changed mind":
        refund *= 0.85  # restocking fee
    return (return_id, item_id, rdate.isoformat(), reason, rqty, round(refund, 2))


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    text = str(value)
    if not text.isascii():
        raise ValueError(f"sample data must stay ASCII for portable inserts: {text!r}")
    return "'" + text.replace("'", "''") + "'"


def _batches(rows: list[tuple[object, ...]], size: int) -> Iterable[list[tuple[object, ...]]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def render(tables: Tables) -> str:
    """Render the rows as portable INSERT statements (SQLite and T-SQL accept the same text)."""
    out = [
        "-- Sample business data for Durable AI Jobs. Generated by scripts/generate_sample_data.py; do not edit.",
        "-- Portable INSERTs: ASCII strings, ISO dates as strings, at most 500 rows per statement.",
    ]
    for table, (columns, rows) in tables.rows.items():
        out.append(f"\n-- {table}: {len(rows)} rows")
        for batch in _batches(rows, BATCH):
            out.append(f"INSERT INTO {table} ({', '.join(columns)}) VALUES")
            out.append(",\n".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in batch) + ";")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write data/sql/data.sql, or with --check verify that the committed file is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if data.sql differs from the generator")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        current = DATA_SQL.read_text(encoding="utf-8") if DATA_SQL.exists() else ""
        if current != text:
            print(f"{DATA_SQL} is out of date; run scripts/generate_sample_data.py", file=sys.stderr)
            return 1
        return 0
    DATA_SQL.parent.mkdir(parents=True, exist_ok=True)
    DATA_SQL.write_text(text, encoding="utf-8")
    print(f"wrote {DATA_SQL} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
