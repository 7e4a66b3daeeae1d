"""The sample data: deterministic sources, lazy race-safe build, rebuild on change, planted answers."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlglot

import shared.providers.sql.sampledata as sampledata
from shared.runtime.settings import REPO_ROOT


def _q(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def test_committed_data_matches_the_generator() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "generate_sample_data.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _q(path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}


def test_row_counts_and_sensitive_table(sample_db_path: Path) -> None:
    counts = {t: _q(sample_db_path, f"SELECT COUNT(*) FROM {t}")[0][0] for t in
              ["regions", "categories", "products", "customers", "orders", "order_items", "returns"]}  # fmt: skip
    partner = sampledata.sensitive_db_path(sample_db_path)
    assert _q(partner, "SELECT COUNT(*) FROM customer_contacts") == [(400,)]
    assert counts["regions"] == 4 and counts["categories"] == 5 and counts["products"] == 30
    assert counts["orders"] == 3000 and counts["order_items"] > 5000 and 300 < counts["returns"] < 1000
    assert _q(
        sample_db_path,
        "SELECT MIN(order_date), MAX(order_date), MAX(r.return_date) FROM orders, "
        "(SELECT MAX(return_date) AS return_date FROM returns) r",
    ) == [("2025-01-01", "2025-12-31", "2025-12-31")]


def test_planted_answers_are_clear(sample_db_path: Path) -> None:
    q3 = _q(
        sample_db_path,
        """SELECT rg.name, COUNT(*) FROM returns r
        JOIN order_items oi ON oi.order_item_id = r.order_item_id JOIN orders o ON o.order_id = oi.order_id
        JOIN regions rg ON rg.region_id = o.region_id
        WHERE r.return_date >= '2025-07-01' AND r.return_date < '2025-10-01' GROUP BY 1 ORDER BY 2 DESC""",
    )
    assert q3[0][0] == "West" and q3[0][1] > 2 * q3[1][1]
    top = _q(
        sample_db_path,
        """SELECT p.name, SUM(oi.quantity * oi.unit_price) FROM order_items oi
        JOIN products p ON p.product_id = oi.product_id GROUP BY 1 ORDER BY 2 DESC LIMIT 6""",
    )
    assert top[4][1] > top[5][1] * 1.05  # a clear fifth place
    rates = _q(
        sample_db_path,
        """SELECT c.name, 1.0 * SUM(COALESCE(r.quantity, 0)) / SUM(oi.quantity)
        FROM order_items oi JOIN products p ON p.product_id = oi.product_id
        JOIN categories c ON c.category_id = p.category_id
        LEFT JOIN returns r ON r.order_item_id = oi.order_item_id GROUP BY 1 ORDER BY 2 DESC""",
    )
    assert len({round(r[1], 3) for r in rates}) == 5


def test_both_schemas_parse_and_declare_the_same_tables() -> None:
    def tables(path: Path, dialect: str) -> set[str]:
        names = set()
        for stmt in sqlglot.parse(path.read_text(), read=dialect):
            if isinstance(stmt, sqlglot.exp.Create) and stmt.kind == "TABLE":
                names.add(stmt.this.find(sqlglot.exp.Table).name)
        return names

    lite = tables(sampledata.SQLITE_SCHEMA, "sqlite")
    tsql = tables(sampledata.TSQL_SCHEMA, "tsql")
    assert lite == tsql and "customer_contacts" in lite and len(lite) == 8
    # The data file's inserts parse as T-SQL too (the Azure postprovision hook runs them).
    stmts = sqlglot.parse(sampledata.DATA_SQL.read_text(), read="tsql")
    assert all(isinstance(s, sqlglot.exp.Insert) for s in stmts if s is not None)


def test_sensitive_tables_live_only_in_the_partner_file(sample_db_path: Path) -> None:
    partner = sampledata.sensitive_db_path(sample_db_path)
    assert partner == sample_db_path.with_name("sample-sensitive.db")
    assert sampledata.sensitive_tables() == {"customer_contacts"}
    assert _tables(partner) == {"customer_contacts"}
    assert "customer_contacts" not in _tables(sample_db_path) and len(_tables(sample_db_path)) == 7
    # Nothing of the dropped table lingers: no statistics row, and no e-mail address in the file's pages.
    assert _q(sample_db_path, "SELECT COUNT(*) FROM sqlite_stat1 WHERE tbl = 'customer_contacts'") == [(0,)]
    email = _q(partner, "SELECT email FROM customer_contacts LIMIT 1")[0][0]
    assert email.encode() not in sample_db_path.read_bytes()
    assert _q(partner, "PRAGMA user_version") == _q(sample_db_path, "PRAGMA user_version")


def test_a_missing_partner_is_rebuilt(tmp_path: Path) -> None:
    db = sampledata.ensure_sample_db(tmp_path / "pair.db")
    partner = sampledata.sensitive_db_path(db)
    partner.unlink()
    sampledata.ensure_sample_db(db)
    assert _tables(partner) == {"customer_contacts"}


def test_lazy_build_and_rebuild_when_sources_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data.sql"
    shutil.copy(sampledata.DATA_SQL, data)
    monkeypatch.setattr(sampledata, "DATA_SQL", data)
    db = tmp_path / "lazy.db"
    assert not db.exists()
    sampledata.ensure_sample_db(db)
    first_version = _q(db, "PRAGMA user_version")[0][0]
    assert first_version == sampledata.source_version()
    inode = db.stat().st_ino
    sampledata.ensure_sample_db(db)
    assert db.stat().st_ino == inode  # up to date: not rebuilt
    data.write_text(data.read_text() + "\nINSERT INTO regions (region_id, name) VALUES (5, 'Central');\n")
    sampledata.ensure_sample_db(db)
    assert _q(db, "SELECT name FROM regions WHERE region_id = 5") == [("Central",)]
    assert _q(db, "PRAGMA user_version")[0][0] != first_version
    assert not list(tmp_path.glob(".lazy*.tmp"))


def _build_in_child(path: str) -> int:
    sampledata.ensure_sample_db(Path(path))
    return int(_q(Path(path), "SELECT COUNT(*) FROM orders")[0][0])


def test_concurrent_builds_from_threads_and_processes(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        pending = pool.map_async(_build_in_child, [str(db)] * 3)
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(_build_in_child(str(db)))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results.extend(pending.get(timeout=120))
    assert results == [3000] * 7
    assert not list(tmp_path.glob(".race*.tmp"))
    assert _q(sampledata.sensitive_db_path(db), "SELECT COUNT(*) FROM customer_contacts") == [(400,)]


def test_broken_source_reports_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "data.sql"
    bad.write_text("INSERT INTO nowhere VALUES (1);")
    monkeypatch.setattr(sampledata, "DATA_SQL", bad)
    with pytest.raises(sampledata.SampleDataError, match="could not build"):
        sampledata.ensure_sample_db(tmp_path / "broken.db")
    assert not (tmp_path / "broken.db").exists()
    assert not (tmp_path / "broken-sensitive.db").exists()
    assert not list(tmp_path.glob(".broken*.tmp"))


def test_cli_rebuilds(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    proc = subprocess.run(
        [sys.executable, "-m", "shared.providers.sql.sampledata", "--path", str(db), "--force"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "orders=3000" in proc.stdout and db.exists()
