"""Finding and reading the files of an ingested folder: the trust boundary (links), decoding, PDF text, documents."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import stat as stat_mod
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path

from shared.ingest.chunking import (
    CHUNKER_VERSION,
    DEFAULT_MAX_CHARS,
    DEFAULT_OVERLAP_CHARS,
    ParsedText,
    chunk_sections,
    parse_markdown,
    parse_plain,
)
from shared.ingest.models import (
    MARKDOWN_SUFFIXES,
    MAX_FILE_BYTES,
    PDF_SUFFIXES,
    SUPPORTED_SUFFIXES,
    DocumentError,
    IngestedChunk,
    IngestedDocument,
    IngestError,
    SourceFile,
)

log = logging.getLogger(__name__)

_DOC_ID_JUNK = re.compile(r"[^\w./-]+")


def doc_id_for(rel_path: str) -> str:
    """The stable document id for a relative path (rule in the module docstring)."""
    normalized = unicodedata.normalize("NFC", rel_path.replace("\\", "/")).lower()
    parts = [_DOC_ID_JUNK.sub("-", part).strip("-") or "-" for part in normalized.split("/") if part]
    return "/".join(parts)


def _is_hidden(rel: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in rel.parts)


HashCache = dict[str, tuple[int, int, str]]  # rel path -> (size, mtime_ns, sha256)


def _walk(root: Path) -> Iterator[tuple[Path, bool]]:
    """Every entry under ``root`` that is a file or a link, as (path, is_link), without following links.

    ``os.walk`` with ``followlinks=False`` never descends into a linked folder, so a link loop
    cannot make this hang; linked folders are yielded as links so ingest can report them.
    """
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in dirnames:
            if (base / name).is_symlink():
                yield base / name, True
        for name in filenames:
            path = base / name
            yield path, path.is_symlink()


def _link_refusal(link: Path, root: Path) -> tuple[Path | None, str | None]:
    """The real file behind a link inside ``root``, or the reason the link is refused."""
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop on older Pythons
        return (
            None,
            f"symbolic link cannot be resolved ({getattr(exc, 'strerror', None) or 'a link loop'}); not followed",
        )
    if not target.is_relative_to(root):
        return None, "symbolic link to a path outside the documents folder; refused, not read"
    if _is_hidden(target.relative_to(root)):
        return None, "symbolic link to a hidden file; not read (hidden files are never ingested)"
    if target.is_dir():
        return None, "symbolic link to a folder; not followed (its content is ingested under its real path)"
    if not target.is_file():
        return None, "symbolic link to something that is not a regular file; not read"
    return target, None


def discover(folder: Path, *, hash_cache: HashCache | None = None) -> tuple[list[SourceFile], list[str]]:
    """Find candidate files (sorted by relative path) and the relative paths of unsupported ones.

    Links out of the folder are listed with ``refused`` set (see the module docstring). With
    ``hash_cache``, a file whose size and mtime are unchanged since the last call is not re-hashed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise IngestError(f"documents folder not found: {folder}")
    root = folder.resolve()
    found: list[SourceFile] = []
    ignored: list[str] = []
    for path, is_link in sorted(_walk(folder), key=lambda item: item[0].relative_to(folder).as_posix()):
        rel = path.relative_to(folder)
        if _is_hidden(rel):
            continue
        rel_path = rel.as_posix()
        real_path: Path | None = None
        if is_link:
            real_path, refusal = _link_refusal(path, root)
            if refusal is not None:
                # Listed (not silently dropped) so the run reports it; the digest names the reason so
                # the fingerprint changes when the link is fixed.
                found.append(
                    SourceFile(
                        doc_id=doc_id_for(rel_path),
                        rel_path=rel_path,
                        abs_path=path,
                        size=-1,
                        sha256=f"refused:{refusal}",
                        refused=refusal,
                    )
                )
                continue
        elif not path.is_file():
            continue  # sockets, FIFOs, devices: reading them could block or make no sense
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            ignored.append(rel_path)
            continue
        try:
            stat = (real_path or path).stat()
            size = stat.st_size
            cached = hash_cache.get(rel_path) if hash_cache is not None else None
            if cached is not None and cached[:2] == (size, stat.st_mtime_ns):
                digest = cached[2]
            else:
                digest = _sha256_file(real_path or path) if size <= MAX_FILE_BYTES else f"size:{size}"
                if hash_cache is not None:
                    hash_cache[rel_path] = (size, stat.st_mtime_ns, digest)
        except OSError as exc:
            # Still listed, so the fingerprint changes when it becomes readable and ingest reports it.
            size, digest = -1, f"unreadable:{exc.strerror or exc.errno}"
        found.append(
            SourceFile(
                doc_id=doc_id_for(rel_path),
                rel_path=rel_path,
                abs_path=path,
                size=size,
                sha256=digest,
                real_path=real_path,
            )
        )
    return found, ignored


def _read_regular_file(path: Path) -> bytes:
    """Read a file without following a link in the last path component, and only a regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            raise DocumentError("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint_files(files: Sequence[SourceFile]) -> str:
    """A digest of the chunker version and every candidate file's id, path and content hash."""
    digest = hashlib.sha256(f"chunker={CHUNKER_VERSION};max={DEFAULT_MAX_CHARS};ov={DEFAULT_OVERLAP_CHARS}\n".encode())
    for item in sorted(files, key=lambda f: f.rel_path):
        digest.update(f"{item.rel_path}\0{item.sha256}\n".encode())
    return digest.hexdigest()


def folder_fingerprint(folder: Path, *, hash_cache: HashCache | None = None) -> str:
    """The fingerprint of a documents folder as ``ingest`` records it in the index."""
    files, _ = discover(folder, hash_cache=hash_cache)
    return fingerprint_files(files)


def _decode_text(data: bytes) -> str:
    """Decode UTF-8 (with or without BOM) or BOM-marked UTF-16; anything else is an error."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise DocumentError(f"invalid UTF-16 text ({exc.reason} at byte {exc.start})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise DocumentError(f"not valid UTF-8 (byte 0x{bad} at offset {exc.start}); save the file as UTF-8") from None
    if "\x00" in text:
        raise DocumentError("looks like a binary file (contains NUL bytes), not text")
    controls = sum(1 for ch in text if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t\f")
    if controls > max(8, len(text) // 100):
        raise DocumentError(f"looks like a binary file ({controls} control characters), not text")
    return text


def _read_pdf_text(data: bytes) -> str:
    """Extract the text of a PDF, pages separated by form feeds."""
    import pypdf  # imported here: parsing PDFs is the only use and it is not needed at app start
    from pypdf.errors import PdfReadError

    pypdf_logger = logging.getLogger("pypdf")
    level = pypdf_logger.level
    pypdf_logger.setLevel(logging.ERROR)  # pypdf logs a warning per recoverable glitch
    try:
        try:
            reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted:
                try:
                    if not reader.decrypt(""):
                        raise DocumentError("PDF is encrypted with a password")
                except (NotImplementedError, PdfReadError) as exc:
                    raise DocumentError(f"PDF is encrypted ({exc})") from None
            pages = [page.extract_text() or "" for page in reader.pages]
        except DocumentError:
            raise
        except Exception as exc:  # pypdf raises many types on damaged files; all mean "unreadable"
            raise DocumentError(f"unreadable PDF ({type(exc).__name__}: {str(exc)[:200]})") from None
    finally:
        pypdf_logger.setLevel(level)
    text = "\f".join(pages)
    if not text.strip():
        raise DocumentError("PDF has no extractable text (a scanned image?); OCR it first")
    return text


def _pdf_title(data: bytes) -> str | None:
    import pypdf

    try:
        meta = pypdf.PdfReader(io.BytesIO(data), strict=False).metadata
        title = meta.title if meta else None
    except Exception:  # a missing title is fine; the text was already read successfully
        return None
    return title.strip() if isinstance(title, str) and title.strip() else None


def _humanize(stem: str) -> str:
    words = re.sub(r"[_\-]+", " ", stem).strip()
    return words[:1].upper() + words[1:] if words else stem


def load_document(source: SourceFile) -> IngestedDocument:
    """Read, parse and chunk one file; raise ``DocumentError`` with a plain reason when it cannot."""
    if source.refused is not None:
        raise DocumentError(source.refused)
    if source.size < 0:
        raise DocumentError(f"cannot read file ({source.sha256})")
    if source.size > MAX_FILE_BYTES:
        raise DocumentError(f"file too large ({source.size} bytes; limit {MAX_FILE_BYTES})")
    try:
        data = _read_regular_file(source.real_path or source.abs_path)
    except OSError as exc:
        raise DocumentError(f"cannot read file ({exc.strerror or exc})") from None
    if not data.strip():
        raise DocumentError("empty file")
    suffix = source.abs_path.suffix.lower()
    parsed: ParsedText
    if suffix in PDF_SUFFIXES:
        if not data.lstrip().startswith(b"%PDF-"):
            raise DocumentError("not a PDF file (no %PDF- header)")
        parsed = parse_plain(_read_pdf_text(data), page_breaks=True)
        parsed.title = _pdf_title(data) or parsed.title
    elif suffix in MARKDOWN_SUFFIXES:
        parsed = parse_markdown(_decode_text(data))
    else:
        parsed = parse_plain(_decode_text(data))
    pieces = chunk_sections(parsed.sections)
    if not pieces:
        raise DocumentError("no text content after parsing")
    title = (parsed.title or _humanize(source.abs_path.stem))[:200]
    top_folder = source.doc_id.split("/")[0] if "/" in source.doc_id else None
    tags = sorted(set(parsed.tags) | ({top_folder} if top_folder else set()))
    chunks = [
        IngestedChunk(
            source_id=f"{source.doc_id}#{n}",
            doc_id=source.doc_id,
            chunk_no=n,
            title=title,
            heading=piece.heading,
            content=piece.content,
            path=source.rel_path,
            tags=tags,
            page=piece.page,
            doc_sha256=source.sha256,
        )
        for n, piece in enumerate(pieces, start=1)
    ]
    return IngestedDocument(
        doc_id=source.doc_id, path=source.rel_path, title=title, sha256=source.sha256, tags=tags, chunks=chunks
    )
