"""Local document index: build time, query latency and retrieval quality on the sample corpus.

``python -m bench retrieval`` (or ``bench.retrieval.main(["--copies", "N"])`` for another scale).
Prints figures; asserts nothing. The quality figures use
the question set of ``tests/providers/search/local/test_docindex.py`` (hit@1, hit@3 and MRR of the expected document).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from shared.providers.llm.offline.answers import compose_answer_offline
from shared.providers.search.local import LocalIndex
from shared.runtime.settings import DATA_DIR
from tests.providers.search.local.test_docindex import QUESTIONS


def _scaled_corpus(root: Path, copies: int) -> Path:
    """The sample corpus copied ``copies`` times into sub-folders."""
    target = root / f"corpus-x{copies}"
    for n in range(copies):
        shutil.copytree(DATA_DIR / "docs", target / f"copy{n:03d}")
    return target


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(prog="python -m bench retrieval")
    parser.add_argument("--copies", type=int, default=40, help="corpus copies for the scaled build")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        index = LocalIndex(root / "docs.sqlite3", DATA_DIR / "docs")
        started = time.perf_counter()
        stats = index.stats()
        print(
            f"cold build, sample corpus: {stats.documents} docs, {stats.chunks} chunks in "
            f"{(time.perf_counter() - started) * 1000:.0f} ms"
        )

        ranks: list[int | None] = []
        latencies: list[float] = []
        for _ in range(20):
            for question, doc_id in QUESTIONS:
                t0 = time.perf_counter()
                hits = index.search(question, top_k=5)
                latencies.append((time.perf_counter() - t0) * 1000)
                if len(ranks) < len(QUESTIONS):
                    docs = [h.source_id.split("#")[0] for h in hits]
                    ranks.append(docs.index(doc_id) + 1 if doc_id in docs else None)
        hit1 = sum(1 for r in ranks if r == 1) / len(ranks)
        hit3 = sum(1 for r in ranks if r is not None and r <= 3) / len(ranks)
        mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
        print(f"quality on {len(QUESTIONS)} questions: hit@1 {hit1:.2f}, hit@3 {hit3:.2f}, MRR@5 {mrr:.2f}")
        print(
            f"search latency (warm, top_k=5, {len(latencies)} queries): p50 "
            f"{statistics.median(latencies):.2f} ms, p95 {_percentile(latencies, 0.95):.2f} ms"
        )

        answer_ms = []
        for question, _ in QUESTIONS:
            chunks = index.search(question, top_k=5)
            t0 = time.perf_counter()
            compose_answer_offline(question, chunks, [])
            answer_ms.append((time.perf_counter() - t0) * 1000)
        print(f"offline answer from 5 chunks: p50 {statistics.median(answer_ms):.2f} ms")

        corpus = _scaled_corpus(root, args.copies)
        big = LocalIndex(root / "big.sqlite3", corpus, refresh_interval_s=0)
        t0 = time.perf_counter()
        big_stats = big.stats()
        print(
            f"cold build, {args.copies}x corpus: {big_stats.documents} docs, {big_stats.chunks} chunks in "
            f"{(time.perf_counter() - t0) * 1000:.0f} ms"
        )
        t0 = time.perf_counter()
        big.ensure_current()
        print(f"freshness check, unchanged {big_stats.documents} files: {(time.perf_counter() - t0) * 1000:.1f} ms")
        (corpus / "copy000" / "faq" / "customer-faq.md").write_text("# Changed\n\nOne changed file.\n", "utf-8")
        t0 = time.perf_counter()
        big.ensure_current()
        print(f"rebuild after one file changed (others reused): {(time.perf_counter() - t0) * 1000:.0f} ms")
        big_lat = []
        for question, _ in QUESTIONS:
            t0 = time.perf_counter()
            big.search(question, top_k=5)
            big_lat.append((time.perf_counter() - t0) * 1000)
        print(f"search latency on {args.copies}x corpus: p50 {statistics.median(big_lat):.2f} ms")
    return 0
