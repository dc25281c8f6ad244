"""The two databases the store runs on, SQLite and PostgreSQL: which one a setting names, how their
connections and transactions are made, and the PostgreSQL-only SQL (advisory locks, NOTIFY and
LISTEN) that a fleet's shared queue needs. The verbs themselves are in app/jobs/store.py.

SQLite: a connection per operation (NullPool; about a millisecond with its PRAGMAs), made by the store's
own opener so its PRAGMAs are set on each. sqlite3's own transaction handling is switched off
(isolation_level=None) and the "begin" event says BEGIN itself: BEGIN IMMEDIATE for a write, so a
read-then-write such as a claim cannot interleave with another process's; a plain (deferred)
BEGIN for a read, which in WAL mode never waits on the writer. This is SQLAlchemy's documented
pysqlite recipe.

PostgreSQL (psycopg 3): a pool per store, READ COMMITTED; what SQLite's whole-file write lock did
for free is done with row locks (FOR UPDATE [SKIP LOCKED], in the store) and transaction-scoped
advisory locks (`lock`): on SQLite those are no-ops, BEGIN IMMEDIATE already serialises writers.
"""

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.pool import NullPool

from app import config

log = logging.getLogger("tally.jobs")

# The channel a submit, or a job put back in the queue, is announced on.
CHANNEL = "tally_jobs"
# Seconds a PostgreSQL connection attempt may take before it fails (libpq waits for ever otherwise).
CONNECT_TIMEOUT_S = 10
# Seconds between looks at a waiting dispatcher's stop flag while it listens for work.
STOP_CHECK_S = 0.25
# The execution option that marks a write transaction (SQLite: BEGIN IMMEDIATE).
_WRITE = "tally_write"


def url_of(database: str | Path) -> sa.URL:
    """The SQLAlchemy URL of `database`: a path (a SQLite file, today's TALLY_DATABASE_PATH), or a
    URL as TALLY_DATABASE_URL takes it (app/config.py's rule: postgresql://, postgres:// or
    postgresql+psycopg://, all through psycopg 3, or sqlite:///PATH). ValueError naming what is
    wrong for anything else."""
    text = str(database)
    if isinstance(database, Path) or "://" not in text:
        return sa.URL.create("sqlite", database=text)
    return sa.make_url(config.database_url(text))


def sqlite_path(url: sa.URL) -> Path | None:
    """The SQLite file `url` names; None for PostgreSQL."""
    return Path(url.database) if url.get_backend_name() == "sqlite" else None


def shown(url: sa.URL) -> str:
    """`url` as messages and logs may print it: the password hidden."""
    return url.render_as_string(hide_password=True)


def create(url: sa.URL, opener: Callable[[], Any]) -> sa.Engine:
    """The engine for `url`; `opener` makes each SQLite connection (the store's, with its PRAGMAs)."""
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(url, creator=opener, poolclass=NullPool)

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            # The opener set isolation_level=None: sqlite3 says no BEGIN of its own; this is the only one.
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")

        return engine
    # pre_ping: a pooled connection the server dropped (a restart, an idle timeout) is replaced, not
    # handed to a claim that would fail on it.
    return sa.create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})


def is_postgres(db: sa.Connection | sa.Engine) -> bool:
    return db.dialect.name == "postgresql"


@contextmanager
def write(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A write transaction, committed at the end, rolled back on an exception."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield conn


@contextmanager
def read(engine: sa.Engine, *, snapshot: bool = False) -> Iterator[sa.Connection]:
    """A read transaction. snapshot: every statement in it sees the same moment (PostgreSQL's
    REPEATABLE READ, which a read-only transaction takes without any risk of a serialisation
    failure; SQLite's transactions always do)."""
    with engine.connect() as conn:
        if snapshot and is_postgres(conn):
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for `name` (Python's hash() differs between processes)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


def lock(db: sa.Connection, name: str) -> None:
    """PostgreSQL: wait for, then hold until this transaction ends, the advisory lock `name`, so
    that one transaction at a time does what it guards. SQLite: nothing (BEGIN IMMEDIATE has)."""
    if is_postgres(db):
        db.execute(sa.select(sa.func.pg_advisory_xact_lock(lock_key(name))))


def notify(db: sa.Connection) -> None:
    """PostgreSQL: wake the dispatchers waiting for work (delivered when this transaction commits,
    and once however often it is said in one). SQLite: nothing; its dispatchers poll."""
    if is_postgres(db):
        db.execute(sa.select(sa.func.pg_notify(CHANNEL, "")))


def upsert(db: sa.Connection, table: sa.Table, values: dict[str, Any], *, key: str) -> None:
    """Insert the row `values`, or overwrite the one whose `key` column holds the same value."""
    dialect = postgresql if is_postgres(db) else sqlite
    insert = dialect.insert(table).values(**values)
    db.execute(insert.on_conflict_do_update(
        index_elements=[table.c[key]], set_={name: insert.excluded[name] for name in values if name != key}))


class Listeners:
    """For PostgreSQL: one connection per waiting thread, LISTENing on CHANNEL, kept open between
    waits so no notification is missed in between (the server queues them on the connection)."""

    def __init__(self, url: sa.URL) -> None:
        self.conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._local = threading.local()
        self._open: list[Any] = []
        self._guard = threading.Lock()

    def wait(self, timeout_s: float, stop: threading.Event) -> bool:
        """True once a notification arrives (or this thread's listener has only now started, so one
        may have been missed: look at the queue again); False after timeout_s, or once `stop` is set."""
        import psycopg  # here: the SQLite-only server never needs it

        conn = getattr(self._local, "conn", None)
        try:
            if conn is None:
                conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
                conn.execute(f"LISTEN {CHANNEL}")
                self._local.conn = conn
                with self._guard:
                    self._open.append(conn)
                return True
            deadline = time.monotonic() + timeout_s
            while (remaining := deadline - time.monotonic()) > 0 and not stop.is_set():
                if any(True for _ in conn.notifies(timeout=min(remaining, STOP_CHECK_S), stop_after=1)):
                    list(conn.notifies(timeout=0))  # the rest already here: one look at the queue serves all
                    return True
            return False
        except (psycopg.Error, OSError) as e:  # the server went away: wait as on SQLite; listen anew later
            log.warning("listening for jobs on %s failed (%s); polling until it answers again",
                        CHANNEL, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            self._drop(conn)
            stop.wait(timeout_s)
            return False

    def close_mine(self) -> None:
        """Close the calling thread's listener, if it has one."""
        self._drop(getattr(self._local, "conn", None))

    def _drop(self, conn: Any) -> None:
        self._local.conn = None
        if conn is not None:
            with self._guard:
                if conn in self._open:
                    self._open.remove(conn)
            conn.close()

    def close(self) -> None:
        with self._guard:
            listening, self._open = self._open, []
        for conn in listening:
            conn.close()
