"""Ingestion: parsing md/txt/pdf, chunking, stable ids, bad files, the CLI, reuse of unchanged documents."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.make_sample_pdf import BLOCKS, OUTPUT, TITLE, render_text_pdf
from shared.ingest.chunking import chunk_sections, parse_markdown, parse_plain, split_sentences
from shared.ingest.models import IngestedDocument, SkippedFile
from shared.ingest.pipeline import ingest, iter_chunks, iter_documents, main
from shared.ingest.sources import doc_id_for, folder_fingerprint
from shared.providers.search.local import LocalIndexSink, read_meta
from shared.runtime.settings import REPO_ROOT
from tests.providers.search.local.conftest import CORPUS_DIR, write_pdf


def test_doc_id_rule() -> None:
    assert doc_id_for("policies/Returns Policy.md") == "policies/returns-policy.md"
    assert doc_id_for("Policies\\Returns & Refunds.md") == "policies/returns-refunds.md"
    assert doc_id_for("faq/Café notes.txt") == "faq/café-notes.txt"
    assert doc_id_for("a//b/c.pdf") == "a/b/c.pdf"


def test_markdown_sections_headings_and_tags() -> None:
    parsed = parse_markdown(
        "---\ntitle: Front Title\ntags: [Returns, Store Credit]\n---\n# Heading One\n\nIntro.\n\n"
        "## Part A\n\nText **bold** and [a link](http://x).\n\n### Sub\n\n- item one\n- item two\n\n"
        "Setext heading\n--------------\n\nUnder setext.\n\n```\n# not a heading\n```\n"
    )
    assert parsed.title == "Front Title"
    assert parsed.tags == ["returns", "store-credit"]
    assert [s.heading for s in parsed.sections] == ["", "Part A", "Part A > Sub", "Setext heading"]
    assert parsed.sections[1].paragraphs == ["Text bold and a link."]
    assert parsed.sections[2].paragraphs == ["- item one", "- item two"]
    assert "# not a heading" in " ".join(parsed.sections[3].paragraphs)


def test_plain_text_title_and_heading_lines() -> None:
    parsed = parse_plain("My Title\n\nFIRST PART\n\nBody one continues\nover two lines.\n\nSecond part\nBody two.\n")
    assert parsed.title == "My Title"
    assert [(s.heading, s.paragraphs) for s in parsed.sections] == [
        ("First part", ["Body one continues over two lines."]),
        ("Second part", ["Body two."]),
    ]


def test_sentences_keep_abbreviations() -> None:
    text = "Open 8 a.m. to 8 p.m. Eastern Time daily. See e.g. the FAQ. Prices are in U.S. dollars! Done?"
    assert split_sentences(text) == [
        "Open 8 a.m. to 8 p.m. Eastern Time daily.",
        "See e.g. the FAQ.",
        "Prices are in U.S. dollars!",
        "Done?",
    ]


def test_chunks_are_bounded_and_overlap() -> None:
    sentences = [f"Sentence number {i} talks about refunds and store credit in detail." for i in range(40)]
    parsed = parse_markdown("# T\n\n## Long\n\n" + " ".join(sentences) + "\n")
    chunks = chunk_sections(parsed.sections, max_chars=300, overlap_chars=120)
    assert len(chunks) > 5
    assert all(len(c.content) <= 300 and c.heading == "Long" for c in chunks)
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        last = split_sentences(prev.content)[-1]
        assert nxt.content.startswith(last)  # the last sentence is repeated
    joined = " ".join(c.content for c in chunks)
    assert all(s in joined for s in sentences)


def test_overlong_sentence_is_split_at_words() -> None:
    parsed = parse_plain("T\n\n" + "word " * 400)
    chunks = chunk_sections(parsed.sections, max_chars=200, overlap_chars=0)
    assert all(len(c.content) <= 200 for c in chunks)
    assert sum(c.content.count("word") for c in chunks) == 400


def test_ingests_md_txt_pdf_with_titles_headings_and_ids(small_corpus: Path) -> None:
    docs = {d.doc_id: d for d in iter_documents(small_corpus) if isinstance(d, IngestedDocument)}
    assert set(docs) == {"notes.txt", "policies/returns-policy.md", "terms/business.pdf"}
    md = docs["policies/returns-policy.md"]
    assert md.title == "Returns" and md.tags == ["money", "policies", "returns"]
    assert [(c.source_id, c.heading) for c in md.chunks] == [
        ("policies/returns-policy.md#1", ""),
        ("policies/returns-policy.md#2", "Refund timing"),
        ("policies/returns-policy.md#3", "Exchanges"),
    ]
    assert md.chunks[1].display_title == "Returns — Refund timing"
    assert md.chunks[2].content == "- Exchanges are free.\n- Sizes can be swapped once."
    txt = docs["notes.txt"]
    assert txt.title == "Warehouse Notes" and txt.chunks[0].heading == "Shipping"
    pdf = docs["terms/business.pdf"]
    assert pdf.title == "Business Terms"
    assert pdf.chunks[0].heading == "Payment" and pdf.chunks[0].page == 1
    assert "Invoices are due within 30 days." in pdf.chunks[0].content


def test_ids_are_stable_across_runs_and_locations(small_corpus: Path, tmp_path: Path) -> None:
    first = [(c.source_id, c.content) for c in iter_chunks(small_corpus)]
    moved = tmp_path / "elsewhere" / "copy"
    moved.parent.mkdir()
    os.rename(small_corpus, moved)
    second = [(c.source_id, c.content) for c in iter_chunks(moved)]
    assert first == second
    assert len({sid for sid, _ in first}) == len(first)


def _bad_files(root: Path) -> dict[str, str]:
    """Write one bad file of each kind; return path -> expected words in the reason."""
    (root / "empty.md").write_text("   \n\n", encoding="utf-8")
    (root / "latin1.txt").write_bytes("Caf\xe9 prices are fixed.".encode("latin-1"))
    (root / "junk.txt").write_bytes(bytes(range(256)) * 4)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ngarbage without xref")
    (root / "fake.pdf").write_bytes(b"this is not a pdf at all")
    (root / "blank.pdf").write_bytes(render_text_pdf("Blank", []))
    (root / "image.png").write_bytes(b"\x89PNG\r\n")
    return {
        "empty.md": "empty",
        "latin1.txt": "not valid UTF-8",
        "junk.txt": "UTF-8",
        "broken.pdf": "PDF",
        "fake.pdf": "not a PDF",
        "blank.pdf": "no extractable text",
    }


def test_bad_files_are_reported_and_skipped(small_corpus: Path, tmp_path: Path) -> None:
    expected = _bad_files(small_corpus)
    report = ingest(small_corpus, LocalIndexSink(tmp_path / "i.sqlite3"))
    reasons = {s.path: s.reason for s in report.skipped}
    assert set(reasons) == set(expected)
    for path, words in expected.items():
        assert words in reasons[path], (path, reasons[path])
    assert report.documents == 3 and report.ok
    assert report.ignored == ["image.png"]


def test_utf16_and_bom_text_is_read(tmp_path: Path) -> None:
    (tmp_path / "u16.txt").write_bytes("Title\n\nZażółć gęślą jaźń.\n".encode("utf-16"))
    (tmp_path / "bom.md").write_bytes("\ufeff# Bom\n\nHello there.\n".encode())
    docs = [d for d in iter_documents(tmp_path) if isinstance(d, IngestedDocument)]
    assert {d.doc_id: d.chunks[0].content for d in docs} == {"bom.md": "Hello there.", "u16.txt": "Zażółć gęślą jaźń."}


def test_duplicate_doc_ids_skip_the_second(tmp_path: Path) -> None:
    (tmp_path / "A b.md").write_text("# One\n\nFirst.\n", encoding="utf-8")
    (tmp_path / "a-b.md").write_text("# Two\n\nSecond.\n", encoding="utf-8")
    items = list(iter_documents(tmp_path))
    skipped = [i for i in items if isinstance(i, SkippedFile)]
    assert len(items) == 2 and len(skipped) == 1 and "already used" in skipped[0].reason


def test_unchanged_documents_are_reused_and_changes_replace_rows(small_corpus: Path, tmp_path: Path) -> None:
    index = tmp_path / "idx.sqlite3"
    first = ingest(small_corpus, LocalIndexSink(index))
    assert (first.documents, first.reused) == (3, 0)
    notes = "Warehouse Notes\n\nSHIPPING\n\nParcels leave at 3 p.m.\n"
    (small_corpus / "notes.txt").write_text(notes, encoding="utf-8")
    (small_corpus / "terms" / "business.pdf").unlink()
    second = ingest(small_corpus, LocalIndexSink(index))
    assert (second.documents, second.reused) == (1, 1)
    with sqlite3.connect(index) as conn:
        rows = dict(conn.execute("SELECT source_id, content FROM chunks").fetchall())
    assert rows["notes.txt#1"] == "Parcels leave at 3 p.m."
    assert not any(k.startswith("terms/") for k in rows)
    assert len(rows) == 4
    meta = read_meta(index)
    assert meta is not None and meta["fingerprint"] == folder_fingerprint(small_corpus)
    third = ingest(small_corpus, LocalIndexSink(index), rebuild=True)
    assert (third.documents, third.reused) == (2, 0)


def test_failed_run_leaves_index_untouched(small_corpus: Path, tmp_path: Path) -> None:
    index = tmp_path / "idx.sqlite3"
    ingest(small_corpus, LocalIndexSink(index))
    before = index.read_bytes()

    class Boom(LocalIndexSink):
        def write(self, document: IngestedDocument) -> None:
            raise RuntimeError("disk on fire")

    (small_corpus / "new.md").write_text("# New\n\nNew text.\n", encoding="utf-8")
    with pytest.raises(RuntimeError):
        ingest(small_corpus, Boom(index))
    assert index.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_cli_summary_and_exit_codes(small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = tmp_path / "cli.sqlite3"
    _bad_files(small_corpus)
    assert main([str(small_corpus), "--index", str(index)]) == 0
    out, err = capsys.readouterr()
    assert "ingested 3 new or changed" in out and "skipped 6" in out
    assert "skipped latin1.txt: not valid UTF-8" in err

    assert main([str(small_corpus), "--index", str(index), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reused"] == 3 and report["documents"] == 0

    junk_only = tmp_path / "junk"
    junk_only.mkdir()
    _bad_files(junk_only)
    before = index.read_bytes()
    assert main([str(junk_only), "--index", str(index)]) == 1
    assert "nothing could be ingested" in capsys.readouterr().err
    assert index.read_bytes() == before  # a run that ingests nothing keeps the old index

    assert main([str(tmp_path / "missing"), "--index", str(index)]) == 2
    assert "documents folder not found" in capsys.readouterr().err
    assert main([str(small_corpus), "--index", str(index), "--target", "nowhere"]) == 2


def test_cli_runs_as_module(small_corpus: Path, tmp_path: Path) -> None:
    index = tmp_path / "mod.sqlite3"
    proc = subprocess.run(
        [sys.executable, "-m", "shared.ingest", str(small_corpus), "--index", str(index), "--rebuild"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "3 new or changed" in proc.stdout and index.is_file()


def test_shipped_corpus_ingests_cleanly() -> None:
    items = list(iter_documents(CORPUS_DIR))
    assert [i for i in items if isinstance(i, SkippedFile)] == []
    docs = [i for i in items if isinstance(i, IngestedDocument)]
    assert len(docs) >= 10
    kinds = {Path(d.path).suffix for d in docs}
    assert kinds == {".md", ".txt", ".pdf"}
    for doc in docs:
        assert all(len(c.content) <= 800 for c in doc.chunks)


def test_sample_pdf_is_reproducible(tmp_path: Path) -> None:
    assert render_text_pdf(TITLE, BLOCKS) == OUTPUT.read_bytes()
    write_pdf(tmp_path / "x.pdf", "X", [("p", "Same bytes every time.")])
    assert (tmp_path / "x.pdf").read_bytes() == render_text_pdf("X", [("title", "X"), ("p", "Same bytes every time.")])


class MemorySink:
    """A second sink, as another target would add one: proves parsing and chunking need no edits."""

    name = "memory"
    runs: list[dict[str, object]] = []

    def __init__(self) -> None:
        self.docs: dict[str, IngestedDocument] = {}

    def start(self, *, rebuild: bool) -> None:
        self.rebuild = rebuild

    def existing(self) -> dict[str, str]:
        return {}

    def keep(self, doc_id: str) -> int:
        raise AssertionError("existing() is empty, so nothing is kept")

    def write(self, document: IngestedDocument) -> None:
        self.docs[document.doc_id] = document

    def finish(self, *, fingerprint: str) -> None:
        MemorySink.runs.append({"fingerprint": fingerprint, "docs": sorted(self.docs), "rebuild": self.rebuild})

    def abort(self) -> None:
        MemorySink.runs.append({"aborted": True})


def test_a_registered_sink_is_a_cli_target(small_corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from shared.ingest.pipeline import register_sink

    register_sink("memory", lambda args: MemorySink())
    MemorySink.runs.clear()
    assert main([str(small_corpus), "--target", "memory", "--rebuild"]) == 0
    assert "into memory" in capsys.readouterr().out
    assert MemorySink.runs == [
        {
            "fingerprint": folder_fingerprint(small_corpus),
            "docs": ["notes.txt", "policies/returns-policy.md", "terms/business.pdf"],
            "rebuild": True,
        }
    ]


def test_sink_holds_the_build_lock_until_finish_or_abort(small_corpus: Path, tmp_path: Path) -> None:
    import fcntl

    index = tmp_path / "locked.sqlite3"

    def lock_is_free() -> bool:
        with open(index.with_name(index.name + ".lock"), "a+b") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return True

    sink = LocalIndexSink(index)
    sink.start(rebuild=True)
    assert not lock_is_free()
    sink.abort()
    assert lock_is_free()

    class SeesLock(LocalIndexSink):
        held: list[bool] = []

        def write(self, document: IngestedDocument) -> None:
            SeesLock.held.append(not lock_is_free())
            super().write(document)

    ingest(small_corpus, SeesLock(index))
    assert SeesLock.held == [True, True, True] and lock_is_free()
