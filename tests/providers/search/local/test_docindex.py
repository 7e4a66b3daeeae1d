"""The local FTS5 index: retrieval quality on the shipped corpus, safe queries, filters, lazy builds."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shared.ingest.text import bound_snippet
from shared.jobs.contracts import ErrorCode, ProviderError
from shared.providers.search.local import LocalIndex, build_match_query, fallback_index_path, parse_filter, query_terms
from shared.runtime.settings import REPO_ROOT, Settings

# (question, doc id expected in the top 3)
QUESTIONS = [
    ("What does the returns policy say about refunds after 30 days?", "policies/returns-and-refunds.md"),
    ("Is there a restocking fee for opened electronics?", "policies/returns-and-refunds.md"),
    ("My sofa arrived broken, what should I do?", "policies/returns-and-refunds.md"),
    ("How long is the warranty on Larkfield furniture?", "policies/warranty.md"),
    ("How long do you keep order records?", "policies/customer-data-privacy.md"),
    ("Can I combine two promo codes on one order?", "policies/pricing-and-discounts.md"),
    ("Is shipping free over $75?", "policies/shipping-and-delivery.md"),
    ("What are the payment terms for corporate accounts?", "business/corporate-account-terms.pdf"),
    ("What restocking fee applies to bulk business returns?", "business/corporate-account-terms.pdf"),
    ("Which fulfillment center serves the West region?", "operations/regional-operations-2025.md"),
    ("Do gift cards expire?", "policies/gift-cards-and-store-credit.txt"),
    ("How are recalled products refunded?", "policies/product-safety-and-recalls.md"),
    ("Why did the West region have so many defective returns in Q3 2025?", "operations/regional-operations-2025.md"),
    ("How quickly must a formal complaint be answered?", "support/customer-support-and-escalations.txt"),
    ("How do returns center staff grade returned items?", "operations/returns-processing-procedure.txt"),
    ("How many points do Gold members earn per dollar?", "policies/loyalty-program.md"),
    ("How do I delete my personal data?", "policies/customer-data-privacy.md"),
    ("Are returns different in the North region in winter?", "policies/returns-and-refunds.md"),
]


@pytest.mark.parametrize(("question", "doc_id"), QUESTIONS)
def test_right_document_in_top_3(corpus_index: LocalIndex, question: str, doc_id: str) -> None:
    hits = corpus_index.search(question, top_k=3)
    assert doc_id in [h.source_id.split("#")[0] for h in hits], [h.source_id for h in hits]


def test_refunds_after_30_days_finds_the_exact_passage(corpus_index: LocalIndex) -> None:
    top = corpus_index.search("What does the returns policy say about refunds after 30 days?", top_k=5)[0]
    assert top.source_id.startswith("policies/returns-and-refunds.md#")
    assert top.title == "Returns and Refunds Policy — Refunds after 30 days"
    assert "31 to 60 days after delivery are accepted for store credit only" in top.content
    assert top.path == "policies/returns-and-refunds.md"
    assert top.score > 0


def test_results_are_ranked_bounded_and_deterministic(corpus_index: LocalIndex) -> None:
    first = corpus_index.search("refund store credit", top_k=10)
    assert len(first) == 10
    assert [c.score for c in first] == sorted((c.score for c in first), reverse=True)
    assert all(len(c.content) <= 800 for c in first)
    assert corpus_index.search("refund store credit", top_k=10) == first
    assert len(corpus_index.search("refund", top_k=1000)) <= 50


HOSTILE = [
    '"',
    '""',
    "'",
    "refund:",
    "title:refund",
    "AND",
    "OR NOT AND",
    "refund AND OR",
    "*",
    "refund*",
    "-refund",
    "- -- ---",
    "NEAR(refund store, 2)",
    "(((",
    ")",
    "^refund",
    "{title heading}: refund",
    'a"b"c',
    "'; DROP TABLE chunks; --",
    "refund\x00days",
    "\u200b\u200b",
    "退款 après 30 jours 🙂",
    "x" * 5000,
    " ".join(["refund"] * 500),
    "%_\\",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_break_fts(corpus_index: LocalIndex, query: str) -> None:
    hits = corpus_index.search(query, top_k=5)
    assert isinstance(hits, list) and len(hits) <= 5


def test_hostile_queries_still_find_their_words(corpus_index: LocalIndex) -> None:
    assert corpus_index.search('"restocking" AND fee: -opened*', top_k=3)[0].source_id.startswith(
        ("policies/returns-and-refunds.md", "faq/customer-faq.md")
    )
    assert corpus_index.search("", top_k=3) == []
    assert corpus_index.search("?!.,;", top_k=3) == []


def test_match_query_is_quoted_or_of_terms_synonyms_and_phrases() -> None:
    assert query_terms("What does the policy say about REFUNDS after 30 days?") == [
        "policy",
        "refunds",
        "after",
        "30",
        "days",
    ]
    assert build_match_query("broken lamp") == '"broken" OR "lamp" OR "damaged" OR "defective" OR "broken lamp"'
    assert build_match_query("the what") == '"the" OR "what" OR "the what"'  # only stop words: keep them
    assert build_match_query("  ") is None


def test_filter_by_doc_prefix_and_tag(corpus_index: LocalIndex) -> None:
    policies = corpus_index.search("refund", top_k=20, filter="doc:policies/")
    assert policies and all(c.source_id.startswith("policies/") for c in policies)
    faq = corpus_index.search("refund", top_k=20, filter="tag:faq")
    assert faq and {c.source_id.split("#")[0] for c in faq} == {"faq/customer-faq.md"}
    bare = corpus_index.search("refund", top_k=20, filter="faq/customer-faq.md")
    assert [c.source_id for c in bare] == [c.source_id for c in faq]
    either = corpus_index.search("refund", top_k=50, filter="tag:faq, tag:warranty")
    assert {c.source_id.split("#")[0] for c in either} == {"faq/customer-faq.md", "policies/warranty.md"}
    both = corpus_index.search("refund", top_k=50, filter="doc:policies/ tag:warranty")
    assert {c.source_id.split("#")[0] for c in both} == {"policies/warranty.md"}
    assert corpus_index.search("refund", top_k=5, filter="doc:%") == []  # LIKE wildcards are literal
    assert corpus_index.search("refund", top_k=5, filter="doc:polic") == []  # folder boundary only
    no_slash = corpus_index.search("refund", top_k=50, filter="doc:policies")
    assert no_slash == corpus_index.search("refund", top_k=50, filter="doc:policies/")
    assert corpus_index.search("refund", top_k=5, filter="  ") != []


@pytest.mark.parametrize("bad", ["region:west", "doc:tag:x", "tag:" + "x" * 300])
def test_invalid_filter_is_invalid_input(corpus_index: LocalIndex, bad: str) -> None:
    with pytest.raises(ProviderError) as info:
        corpus_index.search("refund", top_k=3, filter=bad)
    assert info.value.code is ErrorCode.INVALID_INPUT


def test_parse_filter_sql() -> None:
    assert parse_filter(None) == ("", [])
    where, params = parse_filter("doc:Policies/ret_ tag:FAQ")
    assert where == "((doc_id = ? OR doc_id LIKE ? ESCAPE '\\')) AND (instr(tags, ?) > 0)"
    assert params == ["policies/ret_", "policies/ret\\_/%", " faq "]
    assert parse_filter("doc:faq/")[1] == ["faq/%"]
    with pytest.raises(ProviderError):
        parse_filter("tag:a " * 300)


def test_top_k_must_be_positive(corpus_index: LocalIndex) -> None:
    with pytest.raises(ProviderError) as info:
        corpus_index.search("refund", top_k=0)
    assert info.value.code is ErrorCode.INVALID_INPUT


def test_bound_snippet() -> None:
    text = "word " * 400
    cut = bound_snippet(text)
    assert len(cut) <= 800 and cut.endswith("…") and not cut[:-1].endswith(" ")
    assert bound_snippet("short") == "short"


def test_document_titles(corpus_index: LocalIndex) -> None:
    titles = corpus_index.document_titles()
    assert "Returns and Refunds Policy" in titles and "Corporate Account Terms" in titles
    assert titles == sorted(titles)


# --- lazy build, rebuilds, concurrency --------------------------------------------------------


def test_lazy_build_then_rebuild_when_documents_change(small_corpus: Path, tmp_path: Path) -> None:
    index_path = tmp_path / "lazy" / "docs.sqlite3"
    index = LocalIndex(index_path, small_corpus, refresh_interval_s=0)
    assert not index_path.exists() and index.builds == 0
    assert index.search("refunds paid", top_k=1)[0].source_id == "policies/returns-policy.md#2"
    assert index_path.is_file() and index.builds == 1
    index.search("parcels", top_k=1)
    assert index.builds == 1  # unchanged folder: no rebuild

    (small_corpus / "notes.txt").write_text("Warehouse Notes\n\nSHIPPING\n\nPallets leave at dusk.\n", "utf-8")
    (small_corpus / "new.md").write_text("# Drones\n\nDrone delivery is not offered.\n", "utf-8")
    assert index.search("pallets dusk", top_k=1)[0].content == "Pallets leave at dusk."
    assert index.search("drone", top_k=1)[0].source_id == "new.md#1"
    assert index.builds == 2
    assert all("noon" not in c.content for c in index.search("parcels noon dock", top_k=10))
    (small_corpus / "new.md").unlink()
    assert index.search("drone", top_k=3) == []
    assert index.stats().documents == 3


def test_refresh_interval_defers_the_folder_check(small_corpus: Path, tmp_path: Path) -> None:
    index = LocalIndex(tmp_path / "i.sqlite3", small_corpus, refresh_interval_s=3600)
    index.search("refunds", top_k=1)
    (small_corpus / "new.md").write_text("# Drones\n\nDrone delivery is not offered.\n", "utf-8")
    assert index.search("drone", top_k=1) == []  # not re-checked yet
    index.refresh_interval_s = 0
    assert index.search("drone", top_k=1)[0].source_id == "new.md#1"


def test_concurrent_first_use_from_threads_builds_once(small_corpus: Path, tmp_path: Path) -> None:
    index = LocalIndex(tmp_path / "c.sqlite3", small_corpus)
    barrier = threading.Barrier(8)

    def first_search(_: int) -> list[str]:
        barrier.wait()
        return [c.source_id for c in index.search("invoices due", top_k=2)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(first_search, range(8)))
    assert all(r == results[0] for r in results) and results[0][0] == "terms/business.pdf#1"
    assert index.builds == 1


def test_separate_instances_share_the_file_and_build_once(small_corpus: Path, tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    instances = [LocalIndex(path, small_corpus) for _ in range(4)]
    barrier = threading.Barrier(4)

    def first_search(index: LocalIndex) -> str:
        barrier.wait()
        return index.search("exchanges free", top_k=1)[0].source_id

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert set(pool.map(first_search, instances)) == {"policies/returns-policy.md#3"}
    assert sum(i.builds for i in instances) == 1
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


_CHILD = """
import json, sys
from pathlib import Path
from shared.providers.search.local import LocalIndex
index = LocalIndex(Path(sys.argv[1]), Path(sys.argv[2]))
hits = index.search("parcels dock noon", top_k=1)
print(json.dumps({"builds": index.builds, "top": hits[0].source_id}))
"""


def test_concurrent_first_use_from_processes_builds_once(small_corpus: Path, tmp_path: Path) -> None:
    path = tmp_path / "proc.sqlite3"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path), str(small_corpus)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out))
    assert {o["top"] for o in outputs} == {"notes.txt#1"}
    assert sum(o["builds"] for o in outputs) == 1


def test_damaged_index_file_is_rebuilt(small_corpus: Path, tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"
    LocalIndex(path, small_corpus).search("refunds", top_k=1)
    path.write_bytes(b"this is not a database" * 100)
    index = LocalIndex(path, small_corpus)
    assert index.search("refunds paid", top_k=1)[0].source_id == "policies/returns-policy.md#2"
    assert index.builds == 1


def test_unwritable_index_folder_falls_back_to_temp(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "systemp"))
    (tmp_path / "systemp").mkdir()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the index folder should be")
    wanted = blocker / "docs.sqlite3"
    index = LocalIndex(wanted, small_corpus)
    assert index.search("refunds paid", top_k=1)[0].source_id == "policies/returns-policy.md#2"
    assert index.ensure_current() == fallback_index_path(wanted)
    assert fallback_index_path(wanted).is_file()


def test_missing_documents_folder_or_index_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as info:
        LocalIndex(tmp_path / "i.sqlite3", tmp_path / "nope").search("refund", top_k=1)
    assert info.value.code is ErrorCode.CONFIG_ERROR and "nope" in info.value.message
    with pytest.raises(ProviderError) as info:
        LocalIndex(tmp_path / "missing.sqlite3").search("refund", top_k=1)
    assert info.value.code is ErrorCode.CONFIG_ERROR and "python -m shared.ingest" in info.value.message


def test_empty_documents_folder_gives_no_hits(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    index = LocalIndex(tmp_path / "e.sqlite3", tmp_path / "empty")
    assert index.search("refund", top_k=3) == []
    assert index.document_titles() == []


def test_from_settings_uses_the_configured_paths(small_corpus: Path, tmp_path: Path) -> None:
    settings = Settings(local_index_path=tmp_path / "cfg" / "docs.sqlite3", documents_dir=small_corpus)
    index = LocalIndex.from_settings(settings)
    assert index is LocalIndex.from_settings(settings)
    assert index.search("invoices", top_k=1)[0].path == "terms/business.pdf"
    assert (tmp_path / "cfg" / "docs.sqlite3").is_file()


def test_no_writable_place_for_the_index_is_a_search_error(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))  # the fallback folder cannot be made either
    with pytest.raises(ProviderError) as info:
        LocalIndex(blocker / "docs.sqlite3", small_corpus).search("refunds", top_k=1)
    assert info.value.code is ErrorCode.SEARCH_ERROR and "cannot build the document index" in info.value.message
