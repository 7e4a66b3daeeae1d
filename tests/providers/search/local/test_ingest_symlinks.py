"""Ingestion treats the documents folder as a trust boundary: links out of it are refused and reported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.ingest.models import IngestedDocument, SkippedFile
from shared.ingest.pipeline import ingest, iter_documents, main
from shared.ingest.sources import discover, load_document
from shared.providers.search.local import LocalIndexSink

SECRET = "root:x:0:0:TOP-SECRET-LINE"


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """A documents folder with a real file and links pointing inside, outside, nowhere and in loops."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text(SECRET + "\n", encoding="utf-8")
    (outside / "secret.md").write_text(f"# Secret\n\n{SECRET}.\n", encoding="utf-8")
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "real.md").write_text("# Real Guide\n\nParcels ship at noon.\n", encoding="utf-8")
    (docs / "passwd.txt").symlink_to(outside / "passwd")  # absolute link out
    (docs / "guides" / "sneaky.md").symlink_to(Path("..") / ".." / "outside" / "secret.md")  # relative link out
    (docs / "outdir").symlink_to(outside, target_is_directory=True)  # a whole folder out
    (docs / "alias.md").symlink_to(Path("guides") / "real.md")  # inside: may be read
    (docs / "guides" / "loop").symlink_to(Path(".."), target_is_directory=True)  # folder loop
    (docs / "self.md").symlink_to("self.md")  # link to itself
    (docs / "dangling.md").symlink_to("missing.md")
    (docs / ".git").mkdir()
    (docs / ".git" / "config").write_text("[remote]\nurl = https://token@example.com\n", encoding="utf-8")
    (docs / "config.md").symlink_to(Path(".git") / "config")  # inside, but to a hidden file
    return docs


def _skipped(items: list[IngestedDocument | SkippedFile]) -> dict[str, str]:
    return {item.path: item.reason for item in items if isinstance(item, SkippedFile)}


@pytest.mark.timeout(60)  # hang guard: a link loop must not make discovery recurse forever
def test_links_out_of_the_folder_are_refused_with_a_reason(linked: Path) -> None:
    items = list(iter_documents(linked))
    skipped = _skipped(items)
    for path in ("passwd.txt", "guides/sneaky.md", "outdir"):
        assert "outside the documents folder" in skipped[path], path
    assert "not followed" in skipped["guides/loop"]
    assert "cannot be resolved" in skipped["self.md"] and "cannot be resolved" in skipped["dangling.md"]
    assert "hidden file" in skipped["config.md"]
    documents = {item.path: item for item in items if isinstance(item, IngestedDocument)}
    assert set(documents) == {"alias.md", "guides/real.md"}  # a link inside the folder is read
    assert documents["alias.md"].chunks[0].content == documents["guides/real.md"].chunks[0].content
    text = " ".join(chunk.content for doc in documents.values() for chunk in doc.chunks)
    assert "SECRET" not in text


def test_refused_link_never_reaches_the_index(linked: Path, tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite3"
    report = ingest(linked, LocalIndexSink(index))
    assert report.documents == 2
    assert {s.path for s in report.skipped} >= {"passwd.txt", "guides/sneaky.md", "outdir"}
    assert b"TOP-SECRET" not in index.read_bytes()


def test_an_indexed_file_later_replaced_by_a_link_out_is_dropped(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    (docs / "notes.txt").write_text("Notes\n\nOrdinary text.\n", encoding="utf-8")
    index = tmp_path / "index.sqlite3"
    assert ingest(docs, LocalIndexSink(index)).documents == 1
    (docs / "notes.txt").unlink()
    (docs / "notes.txt").symlink_to(tmp_path / "secret.txt")
    report = ingest(docs, LocalIndexSink(index), keep_target_if_empty=False)
    assert report.documents == 0 and "outside" in report.skipped[0].reason
    assert b"TOP-SECRET" not in index.read_bytes()


def test_a_file_swapped_for_a_link_after_discovery_is_not_read(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    (docs / "notes.txt").write_text("Notes\n\nOrdinary text.\n", encoding="utf-8")
    (source,), _ = discover(docs)
    (docs / "notes.txt").unlink()
    (docs / "notes.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(Exception, match="cannot read file"):
        load_document(source)


@pytest.mark.timeout(60)  # hang guard: opening a FIFO for reading would block
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_special_files_are_not_read(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    os.mkfifo(docs / "pipe.txt")
    (docs / "fifo-link.txt").symlink_to("pipe.txt")
    (docs / "ok.txt").write_text("Ok\n\nFine.\n", encoding="utf-8")
    items = list(iter_documents(docs))
    assert [item.path for item in items if isinstance(item, IngestedDocument)] == ["ok.txt"]
    assert "not a regular file" in _skipped(items)["fifo-link.txt"]


def test_cli_names_the_refused_link_and_why(linked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(linked), "--index", str(tmp_path / "cli.sqlite3")]) == 0
    err = capsys.readouterr().err
    assert "skipped passwd.txt: symbolic link to a path outside the documents folder" in err
    assert "skipped guides/sneaky.md: symbolic link to a path outside the documents folder" in err
