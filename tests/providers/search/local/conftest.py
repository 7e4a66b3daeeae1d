"""Fixtures for the document tests: small real corpora in tmp folders, and the shipped corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.make_sample_pdf import render_text_pdf
from shared.ingest.pipeline import ingest
from shared.providers.search.local import LocalIndex
from shared.runtime.settings import DATA_DIR

CORPUS_DIR = DATA_DIR / "docs"


def write_pdf(path: Path, title: str, paragraphs: list[tuple[str, str]]) -> Path:
    """Write a real PDF with headings ("h") and paragraphs ("p")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render_text_pdf(title, [("title", title), *paragraphs]))
    return path


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    """A folder with one markdown, one text and one PDF document."""
    root = tmp_path / "docs"
    (root / "policies").mkdir(parents=True)
    (root / "policies" / "Returns Policy.md").write_text(
        "---\ntags: returns, money\n---\n# Returns\n\nIntro line about returns.\n\n"
        "## Refund timing\n\nRefunds are paid within 5 business days. Card issuers may take longer.\n\n"
        "## Exchanges\n\n- Exchanges are free.\n- Sizes can be swapped once.\n",
        encoding="utf-8",
    )
    (root / "notes.txt").write_text(
        "Warehouse Notes\n\nSHIPPING\n\nParcels leave the dock at noon every weekday.\n", encoding="utf-8"
    )
    write_pdf(
        root / "terms" / "business.pdf",
        "Business Terms",
        [("h", "Payment"), ("p", "Invoices are due within 30 days. Late invoices accrue interest.")],
    )
    return root


@pytest.fixture(scope="session")
def corpus_index(tmp_path_factory: pytest.TempPathFactory) -> LocalIndex:
    """The shipped corpus (data/docs) indexed into a private tmp file."""
    index_path = tmp_path_factory.mktemp("corpus-index") / "docs.sqlite3"
    return LocalIndex(index_path, CORPUS_DIR)


def build(folder: Path, index_path: Path) -> LocalIndex:
    """Ingest a folder into an index file and open it without a documents folder."""
    from shared.providers.search.local import LocalIndexSink

    ingest(folder, LocalIndexSink(index_path))
    return LocalIndex(index_path)
