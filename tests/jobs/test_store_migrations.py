"""Every schema Tally shipped, opened by today's Store on both databases: the database ends at the
latest version with every row and value it held, the new columns NULL (or their default), and
columns and indexes exactly those of a database the Store creates new.

The SQLite schemas are the DDL each release ran, copied from `git show <commit>:app/jobs/...`;
the PostgreSQL ones are their equivalents (no Tally wrote PostgreSQL before the version table).
"""

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import sqlalchemy as sa
from psycopg.rows import dict_row

from app.jobs import schema
from app.jobs.job import STATES, result_json
from app.jobs.storage import StoreUnavailable
from app.jobs.store import Store
from tests.support import pg
from tests.support.results import result_for

JOBS_V0 = """
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
    device TEXT{more}
);
"""
INDEXES_V0 = """
CREATE INDEX IF NOT EXISTS jobs_status_id ON jobs (status, id);
CREATE INDEX IF NOT EXISTS jobs_probe_id ON jobs (probe, id);
"""
GPU_INDEX = "CREATE INDEX IF NOT EXISTS jobs_status_gpu_id ON jobs (status, gpu, id);\n"
WORKERS = """
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    seen_at REAL NOT NULL
);
"""
LEASES = """
CREATE TABLE IF NOT EXISTS leases (
    device TEXT PRIMARY KEY,
    job_id INTEGER NOT NULL,
    worker_id TEXT,
    heartbeat_at REAL NOT NULL
);
"""
V1 = ",\n    gpu INTEGER,\n    ran_on_gpu INTEGER,\n    attempts_log TEXT"
V2 = V1 + ",\n    num_gpus INTEGER,\n    gpus TEXT,\n    ran_on_gpus TEXT"

# name: (the DDL it ran, its PRAGMA user_version)
SQLITE = {
    # 5d46b01, the first release: the jobs table alone.
    "v0-first": (JOBS_V0.format(more="") + INDEXES_V0, 0),
    # ae4d3ae: dispatchers say they are alive (workers).
    "v0-workers": (JOBS_V0.format(more="") + INDEXES_V0 + WORKERS, 0),
    # c45d9c6 and c85339a: a job may name its GPU; device leases.
    "v0-gpu": (JOBS_V0.format(more=",\n    gpu INTEGER,\n    ran_on_gpu INTEGER") + GPU_INDEX + INDEXES_V0
               + WORKERS + LEASES, 0),
    # 396c620: every attempt logged; version 1's columns, no version kept yet.
    "v0-attempts": (JOBS_V0.format(more=V1) + GPU_INDEX + INDEXES_V0 + WORKERS + LEASES, 0),
    "v1": (JOBS_V0.format(more=V1) + GPU_INDEX + INDEXES_V0 + WORKERS + LEASES, 1),
    # 82a6159 to today: jobs on several GPUs.
    "v2": (JOBS_V0.format(more=V2) + GPU_INDEX + INDEXES_V0 + WORKERS + LEASES, 2),
}

# PostgreSQL's equals: BIGINT for SQLite's 64-bit INTEGER, DOUBLE PRECISION for REAL.
PG_JOBS = (JOBS_V0.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
           .replace("INTEGER", "BIGINT").replace("REAL", "DOUBLE PRECISION"))
PG_V1 = V1.replace("INTEGER", "BIGINT")
PG_V2 = V2.replace("INTEGER", "BIGINT")
PG_LEASES = LEASES.replace("INTEGER", "BIGINT").replace("REAL", "DOUBLE PRECISION")
PG_WORKERS = WORKERS.replace("REAL", "DOUBLE PRECISION")
PG_VERSION = "CREATE TABLE tally_schema (version BIGINT NOT NULL); INSERT INTO tally_schema VALUES ({});\n"
POSTGRES = {
    "v0": PG_JOBS.format(more="") + INDEXES_V0 + PG_WORKERS,
    "v1": PG_JOBS.format(more=PG_V1) + GPU_INDEX + INDEXES_V0 + PG_WORKERS + PG_LEASES + PG_VERSION.format(1),
    "v2": PG_JOBS.format(more=PG_V2) + GPU_INDEX + INDEXES_V0 + PG_WORKERS + PG_LEASES + PG_VERSION.format(2),
}

RESULT = result_json(result_for("matmul"))
# The columns versions 1 and 2 added: a version-0 table lacks them all.
ADDED_SINCE_V0 = ("gpu", "ran_on_gpu", "attempts_log", "num_gpus", "gpus", "ran_on_gpus")


def rows(without: tuple[str, ...] = ()) -> list[dict]:
    """One job in every state, every column (of today's; each version inserts those it has) given
    a value that shows if it moves: fractional unix seconds, JSON text spaced as no encoder here
    would write it."""
    made = [{"probe": "matmul", "params": f'{{"m":  4, "i": {i}}}', "status": status, "attempts": i,
             "timeout_s": 60.25, "created_at": 1732612345.123456 + i, "started_at": 1732612346.5 + i,
             "finished_at": None if status in ("queued", "running") else 1732612399.000001 + i,
             "progress_done": i, "progress_total": 9, "progress_message": f"step {i}",
             "result": RESULT if status == "succeeded" else None,
             "error": '{"type": "E", "message": "m", "detail": {}}' if status == "failed" else None,
             "worker_id": f"box:{i}:cpu", "heartbeat_at": 1732612347.25 + i,
             "cancel_requested": int(status == "cancelled"), "revision": 3 * i, "device": "cpu",
             "gpu": i % 2, "ran_on_gpu": i % 2,
             "attempts_log": '[{"attempt":1,"worker_id":"old","started_at":1.5,"ended_at":2.5,'
                             '"reason":"worker_lost"}]',
             "num_gpus": 2, "gpus": "[0, 1]", "ran_on_gpus": "[0, 1]"}
            for i, status in enumerate(STATES)]
    return [{k: v for k, v in row.items() if k not in without} for row in made]


def _insert(execute, mark: str, table: str, row: dict) -> None:
    execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join([mark] * len(row))})",
            tuple(row.values()))


def _table_shape(url: str) -> dict:
    """Every table's columns (name, type, nullability, default) and indexes (name, columns)."""
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        return {table: ([(c["name"], str(c["type"]), c["nullable"], c["default"])
                         for c in inspector.get_columns(table)],
                        sorted((i["name"], tuple(i["column_names"])) for i in inspector.get_indexes(table)),
                        inspector.get_pk_constraint(table)["constrained_columns"])
                for table in sorted(inspector.get_table_names())}
    finally:
        engine.dispose()


def _check_migrated(store: Store, before: list[dict], after: list[dict], added: tuple[str, ...]) -> None:
    assert len(after) == len(before) == len(STATES)
    for old, new in zip(before, after, strict=True):
        assert {k: new[k] for k in old} == old  # every value kept, floats to the last bit, text verbatim
        assert all(new[name] is None for name in added), {name: new[name] for name in added}
    assert {job.status for job in (store.get(row["id"]) for row in after)} == set(STATES)
    queued = next(row for row in after if row["status"] == "queued")
    claimed = store.claim(worker_id="after", host="elsewhere")  # the migrated queue works
    assert (claimed.id, claimed.status) == (queued["id"], "running")


@pytest.mark.parametrize("name", SQLITE)
def test_a_shipped_sqlite_schema_is_migrated_keeping_every_row(tmp_path, name):
    ddl, user_version = SQLITE[name]
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(ddl)
        db.execute(f"PRAGMA user_version = {user_version}")
        have = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        for row in rows():
            _insert(db.execute, "?", "jobs", {k: v for k, v in row.items() if k in have})
        if "CREATE TABLE IF NOT EXISTS leases" in ddl:
            _insert(db.execute, "?", "leases", {"device": "box:cpu", "job_id": 2, "worker_id": "box:1:cpu",
                                                 "heartbeat_at": 1732612347.75})
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    before = [dict(row) for row in db.execute("SELECT * FROM jobs ORDER BY id")]
    leases_before = [tuple(r) for r in db.execute("SELECT * FROM leases")] if "leases" in ddl else []
    store = Store(path)
    after = [dict(row) for row in db.execute("SELECT * FROM jobs ORDER BY id")]
    assert db.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
    assert [tuple(r) for r in db.execute("SELECT version FROM tally_schema")] == [(schema.VERSION,)]
    assert [tuple(r) for r in db.execute("SELECT * FROM leases")] == leases_before
    _check_migrated(store, before, after, tuple(sorted(set(after[0]) - set(before[0]))))
    fresh = Store(tmp_path / "fresh.db")
    assert _table_shape(f"sqlite:///{path}") == _table_shape(f"sqlite:///{fresh.path}")
    shape, kept = _table_shape(f"sqlite:///{path}"), [dict(r) for r in db.execute("SELECT * FROM jobs")]
    Store(path)  # opening again changes nothing
    assert _table_shape(f"sqlite:///{path}") == shape
    assert [dict(r) for r in db.execute("SELECT * FROM jobs")] == kept
    db.close()


def test_a_new_sqlite_file_is_the_last_shipped_schema_migrated_exactly(tmp_path):
    """Column for column (type, NOT NULL, default, key) and index for index: a new file is what
    the last shipped DDL (v2) becomes once migrated, so no database differs by its history."""
    today = tmp_path / "today.db"
    with sqlite3.connect(today) as db:
        db.executescript(SQLITE["v2"][0])
    Store(today)
    Store(tmp_path / "new.db")

    def pragmas(path) -> dict:
        with sqlite3.connect(path) as db:
            return {t: (db.execute(f"PRAGMA table_info({t})").fetchall(),
                        sorted((i[1], i[2], [c[2] for c in db.execute(f"PRAGMA index_info({i[1]})")])
                               for i in db.execute(f"PRAGMA index_list({t})")))
                    for t in ("jobs", "workers", "leases", "devices", "campaigns")}

    assert pragmas(tmp_path / "new.db") == pragmas(today)


@pytest.mark.parametrize("name", POSTGRES)
def test_a_postgresql_schema_of_each_version_is_migrated_keeping_every_row(pg_server, name):
    ddl = POSTGRES[name]
    url = pg.new_database(pg_server)
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as db:
        db.execute(ddl)
        have = [row["column_name"] for row in db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs'")]
        for row in rows():
            _insert(db.execute, "%s", "jobs", {k: v for k, v in row.items() if k in have})
        before = db.execute("SELECT * FROM jobs ORDER BY id").fetchall()
        store = Store(url)
        after = db.execute("SELECT * FROM jobs ORDER BY id").fetchall()
        assert db.execute("SELECT version FROM tally_schema").fetchall() == [{"version": schema.VERSION}]
    try:
        _check_migrated(store, before, after, tuple(sorted(set(after[0]) - set(before[0]))))
        fresh = Store(pg.new_database(pg_server))
        assert _table_shape(store.database) == _table_shape(fresh.database)
        fresh.close()
        shape = _table_shape(store.database)
        Store(url).close()  # opening again changes nothing
        assert _table_shape(store.database) == shape
    finally:
        store.close()


def test_a_database_newer_than_this_code_is_refused(database):
    store = Store(database)
    with store._write() as db:
        db.execute(schema.tally_schema.update().values(version=schema.VERSION + 1))
    store.close()
    with pytest.raises(StoreUnavailable, match=f"version {schema.VERSION + 1}, newer than this Tally's "
                                               f"{schema.VERSION}"):
        Store(database)


def test_a_sqlite_file_a_newer_tally_numbered_only_in_user_version_is_refused(tmp_path):
    path = tmp_path / "newer.db"
    with sqlite3.connect(path) as db:
        db.executescript(SQLITE["v2"][0])
        db.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    with pytest.raises(StoreUnavailable, match="newer than this Tally"):
        Store(path)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_stores_opening_an_old_database_at_once_migrate_it_once(tmp_path, request, engine):
    """Six stores open a version-0 database at the same moment (a fleet's workers starting
    together): each waits for the one migrating (SQLite's write lock, PostgreSQL's advisory lock),
    then finds it done."""
    if engine == "sqlite":
        database = tmp_path / "old.db"
        with sqlite3.connect(database) as db:
            db.executescript(SQLITE["v0-first"][0])
            for row in rows(without=ADDED_SINCE_V0):
                _insert(db.execute, "?", "jobs", row)
    else:
        database = pg.new_database(request.getfixturevalue("pg_server"))
        with psycopg.connect(database, autocommit=True) as db:
            db.execute(POSTGRES["v0"])
            for row in rows(without=ADDED_SINCE_V0):
                _insert(db.execute, "%s", "jobs", row)
    start = threading.Barrier(6)

    def open_store(_: int) -> Store:
        start.wait()
        return Store(database)

    with ThreadPoolExecutor(6) as pool:
        stores = list(pool.map(open_store, range(6)))
    try:
        with stores[0]._read() as db:
            assert schema.version(db) == schema.VERSION
        assert [job.status for job in stores[0].page(limit=100)[0]] == list(reversed(STATES))
    finally:
        for store in stores:
            store.close()


def test_a_version_4_profiles_table_gains_its_device_column_keeping_its_profiles(tmp_path):
    """Version 5: a profile may be one device's own. A database of version 4 with profiles (the
    table as it was created whole then) keeps them, each a model-wide one."""
    path = tmp_path / "v4.db"
    Store(path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE profiles")
        db.execute("CREATE TABLE profiles (id INTEGER PRIMARY KEY AUTOINCREMENT, device_model TEXT NOT NULL, "
                   "version INTEGER NOT NULL, created_at REAL NOT NULL, body TEXT NOT NULL)")
        db.execute("INSERT INTO profiles (device_model, version, created_at, body) VALUES "
                   "('NVIDIA H200', 1, 0, '{\"device_model\": \"NVIDIA H200\", \"version\": 1}')")
        db.execute("UPDATE tally_schema SET version = 4")
        db.execute("PRAGMA user_version = 4")
    store = Store(path)
    with sqlite3.connect(path) as db:
        assert "device" in {row[1] for row in db.execute("PRAGMA table_info(profiles)")}
        assert db.execute("SELECT version FROM tally_schema").fetchone()[0] == schema.VERSION
    assert store.latest_profile("NVIDIA H200") == {"device_model": "NVIDIA H200", "version": 1}
    added = store.add_profile(device_model="NVIDIA H200", body={}, device="GPU-aaaa")
    assert added["version"] == 2 and store.latest_profile("GPU-aaaa") == added
    assert store.latest_profile("NVIDIA H200")["version"] == 1  # the model's name: model-wide only


def test_a_version_5_database_gains_jobs_across_boxes_keeping_its_jobs(tmp_path):
    """Version 6: a job may span boxes (jobs.nodes; its members in a table added whole). A version-5
    database, without either, keeps its jobs, each on one box, and takes a job across two."""
    path = tmp_path / "v5.db"
    before = Store(path)
    kept = before.submit(probe="matmul", params={}, timeout_s=60, limit=10)
    before.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE members")
        db.execute("ALTER TABLE jobs DROP COLUMN nodes")
        db.execute("UPDATE tally_schema SET version = 5")
        db.execute("PRAGMA user_version = 5")
    store = Store(path)
    with sqlite3.connect(path) as db:
        assert "nodes" in {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        assert db.execute("SELECT version FROM tally_schema").fetchone()[0] == schema.VERSION == 6
    assert store.get(kept.id).nodes == 1 and store.get(kept.id).members == ()
    across = store.submit(probe="collectives", params={}, timeout_s=60, limit=10, device="cpu", nodes=2)
    assert store.get(across.id).nodes == 2 and store.members(across.id) == []
    store.close()
