"""The PostgreSQL the fleet's queue will run on (issue 17), started throw-away as the tests
will start it: a real server, and the two features the queue's claim and wake-up rest on."""

import threading

import psycopg
import pytest

from tests.support import pg
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.postgres  # its own cluster, not the pg_server fixture's


@pytest.fixture(scope="module")
def url():
    with pg.cluster() as u:
        yield u


def test_the_cluster_is_a_real_server_of_its_own(url):
    with psycopg.connect(url) as db:
        version = db.execute("SHOW server_version_num").fetchone()[0]
        directory = db.execute("SHOW data_directory").fetchone()[0]
    assert int(version) >= 130000  # SKIP LOCKED (9.5) and everything since
    assert "tally-pg-" in directory  # its own cluster, in the test's temporary directory


def test_skip_locked_claims_never_overlap(url):
    # Two workers claim at once: each row goes to exactly one, as the queue's claim will need.
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS q; CREATE TABLE q (id serial PRIMARY KEY, taken_by text)")
        db.execute("INSERT INTO q (taken_by) SELECT NULL FROM generate_series(1, 10)")
    claim = "SELECT id FROM q WHERE taken_by IS NULL ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED"
    a, b = psycopg.connect(url), psycopg.connect(url)
    try:
        first = [r[0] for r in a.execute(claim).fetchall()]
        second = [r[0] for r in b.execute(claim).fetchall()]  # a still holds its rows' locks
        assert first == [1, 2, 3] and second == [4, 5, 6]
        a.rollback()
        assert [r[0] for r in a.execute(claim).fetchall()] == [1, 2, 3]  # released, claimable again
    finally:
        a.close()
        b.close()


def test_notify_wakes_a_listening_worker(url):
    """A notice sent before the listener reads its socket waits there for it: no head start needed.
    notifies() yields notices only (it has no poll), so a payload within PATIENCE_S is the notice."""
    woke: list[str] = []
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute("LISTEN jobs")

        def wait() -> None:
            woke.extend(note.payload for note in listener.notifies(timeout=PATIENCE_S, stop_after=1))

        thread = threading.Thread(target=wait)
        thread.start()
        with psycopg.connect(url, autocommit=True) as sender:
            sender.execute("SELECT pg_notify('jobs', '42')")
        thread.join(PATIENCE_S + 5)
    assert woke == ["42"]
