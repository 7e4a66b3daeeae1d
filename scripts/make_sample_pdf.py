"""Write the sample corpus PDF (``data/docs/business/corporate-account-terms.pdf``) reproducibly.

A minimal PDF 1.4 writer with no dependency: standard Helvetica fonts, WinAnsi text, no timestamps,
so the same input always gives the same bytes. Run ``python -m scripts.make_sample_pdf`` after
editing the text below; tests check that the committed file matches this script's output.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent.parent / "data" / "docs" / "business" / "corporate-account-terms.pdf"

PAGE_WIDTH, PAGE_HEIGHT = 612, 792  # US Letter, points
MARGIN = 72
BODY_SIZE, HEAD_SIZE, TITLE_SIZE = 10, 12, 16
LEADING = 14
WRAP = 92  # characters per body line at 10 pt Helvetica on a 468 pt measure

Block = tuple[str, str]  # ("title" | "h" | "p", text)

TITLE = "Corporate Account Terms"
BLOCKS: list[Block] = [
    ("title", "Larkfield Supply Co. - Corporate Account Terms"),
    (
        "p",
        "These terms apply to businesses that buy from Larkfield Supply Co. on a corporate account. They "
        "replace the consumer Returns and Refunds Policy and the consumer discounts for every order placed "
        "on the account. They apply in all four regions: North, South, East and West.",
    ),
    ("h", "Opening an account"),
    (
        "p",
        "A business can apply for a corporate account with its legal name, tax identification number and a "
        "trade reference. Approval takes up to 5 business days. Tax-exempt organizations must upload a "
        "valid exemption certificate for each state they ship to before tax-free orders can be placed.",
    ),
    ("h", "Invoicing and payment"),
    (
        "p",
        "Approved accounts are invoiced on net 30 terms from the invoice date, up to a credit limit set at "
        "approval and reviewed every quarter. Invoices that are not paid within 30 days accrue a late "
        "charge of 1.5% per month on the overdue amount, and new orders are put on hold while any invoice "
        "is more than 15 days overdue.",
    ),
    ("h", "Volume discounts"),
    (
        "p",
        "Corporate accounts receive a volume discount based on their spend in the previous calendar "
        "quarter: 5% from $5,000, 8% from $15,000 and 12% from $40,000. The discount is applied to product "
        "prices on every invoice and cannot be combined with promotional codes, seasonal sale prices or "
        "the consumer quantity discount.",
    ),
    ("h", "Returns on business orders"),
    (
        "p",
        "Business orders can be returned within 30 days of delivery, in unopened original packaging, for a "
        "credit to the account. Bulk orders of 10 or more units of the same item that are returned for a "
        "reason other than a defect carry a 20% restocking fee instead of the consumer 15% fee. There is no "
        "store-credit period for business orders: after 30 days only defective items are accepted, under "
        "the Warranty Policy. Items damaged in transit must be reported within 48 hours of delivery, as for "
        "consumer orders.",
    ),
    ("h", "Delivery for business orders"),
    (
        "p",
        "Business orders over $2,500 ship by freight at no charge to a commercial address with a loading "
        "dock. Deliveries to addresses without a dock are charged at the consumer freight rates. Delivery "
        "dates are confirmed by the account manager before dispatch.",
    ),
    ("h", "Account management"),
    (
        "p",
        "Every corporate account has a named account manager in its home region. Account managers review "
        "purchases, returns and discounts with the customer once a quarter and can approve exceptions to "
        "these terms in writing.",
    ),
]


def _escape(text: str) -> str:
    # PDF literal strings need backslash, parentheses escaped; WinAnsi covers Latin-1 only.
    safe = text.encode("latin-1", errors="replace").decode("latin-1")
    return safe.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _lines(blocks: Sequence[Block]) -> list[tuple[str, int, str]]:
    """Lay blocks out as (font, size, text) lines; an empty text is a blank line."""
    out: list[tuple[str, int, str]] = []
    for kind, text in blocks:
        if kind == "title":
            out += [("F2", TITLE_SIZE, text), ("F1", BODY_SIZE, "")]
        elif kind == "h":
            out += [("F2", HEAD_SIZE, text)]
        else:
            out += [("F1", BODY_SIZE, line) for line in textwrap.wrap(text, WRAP)]
            out.append(("F1", BODY_SIZE, ""))
    return out


def render_text_pdf(title: str, blocks: Sequence[Block]) -> bytes:
    """Render blocks of text as a small multi-page PDF and return its bytes."""
    per_page = (PAGE_HEIGHT - 2 * MARGIN) // LEADING
    lines = _lines(blocks)
    pages = [lines[i : i + per_page] for i in range(0, len(lines), per_page)] or [[]]

    objects: list[bytes] = []  # object n is objects[n - 1]
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(b"")  # Pages, filled in once the page objects are numbered
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>")
    page_ids: list[int] = []
    for page in pages:
        ops = [f"BT {LEADING} TL {MARGIN} {PAGE_HEIGHT - MARGIN} Td"]
        for font, size, text in page:
            ops.append(f"/{font} {size} Tf ({_escape(text)}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        content_id = len(objects)
        objects.append(
            (
                f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_WIDTH} {PAGE_HEIGHT}] "
                f"/Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents {content_id} 0 R >>"
            ).encode()
        )
        page_ids.append(len(objects))
    kids = " ".join(f"{i} 0 R" for i in page_ids)
    objects[1] = f"<< /Type /Pages /Kids [{kids}] /Count {len(page_ids)} >>".encode()
    objects.append(f"<< /Title ({_escape(title)}) /Producer (durable-ai-jobs make_sample_pdf) >>".encode("latin-1"))
    info_id = len(objects)

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        info_id,
        xref_at,
    )
    return bytes(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the corpus PDF (or the path given as the only argument)."""
    args = list(sys.argv[1:] if argv is None else argv)
    target = Path(args[0]) if args else OUTPUT
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(render_text_pdf(TITLE, BLOCKS))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
