"""The jobs table's schema, and the columns an older database file gains when opened."""

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    probe TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    timeout_s REAL NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    progress_done INTEGER NOT NULL DEFAULT 0,
    progress_total INTEGER NOT NULL DEFAULT 0,
    progress_message TEXT NOT NULL DEFAULT '',
    result TEXT,
    error TEXT,
    worker_id TEXT,
    heartbeat_at REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    revision INTEGER NOT NULL DEFAULT 0,
    device TEXT,
    gpu INTEGER,
    ran_on_gpu INTEGER,
    attempts_log TEXT
);
CREATE INDEX IF NOT EXISTS jobs_status_gpu_id ON jobs (status, gpu, id);
CREATE INDEX IF NOT EXISTS jobs_status_id ON jobs (status, id);
CREATE INDEX IF NOT EXISTS jobs_probe_id ON jobs (probe, id);
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    seen_at REAL NOT NULL
);
"""
# Columns added since the first release: (name, declaration), added to an older file on open.
ADDED_COLUMNS = (("gpu", "INTEGER"), ("ran_on_gpu", "INTEGER"), ("attempts_log", "TEXT"))


def migrate(db: sqlite3.Connection) -> None:
    """A jobs table from an older Tally gets the columns added since; its rows keep their data."""
    have = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    if not have:
        return  # a new file: SCHEMA creates the table whole
    for name, declaration in ADDED_COLUMNS:
        if name not in have:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {declaration}")
