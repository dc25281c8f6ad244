"""Opening the job database, on either engine: the connections and transactions every verb of
app/jobs/store.py runs in, a SQLite file created anew when deleted under a running server (its
ids going on from the highest this process saw, so an id never names two jobs), and an idle
dispatcher's wait for work. Each database's own ways: app/jobs/backends.py.
"""

import contextlib
import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from app.jobs import backends, schema
from app.jobs.storage import StoreUnavailable

log = logging.getLogger("tally.jobs")

# Seconds a SQLite connection waits on another's write lock; writes are short, so only a stuck
# peer gets near.
BUSY_TIMEOUT_S = 30
# The tables whose ids clients hold (/api/v1/jobs/{id}, /api/v1/campaigns/{id}): AUTOINCREMENT ones.
ID_TABLES = ("jobs", "campaigns")


class Database:
    """The job database `database` (a SQLite file's path, or a URL), opened and brought to the
    latest schema; Store's verbs run in its _read and _write transactions."""

    def __init__(self, database: str | Path) -> None:
        """StoreUnavailable, saying why, when the database cannot be opened, created or written, or
        is newer than this code; ValueError for a URL of a scheme Tally does not speak."""
        self.url = backends.url_of(database)
        self.path = backends.sqlite_path(self.url)
        """The SQLite file; None on PostgreSQL."""
        self.where = str(self.path) if self.path is not None else backends.shown(self.url)
        """The database as messages name it: the file, or the URL without its password."""
        self.identity = hashlib.sha256((str(self.path.resolve()) if self.path is not None else self.where)
                                       .encode()).hexdigest()[:12]
        """The same for every process on this machine that opens this database (its file's real path,
        or its URL without the password): it scopes the device marks children carry (app/jobs/sweep.py)."""
        self.engine = backends.create(self.url, lambda: self._open())
        self._keeper: sqlite3.Connection | None = None
        self._last_ids: dict[str, int] = {}
        """The highest id this process has seen in each table with ids (SQLite; read at open, and
        at each insert): a file created anew goes on from there."""
        self.listeners = None if self.path is not None else backends.Listeners(self.url)
        try:
            self._create()
        except (sqlite3.Error, sa.exc.DBAPIError) as e:
            self.close()
            raise StoreUnavailable(self.where, e, path=self.path) from None
        except schema.NewerDatabase as e:
            self.close()
            raise StoreUnavailable(self.where, str(e)) from None

    @property
    def database(self) -> str:
        """What Store() takes to open this same database again (in another process, say)."""
        return str(self.path) if self.path is not None else self.url.render_as_string(hide_password=False)

    @property
    def dialect(self) -> str:
        """sqlite or postgresql."""
        return self.engine.dialect.name

    def close(self) -> None:
        """Close the pooled connections and the listeners (the store is not used after)."""
        if self.listeners is not None:
            self.listeners.close()
        self._let_go()
        self.engine.dispose()

    def _keep(self) -> None:
        """Hold one connection open for the store's life (SQLite). WAL mode deletes the -wal and
        -shm files when the last connection closes, and every operation here opens its own, so
        each would create them anew: on a disk that had filled up meanwhile every read and write
        then failed as "disk I/O error". Kept, they stay: reads go on, and a write that needs
        room fails as SQLITE_FULL, which is answered as a full disk."""
        self._let_go()
        keeper = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()  # maps the WAL index
        self._keeper = keeper

    def _let_go(self) -> None:
        if self._keeper is not None:
            with contextlib.suppress(sqlite3.Error):
                self._keeper.close()
            self._keeper = None

    def _create(self) -> None:
        if self.path is not None:
            with contextlib.closing(self._open()) as db:
                _wal(db)
        schema.migrate(self.engine)
        if self.path is not None:
            with contextlib.closing(self._open()) as db:
                for table in ID_TABLES:
                    self.saw_id(table, db.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0])
            self._keep()

    def saw_id(self, table: str, row_id: int) -> None:
        """Note an id of `table` this process has seen (an insert's)."""
        self._last_ids[table] = max(self._last_ids.get(table, 0), row_id)

    def _recreate(self) -> None:
        """The file was deleted under a running server: start a new one rather than answer every
        request with "no such table". Its WAL and shared-memory files belonged to the old one."""
        log.warning("the job database %s is gone; creating a new, empty one", self.path)
        self._let_go()  # the old file's connection
        for leftover in ("-wal", "-shm"):
            Path(f"{self.path}{leftover}").unlink(missing_ok=True)
        last = dict(self._last_ids)
        self._create()
        with contextlib.closing(self._open()) as db:  # AUTOINCREMENT goes on past every id given out
            for table, row_id in last.items():
                if row_id and not db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?",
                                             (row_id, table)).rowcount:
                    db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, row_id))
                self.saw_id(table, row_id)

    def _open(self) -> sqlite3.Connection:
        """A SQLite connection (the engine's creator): sqlite3 emits no BEGIN of its own
        (isolation_level=None); backends.py's "begin" event says BEGIN [IMMEDIATE] itself."""
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        # NORMAL in WAL mode: a power cut may lose the last commits, never corrupt the file.
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _exists(self) -> None:
        if self.path is not None and not self.path.exists():  # connecting would create an empty file
            self._recreate()

    @contextmanager
    def _read(self, *, snapshot: bool = False) -> Iterator[sa.Connection]:
        self._exists()
        with backends.read(self.engine, snapshot=snapshot) as db:
            yield db

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        self._exists()
        with backends.write(self.engine) as db:
            yield db

    def journal_mode(self) -> str:
        """SQLite's journal mode (wal); PostgreSQL has none to speak of."""
        if self.path is None:
            raise ValueError(f"{self.where} is a PostgreSQL database: it has no SQLite journal mode")
        with contextlib.closing(self._open()) as db:
            return db.execute("PRAGMA journal_mode").fetchone()[0]

    def wait_for_work(self, timeout_s: float, stop: threading.Event | None = None) -> bool:
        """An idle dispatcher's wait between looks at the queue. PostgreSQL: until a submit (or a
        job put back in the queue) is announced, True, or timeout_s passes, False.
        SQLite: timeout_s, then False. Either returns False as soon as `stop` is set."""
        stop = stop or threading.Event()
        if self.listeners is None:
            stop.wait(timeout_s)
            return False
        return self.listeners.wait(timeout_s, stop)

    def stop_waiting(self) -> None:
        """This thread waits for work no more: its listener (PostgreSQL) is closed."""
        if self.listeners is not None:
            self.listeners.close_mine()


def _wal(db: sqlite3.Connection) -> None:
    """Put the file in WAL mode (persistent in the file: set once, every later connection is in
    it). Leaving a rollback journal needs the file to itself, and SQLite answers "database is
    locked" at once, without its busy handler, while another connection reads or writes it (six
    stores opening an old file together, each migrating it in turn): tried again until
    BUSY_TIMEOUT_S, as the busy handler would."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        try:
            db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
