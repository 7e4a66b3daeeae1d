"""The durable store's schema: its tables, the migrations between versions, its rows and its errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

SCHEMA_VERSION = 2


class StoreFault(RuntimeError):
    """The durable store cannot persist (disk full, I/O error); the transaction was rolled back."""


class StoreDamaged(RuntimeError):
    """The durable store file is damaged or unexpectedly empty; devhost refuses to start on it."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS instances (
    ord INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    version TEXT,
    execution_id TEXT NOT NULL,
    status TEXT NOT NULL,
    input TEXT,
    output TEXT,
    custom_status TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    parent_id TEXT,
    parent_execution TEXT,
    parent_seq INTEGER,
    parent_name TEXT,
    estate TEXT
);
CREATE INDEX IF NOT EXISTS instances_status ON instances(status);
CREATE INDEX IF NOT EXISTS instances_created ON instances(created);
CREATE INDEX IF NOT EXISTS instances_status_created ON instances(status, created);
CREATE TABLE IF NOT EXISTS history (
    instance_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (instance_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    execution_id TEXT,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_instance ON inbox(instance_id);
CREATE TABLE IF NOT EXISTS activities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    input TEXT
);
CREATE INDEX IF NOT EXISTS activities_instance ON activities(instance_id);
CREATE TABLE IF NOT EXISTS timers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    fire_at REAL NOT NULL,
    fire_text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS timers_instance ON timers(instance_id);
"""

# Version 2 added Durable Entities: their state, and the operations sent to them and not yet run.
ENTITY_SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (
    entity_id TEXT PRIMARY KEY,
    state TEXT,
    last_op REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entities_last_op ON entities(last_op);
CREATE TABLE IF NOT EXISTS entity_ops (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_id TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entity_ops_entity ON entity_ops(entity_id);
"""


def _migrate_1_to_2(db: sqlite3.Connection) -> int:
    """Version 1 -> 2: add the entity tables (an old store has no entities, so nothing moves)."""
    db.executescript(ENTITY_SCHEMA)
    return 2


# version -> a function that upgrades a store in place from that version and returns the new version.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], int]] = {1: _migrate_1_to_2}

INSTANCE_COLUMNS = (
    "instance_id, name, version, execution_id, status, input, output, custom_status, created, updated, "
    "parent_id, parent_execution, parent_seq, parent_name, estate"
)


@dataclass(frozen=True, slots=True)
class InstanceRow:
    """One row of ``instances``."""

    instance_id: str
    name: str
    version: str | None
    execution_id: str
    status: str
    input: str | None
    output: str | None
    custom_status: str | None
    created: float
    updated: float
    parent_id: str | None
    parent_execution: str | None
    parent_seq: int | None
    parent_name: str | None
    estate: str | None
