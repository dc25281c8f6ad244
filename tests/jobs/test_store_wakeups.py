"""An idle dispatcher's wait for work (Store.wait_for_work): on PostgreSQL a submit wakes it at
once through LISTEN/NOTIFY, whatever its poll interval; on SQLite it sleeps its poll interval.
Either way a stop cuts the wait short."""

import threading
import time

import psycopg
import pytest

from app.jobs.dispatcher import Dispatcher
from app.jobs.store import Store
from tests.support import pg
from tests.support.jobs import FAULT_ARGV
from tests.support.waiting import PATIENCE_S, wait_for

# An idle dispatcher's poll interval, far beyond any test's patience (PATIENCE_S).
LONG_POLL_S = 3600


def listening(store: Store) -> int:
    """Sessions on the store's database waiting in LISTEN (the listener's last statement)."""
    with psycopg.connect(store.url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as db:
        return db.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                          "AND query LIKE 'LISTEN %'").fetchone()[0]


@pytest.fixture
def pg_store(pg_server) -> Store:
    store = Store(pg.new_database(pg_server))
    yield store
    store.close()


def test_on_postgresql_an_idle_dispatcher_is_woken_by_a_submit_not_by_its_poll(pg_store):
    """Its poll interval is an hour, so a job it runs within the test's patience was announced to it.
    How soon (tens of milliseconds) is printed, not asserted: speed lives in bench/store_contention.py."""
    dispatcher = Dispatcher(pg_store, "idle", child_argv=FAULT_ARGV, child_env={"TALLY_FAULT": "ok"},
                            poll_s=LONG_POLL_S)
    dispatcher.start()
    try:
        # Its first wait starts the listener and looks again; in its second it has seen the empty
        # queue after listening, so only the notice can bring it the job.
        wait_for(lambda: dispatcher.idle_waits >= 2 and listening(pg_store) == 1,
                 what="the dispatcher to wait on its listener")
        job = pg_store.submit(probe="matmul", params={"sleep_s": 0}, timeout_s=60, limit=10)
        done = wait_for(lambda: (row := pg_store.get(job.id)).terminal and row, what="the job to run")
    finally:
        assert dispatcher.stop(PATIENCE_S)
    assert done.status == "succeeded"
    assert listening(pg_store) == 0  # a stopped dispatcher leaves no connection behind
    picked_up_s = done.started_at - done.created_at
    print(f"\npostgresql: submitted to claimed in {picked_up_s * 1000:.1f} ms (poll: {LONG_POLL_S} s)")


def test_a_waiting_dispatcher_stops_at_once_whatever_its_poll_interval(store):
    """Its poll interval is an hour: a stop within the test's patience cut its wait short."""
    dispatcher = Dispatcher(store, "idle", child_argv=FAULT_ARGV, poll_s=LONG_POLL_S)
    dispatcher.start()
    wait_for(lambda: store.live_workers(within_s=60) == ["idle"] and dispatcher.idle_waits >= 1,
             what="the dispatcher to wait for work")
    assert dispatcher.stop(PATIENCE_S)


def test_wait_for_work_is_woken_by_a_submit_from_another_connection(pg_store):
    other = Store(pg_store.database)  # another process's store, as far as the server can tell
    try:
        assert pg_store.wait_for_work(5) is True  # the first call starts the listener: look again
        started = time.monotonic()
        assert pg_store.wait_for_work(0.3) is False  # nothing announced: the whole timeout
        assert time.monotonic() - started >= 0.3
        timer = threading.Timer(0.2, lambda: other.submit(probe="matmul", params={}, timeout_s=60, limit=10))
        timer.start()
        assert pg_store.wait_for_work(PATIENCE_S) is True  # True is the notice; a timeout is False
        timer.join()
        for _ in range(3):  # three submits before the next wait
            other.submit(probe="matmul", params={}, timeout_s=60, limit=10)
        wakes = 0
        while pg_store.wait_for_work(0.5):
            wakes += 1
        # Never more wake-ups than announcements: those already arrived are taken together (how many
        # have arrived by the first wake-up is the server's timing, not the store's).
        assert 1 <= wakes <= 3
        claimed = pg_store.claim(worker_id="w", host="box")
        assert pg_store.wait_for_work(0.3) is False  # a claim announces nothing
        pg_store.requeue(claimed.id)  # a job back in the queue is announced
        assert pg_store.wait_for_work(PATIENCE_S) is True
        again = pg_store.claim(worker_id="w", host="box")
        pg_store.finish(again.id, status="failed", error={"type": "E", "message": "m", "detail": {}})
        assert pg_store.wait_for_work(0.3) is False  # nor does an ending
    finally:
        other.close()


def test_on_sqlite_wait_for_work_sleeps_its_timeout(tmp_path):
    store = Store(tmp_path / "tally.db")
    started = time.monotonic()
    assert store.wait_for_work(0.3) is False
    assert time.monotonic() - started >= 0.3
    stop = threading.Event()
    stop.set()
    answers: list[bool] = []  # an hour's wait, in a thread, so that one that ignored `stop` fails here
    waiting = threading.Thread(target=lambda: answers.append(store.wait_for_work(LONG_POLL_S, stop)),
                               daemon=True)
    waiting.start()
    waiting.join(PATIENCE_S)
    assert answers == [False]
