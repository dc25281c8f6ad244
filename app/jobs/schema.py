"""The jobs table's schema, and the columns an older database file gains when opened.

The file's version is SQLite's `PRAGMA user_version`: 0 for a file from before versions were
kept (it may hold some of version 1's columns already), then each MIGRATIONS entry's number.
"""

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
    attempts_log TEXT,
    num_gpus INTEGER,
    gpus TEXT,
    ran_on_gpus TEXT
);
CREATE INDEX IF NOT EXISTS jobs_status_gpu_id ON jobs (status, gpu, id);
CREATE INDEX IF NOT EXISTS jobs_status_id ON jobs (status, id);
CREATE INDEX IF NOT EXISTS jobs_probe_id ON jobs (probe, id);
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    seen_at REAL NOT NULL
);
"""
# The columns each version added, (name, declaration), oldest first; an older file gains them on
# open, its rows keeping their data. Version 1: a job may name its GPU. Version 2: a job may ask
# for several GPUs (num_gpus; gpus, a JSON list of indices) and records those it ran on
# (ran_on_gpus, a JSON list); NULL in a row from before means one GPU, as the row's gpu says.
MIGRATIONS: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = (
    (1, (("gpu", "INTEGER"), ("ran_on_gpu", "INTEGER"), ("attempts_log", "TEXT"))),
    (2, (("num_gpus", "INTEGER"), ("gpus", "TEXT"), ("ran_on_gpus", "TEXT"))),
)
VERSION = MIGRATIONS[-1][0]


def version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite3.Connection) -> None:
    """A jobs table from an older Tally gets the columns added since; its rows keep their data.
    The file is then at VERSION (a new file too: SCHEMA creates the table whole)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    at = version(db)
    if have:
        for number, columns in MIGRATIONS:
            if number <= at:
                continue
            for name, declaration in columns:
                if name not in have:  # a version-0 file may have some of version 1's already
                    db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {declaration}")
    if at < VERSION:
        db.execute(f"PRAGMA user_version = {VERSION}")
