"""Answer quality of the offline stack on held-out questions, scored against the sample data.

``python -m bench answers``, or ``python -m bench.answers [--verbose]``. Each question
runs the real executors in-process (plan, consult_rag, execute_azure_sql, generate_response) with the
offline LLM, the shipped catalog, the SQLite sample database and the shipped documents indexed into a
temporary file. Nothing is mocked: the figures are what a user of the offline mode gets. A failed step
is skipped (the orchestrator's default answer) and its message kept; an ask_user step ends the run.

Ground truth is computed here, directly from ``data/sample.db`` with sqlite3 (independent SQL), and
from document facts checked by document id. Each answer is scored:

- correct: the expected figure (in the catalog's format: ``$`` for currency, ``%`` for ratios) or
  label or document fact is in the answer, with the right citation for documents; a partial result is
  called partial ("showing 20 of 116", "at least 50") and no overall conclusion is drawn from it;
- partial: half of it (one part of a mixed question; the value without its format; the fact without
  its citation);
- wrong: anything else, including "not found" for a question the data answers;
- unanswered-correctly: an unanswerable question whose answer (or the step the user is asked about)
  says plainly that it is not found, and cites no passage.

Citations are scored from the answer's claims (shared/jobs/claims.py), each checked by the same checker as
in a job:

- claims verified: the share of the answer's claims the checker verifies against their own evidence (the
  analogue of groundedness);
- citation precision: of every source a claim cites (its cells of one SQL result, or its span of one passage),
  the share that supports the claim on its own;
- citation recall: of the expected facts an answer states (the figure, the row's label, the document fact),
  the share stated in a verified claim that cites the source holding it (the SQL result, the expected document).

"unsupported" counts answers that state an overall fact ("has the highest", "the lowest is") about a
result that did not reach the answer whole. Targets: every unanswerable question answered as such,
0 unsupported. Prints figures; asserts nothing.

The answer step gets its sources as the orchestrator builds them (at most 20 SQL rows), plus the SQL
step's ``row_count``, ``truncated`` and ``rows_shown``, so the writer knows when a result is partial.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What the orchestrator forwards to the answer step (orchestrators/job.py MAX_SQL_ROWS_TO_ANSWER).
ROWS_TO_ANSWER = 20

NOT_FOUND = re.compile(
    r"could not find|couldn't find|cannot find|can't find|not found|do(?:es)? not (?:address|cover|contain|hold|say)"
    r"|no (?:information|data|document)|cannot answer|can't answer|not covered|could not (?:map|match)",
    re.IGNORECASE,
)
OVERALL = re.compile(r"\b(has|have|share) the (highest|lowest)\b|\bthe (highest|lowest) is\b", re.IGNORECASE)


@dataclass
class Run:
    """What one question produced: the answer, its citations, and what steps failed or asked."""

    answer: str = ""
    citations: list[dict[str, Any]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # failed-step messages and ask_user questions
    truncated: bool = False  # a SQL result did not reach the answer whole
    claims: list[dict[str, Any]] = field(default_factory=list)  # as the answer step checked them
    sources: list[dict[str, Any]] = field(default_factory=list)  # what the answer step was given


def _db() -> sqlite3.Connection:
    from shared.providers.sql.sampledata import ensure_sample_db

    return sqlite3.connect(f"file:{ensure_sample_db()}?mode=ro", uri=True)


def scalar(sql: str) -> float:
    """One number straight from the sample database."""
    with _db() as conn:
        return float(conn.execute(sql).fetchone()[0])


def label(sql: str) -> str:
    """The first column of the first row, straight from the sample database."""
    with _db() as conn:
        return str(conn.execute(sql).fetchone()[0])


def count_rows(sql: str) -> int:
    """How many rows a query returns on the sample database."""
    with _db() as conn:
        return len(conn.execute(sql).fetchall())


_NUM = re.compile(r"(\$)?(-?\d[\d,]*(?:\.\d+)?)(\s*%)?")


def _numbers(text: str) -> list[tuple[float, str]]:
    out = []
    for m in _NUM.finditer(text):
        try:
            value = float(m.group(2).replace(",", ""))
        except ValueError:
            continue
        unit = "$" if m.group(1) else ("%" if m.group(3) else "")
        out.append((value, unit))
    return out


Score = str  # "correct" | "partial" | "wrong" | "unanswered-correctly"


def has_value(text: str, expected: float, fmt: str) -> Score:
    """Whether a figure is in the text: "correct" in the catalog's format, "partial" without it."""
    found = _numbers(text)
    if fmt == "ratio":
        if any(abs(v - expected * 100) < 0.011 and u == "%" for v, u in found):
            return "correct"
        return "partial" if any(abs(v - expected) < 0.00011 for v, _ in found) else "wrong"
    hits = [u for v, u in found if abs(v - expected) < 0.011]
    if not hits:
        return "wrong"
    if fmt == "currency":
        return "correct" if "$" in hits else "partial"
    return "correct"


def _cites(run: Run, prefix: str) -> bool:
    return any(str(c.get("source_id", "")).startswith(prefix) for c in run.citations)


@dataclass
class Fact:
    """An expected fact of a question: whether the answer states it, and whether a claim carries it, cited."""

    stated: Callable[[Run], bool]
    carried: Callable[[dict[str, Any]], bool]  # a verified claim that states it and cites its source


@dataclass
class Question:
    """A held-out question, its category and how to score an answer."""

    category: str  # "sql" | "documents" | "mixed" | "unanswerable"
    text: str
    check: Callable[[Run], Score]
    facts: list[Fact] = field(default_factory=list)


def _verified(claim: dict[str, Any]) -> bool:
    return (claim.get("check") or {}).get("status") == "verified"


def _cites_sql(claim: dict[str, Any]) -> bool:
    return any(e.get("column") or e.get("row") is not None for e in claim.get("evidence", []))


def _value_fact(expected: float, fmt: str) -> Fact:
    """The expected figure, in a verified claim on SQL cells (a ratio written as a percentage)."""
    from shared.jobs.claims import parse_figure

    def carried(claim: dict[str, Any]) -> bool:
        written = parse_figure(str(claim.get("figure") or ""))
        if written is None or not (_verified(claim) and _cites_sql(claim)):
            return False
        number = written.number / 100 if written.percent and fmt == "ratio" else written.number
        return abs(number - expected) <= max(written.tolerance, 0.011)

    return Fact(lambda r: has_value(r.answer, expected, fmt) != "wrong", carried)


def _label_fact(expected: str) -> Fact:
    """The expected row, named in a verified claim on SQL cells."""

    def carried(claim: dict[str, Any]) -> bool:
        return _verified(claim) and _cites_sql(claim) and expected.lower() in str(claim.get("text", "")).lower()

    return Fact(lambda r: expected.lower() in r.answer.split("\n\n")[0].lower(), carried)


def _doc_fact(fact: str, doc: str) -> Fact:
    """The document fact, in a verified claim citing a span of the expected document."""

    def carried(claim: dict[str, Any]) -> bool:
        cited = any(str(e.get("source_id", "")).startswith(doc) for e in claim.get("evidence", []))
        return _verified(claim) and cited and fact.lower() in str(claim.get("text", "")).lower()

    return Fact(lambda r: fact.lower() in r.answer.lower(), carried)


def value_q(text: str, sql: str, fmt: str) -> Question:
    """A SQL question whose answer is one figure."""
    expected = scalar(sql)
    return Question("sql", text, lambda r: has_value(r.answer, expected, fmt), [_value_fact(expected, fmt)])


def label_q(text: str, sql: str) -> Question:
    """A SQL question whose answer names one row (the first of ``sql``)."""
    expected = label(sql)

    def check(r: Run) -> Score:
        first = r.answer.split("\n\n")[0]
        return "correct" if expected.lower() in first.lower() else "wrong"

    return Question("sql", text, check, [_label_fact(expected)])


def partial_q(text: str, sql: str) -> Question:
    """A SQL question whose result is larger than what reaches the answer: it must say so, and not conclude."""
    total = count_rows(sql)

    def check(r: Run) -> Score:
        if OVERALL.search(r.answer):
            return "wrong"
        says_partial = re.search(rf"\bof {total:,}\b|\bof {total}\b|\bat least \d", r.answer) is not None
        return "correct" if says_partial else "partial"

    return Question("sql", text, check)


def doc_q(text: str, fact: str, doc: str, category: str = "documents") -> Question:
    """A document question: the fact must be in the answer and the document cited."""

    def check(r: Run) -> Score:
        if fact.lower() not in r.answer.lower():
            return "wrong"
        return "correct" if _cites(r, doc) else "partial"

    return Question(category, text, check, [_doc_fact(fact, doc)])


def mixed_q(text: str, sql: str, fmt: str, fact: str, doc: str) -> Question:
    """A question with a data part and a document part: both must be answered."""
    expected = scalar(sql)

    def check(r: Run) -> Score:
        data_ok = has_value(r.answer, expected, fmt) == "correct"
        doc_ok = fact.lower() in r.answer.lower() and _cites(r, doc)
        return "correct" if data_ok and doc_ok else ("partial" if data_ok or doc_ok else "wrong")

    return Question("mixed", text, check, [_value_fact(expected, fmt), _doc_fact(fact, doc)])


def unanswerable_q(text: str) -> Question:
    """A question neither the data nor the documents cover: the answer must say so and cite nothing."""

    def check(r: Run) -> Score:
        said = NOT_FOUND.search(r.answer) or any(NOT_FOUND.search(m) for m in r.messages)
        cites_docs = any(c.get("kind") == "document" for c in r.citations)
        figures = re.search(r"\[sql", r.answer) is not None
        return "unanswered-correctly" if said and not cites_docs and not figures else "wrong"

    return Question("unanswerable", text, check)


_SALES = (
    "FROM order_items oi JOIN orders o ON o.order_id = oi.order_id JOIN customers c ON c.customer_id = o.customer_id "
    "JOIN regions g ON g.region_id = o.region_id JOIN products p ON p.product_id = oi.product_id "
    "JOIN categories k ON k.category_id = p.category_id"
)
_RETURNS = (
    "FROM returns r JOIN order_items oi ON oi.order_item_id = r.order_item_id "
    "JOIN orders o ON o.order_id = oi.order_id "
    "JOIN regions g ON g.region_id = o.region_id JOIN products p ON p.product_id = oi.product_id "
    "JOIN categories k ON k.category_id = p.category_id"
)
_RATIO = "ROUND(1.0 * SUM(COALESCE(r.quantity, 0)) / SUM(oi.quantity), 4)"
_RATE = (
    "FROM order_items oi LEFT JOIN returns r ON r.order_item_id = oi.order_item_id "
    "JOIN products p ON p.product_id = oi.product_id JOIN categories k ON k.category_id = p.category_id"
)


def questions() -> list[Question]:
    """The held-out question set (none of these appear in the tests)."""
    rev = "SUM(oi.quantity * oi.unit_price)"
    return [
        # --- SQL -------------------------------------------------------------------------------
        value_q("What was our total turnover in 2025?", f"SELECT ROUND({rev}, 2) {_SALES}", "currency"),
        value_q(
            "How many orders came in through the store channel?",
            "SELECT COUNT(*) FROM orders WHERE channel = 'Store'",
            "count",
        ),
        value_q(
            "Average order value for business customers",
            f"SELECT ROUND({rev} / COUNT(DISTINCT o.order_id), 2) {_SALES} WHERE c.segment = 'Business'",
            "currency",
        ),
        value_q(
            "How many returns did we receive in Q2?",
            "SELECT COUNT(*) FROM returns WHERE return_date >= '2025-04-01' AND return_date < '2025-07-01'",
            "count",
        ),
        label_q(
            "Which category brought in the most revenue?", f"SELECT k.name {_SALES} GROUP BY 1 ORDER BY {rev} DESC"
        ),
        label_q(
            "Which region had the fewest orders in March?",
            "SELECT g.name FROM orders o JOIN regions g ON g.region_id = o.region_id "
            "WHERE o.order_date >= '2025-03-01' AND o.order_date < '2025-04-01' GROUP BY 1 ORDER BY COUNT(*) ASC",
        ),
        value_q(
            "Total refunded in the West region in Q3",
            f"SELECT ROUND(SUM(r.refund_amount), 2) {_RETURNS} WHERE g.name = 'West' AND r.return_date >= '2025-07-01' "
            "AND r.return_date < '2025-10-01'",
            "currency",
        ),
        value_q(
            "What is the return rate for Electronics?",
            f"SELECT {_RATIO} {_RATE} WHERE k.name = 'Electronics'",
            "ratio",
        ),
        value_q(
            "How many clients bought something in the North region?",
            "SELECT COUNT(DISTINCT customer_id) FROM orders o JOIN regions g ON g.region_id = o.region_id "
            "WHERE g.name = 'North'",
            "count",
        ),
        value_q(
            "How many items were sold online?",
            "SELECT SUM(oi.quantity) FROM order_items oi JOIN orders o ON o.order_id = oi.order_id "
            "WHERE o.channel = 'Online'",
            "count",
        ),
        value_q(
            "Number of returns for the Defective reason in the West",
            f"SELECT COUNT(*) {_RETURNS} WHERE r.reason = 'Defective' AND g.name = 'West'",
            "count",
        ),
        label_q(
            "Which product sold the most units?",
            f"SELECT p.name {_SALES} GROUP BY 1 ORDER BY SUM(oi.quantity) DESC",
        ),
        value_q(
            "What's the refund total for returns where the customer changed their mind?",
            "SELECT ROUND(SUM(refund_amount), 2) FROM returns WHERE reason = 'Changed mind'",
            "currency",
        ),
        value_q(
            "How many purchases did customer Isabella Davis make?",
            "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
            "WHERE c.name = 'Isabella Davis'",
            "count",
        ),
        label_q(
            "Which segment has the higher average order value?",
            f"SELECT c.segment {_SALES} GROUP BY 1 ORDER BY {rev} / COUNT(DISTINCT o.order_id) DESC",
        ),
        partial_q(
            "Revenue for each business customer",
            f"SELECT c.name {_SALES} WHERE c.segment = 'Business' GROUP BY 1",
        ),
        partial_q("Number of orders per customer", "SELECT customer_id FROM orders GROUP BY 1"),
        partial_q("Units sold by product", f"SELECT p.name {_SALES} GROUP BY 1"),
        value_q(
            "What was the gross sales amount in the South during the second half?",
            f"SELECT ROUND({rev}, 2) {_SALES} WHERE g.name = 'South' AND o.order_date >= '2025-07-01'",
            "currency",
        ),
        value_q(
            "How many units of Apparel did buyers return?",
            f"SELECT COUNT(*) {_RETURNS} WHERE k.name = 'Apparel'",
            "count",
        ),
        label_q(
            "Which channel had the lower return rate?",
            "SELECT o.channel FROM order_items oi LEFT JOIN returns r ON r.order_item_id = oi.order_item_id "
            "JOIN orders o ON o.order_id = oi.order_id GROUP BY 1 "
            "ORDER BY 1.0 * SUM(COALESCE(r.quantity, 0)) / SUM(oi.quantity) ASC",
        ),
        # --- documents ---------------------------------------------------------------------------
        doc_q("How long is the warranty on furniture?", "2-year", "policies/warranty.md"),
        doc_q("Can store credit be used to buy a gift card?", "not for gift cards", "policies/gift-cards"),
        doc_q("What does next-day delivery cost?", "$29.95", "policies/shipping-and-delivery.md"),
        doc_q("How many points do Gold members earn per dollar?", "1.5 points", "policies/loyalty-program.md"),
        doc_q("Who is the regional manager of the South region?", "Luis Ferreira", "operations/regional-operations"),
        doc_q(
            "Within how many days must returned items be inspected after they arrive?",
            "2 business days",
            "operations/returns-processing",
        ),
        doc_q("How much goodwill credit can a supervisor approve?", "$100", "support/customer-support"),
        doc_q("Do you take checks for online orders?", "do not accept checks", "faq/customer-faq.md"),
        doc_q("How long is store credit valid?", "12 months", "policies/gift-cards"),
        doc_q("What happens when a product is recalled?", "stop selling", "policies/product-safety"),
        doc_q("Is there a fee to return opened electronics?", "restocking fee", "policies/returns-and-refunds.md"),
        doc_q("How late are corporate invoices charged?", "1.5%", "business/corporate-account-terms"),
        # --- mixed -------------------------------------------------------------------------------
        mixed_q(
            "How many Electronics returns did the West have in Q3, and why did they rise?",
            f"SELECT COUNT(*) {_RETURNS} WHERE g.name = 'West' AND k.name = 'Electronics' "
            "AND r.return_date >= '2025-07-01' AND r.return_date < '2025-10-01'",
            "count",
            "faulty supplier batch",
            "operations/regional-operations",
        ),
        mixed_q(
            "What was the refund amount in the South in Q3, and what disrupted deliveries there?",
            f"SELECT ROUND(SUM(r.refund_amount), 2) {_RETURNS} WHERE g.name = 'South' "
            "AND r.return_date >= '2025-07-01' AND r.return_date < '2025-10-01'",
            "currency",
            "hurricane",
            "operations/regional-operations",
        ),
        mixed_q(
            "How many orders did the East region get in Q2, and what did the East pilot that quarter?",
            "SELECT COUNT(*) FROM orders o JOIN regions g ON g.region_id = o.region_id WHERE g.name = 'East' "
            "AND o.order_date >= '2025-04-01' AND o.order_date < '2025-07-01'",
            "count",
            "same-day store pickup",
            "operations/regional-operations",
        ),
        mixed_q(
            "What is the return rate for Furniture, and how long is the return window?",
            f"SELECT {_RATIO} {_RATE} WHERE k.name = 'Furniture'",
            "ratio",
            "30 days",
            "policies/returns-and-refunds.md",
        ),
        # --- unanswerable ----------------------------------------------------------------------
        unanswerable_q("What's the weather in Paris tomorrow?"),
        unanswerable_q("What is our employee turnover rate?"),
        unanswerable_q("What is the parental leave policy?"),
        unanswerable_q("What was the profit margin on Books?"),
        unanswerable_q("How many support tickets were opened in March?"),
        unanswerable_q("What is the marketing budget for 2026?"),
        unanswerable_q("Does the company offer pet insurance?"),
        unanswerable_q("How much stock is left in the Reno warehouse?"),
        unanswerable_q("What is the CEO's salary?"),
        unanswerable_q("How many website visitors did we have in Q3?"),
        unanswerable_q("What is the average delivery time in days for the North?"),
        unanswerable_q("Which supplier has the best payment terms?"),
        unanswerable_q("What was the revenue growth rate versus 2024?"),
    ]


# --- running a question through the executors -----------------------------------------------------


def _clients(tmp: Path) -> Any:
    from shared.providers.clients import Clients
    from shared.runtime.settings import Settings

    settings = Settings(llm_provider="offline", local_index_path=tmp / "docs.sqlite3")
    return Clients(settings)


# The real-model tier's per-step limits (Gemma 3 270M on shared CPU cores): a short answer, a long deadline.
REAL_MODEL_CONSTRAINTS = {"max_tokens": 400, "timeout_ms": 300_000}


def _call(clients: Any, kind: str, task: dict[str, Any], context: dict[str, Any] | None = None) -> dict[str, Any]:
    from shared.executors.runner import run_executor

    payload = {"task_id": f"bench-{kind}", "executor_type": kind, "task": task, "execution_context": context or {}}
    if clients.settings.llm_provider != "offline":
        payload["constraints"] = REAL_MODEL_CONSTRAINTS
    return run_executor(payload, clients=clients)


def _sources(outputs: dict[str, dict[str, Any]], wanted: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The answer's sources as the orchestrator builds them, with the SQL step's true size alongside."""
    sources: list[dict[str, Any]] = []
    cut = False
    for step_id in wanted:
        out = outputs.get(step_id) or {}
        for chunk in out.get("chunks", []):
            sources.append(
                {"source_id": chunk["source_id"], "kind": "document", "title": chunk.get("title"),
                 "content": chunk.get("content", "")}
            )  # fmt: skip
        if "sql" in out and "rows" in out:
            rows = out.get("rows", [])
            shown = rows[:ROWS_TO_ANSWER]
            cut = cut or bool(out.get("truncated")) or len(shown) < len(rows)
            sources.append(
                {"source_id": out.get("source_id") or f"sql:{step_id}", "kind": "sql", "title": out.get("question"),
                 "sql": out["sql"], "columns": out.get("columns", []), "rows": shown,
                 "row_count": out.get("row_count", len(rows)), "truncated": bool(out.get("truncated")),
                 "rows_shown": len(shown)}
                | ({"verified_query": out["verified_query"]} if out.get("verified_query") else {})
            )  # fmt: skip
    return sources, cut


def run_question(clients: Any, question: str, planner: Any = None) -> Run:
    """Plan a question and run its steps as the orchestrator would (a failed step is skipped).

    ``planner``: other clients for the plan alone (the real-model tier plans offline: see ``main``).
    """
    run = Run()
    planned = _call(planner or clients, "plan", {"question": question})
    if planned["status"] == "failed":
        run.messages.append(planned["error"]["message"])
        return run
    outputs: dict[str, dict[str, Any]] = {}
    for step in planned["result"]["steps"]:
        kind, task = step["kind"], step.get("input") or {}
        if kind == "ask_user":
            run.messages.append(str(task.get("question", "")))
            return run  # the job waits for a person here
        if kind == "generate_response":
            sources, run.truncated = _sources(outputs, step.get("depends_on") or list(outputs))
            out = _call(clients, kind, task, {"sources": sources})
            if out["status"] == "failed":
                run.messages.append(out["error"]["message"])
            else:
                run.answer = out["result"]["answer"]
                run.citations = out["result"].get("citations", [])
                run.claims = out["result"].get("claims", [])
                run.sources = sources
            continue
        out = _call(clients, kind, task)
        if out["status"] == "failed":
            run.messages.append(out["error"]["message"])  # shown to the user, who skips the step
        else:
            outputs[step["id"]] = out["result"] or {}
    return run


@dataclass
class CitationScore:
    """Claims and citations summed over questions: verified claims, precision and recall of their citations."""

    claims: int = 0
    verified: int = 0
    cited: int = 0  # (claim, source) pairs
    supporting: int = 0  # of those, the pairs whose source supports the claim on its own
    facts_stated: int = 0
    facts_carried: int = 0
    answers: int = 0  # answers with text
    unclaimed: int = 0  # of those, the ones with no claims (their summary says nothing in them is checked)

    def add(self, q: Question, run: Run) -> None:
        """Score one answer's claims (checked again here, per cited source) and its expected facts."""
        from shared.jobs.claims import Claim, ClaimSource, check_claims

        sources = [ClaimSource.model_validate(s) for s in run.sources]
        formats = _formats()
        self.claims += len(run.claims)
        self.answers += bool(run.answer.strip())
        self.unclaimed += bool(run.answer.strip()) and not run.claims
        self.verified += sum(1 for c in run.claims if _verified(c))
        for raw in run.claims:
            claim = Claim.model_validate(raw)
            for source_id in dict.fromkeys(e.source_id for e in claim.evidence):
                alone = claim.model_copy(update={"evidence": [e for e in claim.evidence if e.source_id == source_id]})
                [checked] = check_claims([alone], sources, formats)
                self.cited += 1
                self.supporting += checked.check.status == "verified"
        for fact in q.facts:
            if fact.stated(run):
                self.facts_stated += 1
                self.facts_carried += any(fact.carried(c) for c in run.claims)

    def lines(self) -> list[str]:
        """The figures, as printed."""

        def pct(a: int, b: int) -> str:
            return f"{100 * a / b:.0f}% ({a}/{b})" if b else "n/a"

        return [
            f"claims verified: {pct(self.verified, self.claims)}",
            f"citation precision (each cited source supports its claim): {pct(self.supporting, self.cited)}",
            f"citation recall (each stated fact carried by a verified claim citing its source): "
            f"{pct(self.facts_carried, self.facts_stated)}",
            f"answers with no claims (nothing in them checked): {self.unclaimed} of {self.answers}",
        ]


_FORMATS: dict[str, str] = {}


def _formats() -> dict[str, str]:
    if not _FORMATS:
        from shared.providers.sql.catalog import load_catalog

        _FORMATS.update({m.name: m.format for m in load_catalog().metrics})
    return _FORMATS


@contextmanager
def _model(real: bool, tmp: Path) -> Iterator[tuple[Any, Any, str]]:
    """(clients, planner clients or None, label): the offline model, or the real-model tier's server."""
    offline = _clients(tmp)
    if not real:
        yield offline, None, "offline model"
        return
    from shared.providers.clients import Clients
    from shared.runtime.settings import Settings
    from tests.realmodel.server import MODEL_NAME, LlamaServer, installed

    missing = installed()
    if missing is not None:
        raise SystemExit(f"the real-model tier is not installed: {missing}")
    server = LlamaServer(tmp / "llama.log").start()
    try:
        settings = Settings(
            llm_provider="openai",
            openai_base_url=server.base_url,
            openai_model=MODEL_NAME,
            local_index_path=tmp / "docs.sqlite3",
            partial_output_path=tmp / "partial.sqlite3",
            model_prices={MODEL_NAME: {"input_per_million": 0, "output_per_million": 0}},  # type: ignore[dict-item]
        )
        yield Clients(settings), offline, f"{MODEL_NAME} on llama.cpp (plans by the offline planner)"
    finally:
        server.stop()


CATEGORIES = ("sql", "documents", "mixed", "unanswerable")
SCORES = ("correct", "partial", "wrong", "unanswered-correctly")


def main(argv: list[str]) -> int:
    """Run every question and print the scores per category."""
    parser = argparse.ArgumentParser(prog="python -m bench answers")
    parser.add_argument("--verbose", action="store_true", help="print each question, its score and answer")
    parser.add_argument(
        "--real-model",
        action="store_true",
        help="the SQL writer and the answer writer are the real-model tier's llama.cpp server (Gemma 3 270M, "
        "make realmodel); plans stay the offline planner's, since the 270M model does not plan these questions",
    )
    parser.add_argument("--every", type=int, default=1, help="run every N-th question only (a slow model)")
    args = parser.parse_args(argv)
    qs = questions()[:: max(1, args.every)]
    table: dict[str, Counter[str]] = {c: Counter() for c in CATEGORIES}
    unsupported = 0
    cites = CitationScore()
    with tempfile.TemporaryDirectory() as tmp, _model(args.real_model, Path(tmp)) as (clients, planner, label):
        for q in qs:
            run = run_question(clients, q.text, planner)
            score = q.check(run)
            table[q.category][score] += 1
            cites.add(q, run)
            if run.truncated and OVERALL.search(run.answer):
                unsupported += 1
            if args.verbose:
                print(f"\n[{q.category}] {score}: {q.text}")
                for m in run.messages:
                    print(f"  step message: {m}")
                print("  " + run.answer.replace("\n", "\n  ")[:900])
                for claim in run.claims:
                    verdict = claim.get("check") or {}
                    text = str(claim.get("text"))[:100]
                    print(f"  claim {verdict.get('status')}: {text} ({verdict.get('reason')})")
    print(f"{len(qs)} held-out questions, {label}, sample data")
    print()
    print(f"{'category':<14}" + "".join(f"{s:>22}" for s in SCORES) + f"{'total':>8}")
    for c in CATEGORIES:
        row = table[c]
        print(f"{c:<14}" + "".join(f"{row[s]:>22}" for s in SCORES) + f"{sum(row.values()):>8}")
    unanswerable = table["unanswerable"]
    print(
        f"\nunanswerable said so: {unanswerable['unanswered-correctly']}/{sum(unanswerable.values())}; "
        f"answers drawing an overall conclusion from a partial result: {unsupported}"
    )
    print()
    print("\n".join(cites.lines()))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
