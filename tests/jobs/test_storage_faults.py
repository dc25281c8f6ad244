"""The job database's file going wrong: deleted under a running server, a full disk, a
read-only directory, a file that is not a database. Start-up says so in one line and exits
2; at run time every answer keeps the documented JSON shape, and service resumes."""

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import Settings
from app.jobs.storage import StoreUnavailable
from app.jobs.store import Store
from app.main import create_app
from tests.support.api import Api
from tests.support.live import ROOT

JOB = {"probe": "bandwidth", "params": {"device": "cpu", "size_bytes": 2**20}}


class CappedStore(Store):
    """A store whose file may not grow past `max_pages` pages: SQLite's own SQLITE_FULL, as a
    full disk gives, without filling one."""

    max_pages: int | None = None

    def _open(self) -> sqlite3.Connection:
        db = super()._open()
        if self.max_pages is not None:
            db.execute(f"PRAGMA max_page_count={self.max_pages}")
        return db


@pytest.fixture
def api(tmp_path):
    settings = Settings(database_path=tmp_path / "tally.db", embedded_worker=False)
    app = create_app(settings)
    app.state.store = CappedStore(settings.database_path)
    client = Api(app)
    yield client
    client.close()


def test_a_deleted_database_is_created_anew_and_no_id_names_two_jobs(api, tmp_path):
    """A client polling /api/v1/jobs/2 must not be handed another job once the file is made anew:
    ids go on from the highest the server gave out."""
    ids = [api.post("/api/v1/jobs", JOB).json()["id"] for _ in range(3)]
    for name in ("tally.db", "tally.db-wal", "tally.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    listed = api.get("/api/v1/jobs")
    assert listed.status_code == 200 and listed.json()["count"] == 0
    assert api.get(f"/api/v1/jobs/{ids[1]}").status_code == 404  # gone with its file, not another job
    again = api.post("/api/v1/jobs", JOB)
    assert again.status_code == 202 and again.json()["id"] == ids[-1] + 1
    assert api.get("/readyz").json()["database"] is True


def test_a_full_disk_is_a_json_503_and_service_resumes_with_nothing_lost(api):
    store = api.app.state.store
    first = api.post("/api/v1/jobs", JOB).json()["id"]
    with sqlite3.connect(store.path) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
    store.max_pages = pages  # no room for one more page
    padded = JOB | {"timeout_s": 60}
    refused = None
    for _ in range(200):  # pages fill a row at a time; the first refusal is the one to read
        refused = api.post("/api/v1/jobs", {**padded, "params": {**JOB["params"], "seed": _}})
        if refused.status_code != 202:
            break
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"].isdigit()
    body = refused.json()
    assert body["detail"][0]["field"] == "database" and body["detail"][0]["type"] == "disk_full"
    assert "full" in body["message"]
    store.max_pages = None  # space freed
    again = api.post("/api/v1/jobs", JOB)
    assert again.status_code == 202
    assert api.get(f"/api/v1/jobs/{first}").status_code == 200


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB file system of its own (tmpfs: `make test` runs as root, as its apt-get does)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_disk_that_filled_up_after_start_up_is_a_full_disk_and_reads_go_on(small_disk):
    """A real full file system, filled after the server opened its database: the next write is a
    503 disk_full (not database_unavailable), reads still answer, and writes resume once room is made."""
    api = Api(create_app(Settings(database_path=small_disk / "tally.db", embedded_worker=False)))
    try:
        first = api.post("/api/v1/jobs", JOB).json()["id"]
        filler = small_disk / "filler"
        with open(filler, "wb", buffering=0) as out, pytest.raises(OSError, match="No space left"):
            while True:
                out.write(b"\0" * 65536)
        refused = api.post("/api/v1/jobs", JOB)
        assert refused.status_code == 503, refused.text
        assert refused.json()["detail"][0]["type"] == "disk_full" and "full" in refused.json()["message"]
        assert api.get(f"/api/v1/jobs/{first}").status_code == 200
        assert api.get("/api/v1/jobs").json()["count"] == 1
        filler.unlink()
        assert api.post("/api/v1/jobs", JOB).status_code == 202
    finally:
        api.close()
        api.app.state.store.close()


def test_an_unexpected_error_keeps_the_json_shape(api, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(api.app.state.store, "page", broken)
    client = Api(api.app)
    client.client._transport = type(client.client._transport)(app=api.app, raise_app_exceptions=False)
    response = client.get("/api/v1/jobs")
    client.close()
    assert response.status_code == 500 and response.json() == {
        "message": "internal error: the server's log has the details", "detail": []}


def test_store_unavailable_says_which_file_and_why(tmp_path):
    garbage = tmp_path / "not-a-db.db"
    garbage.write_bytes(b"this is not a database file, not at all" * 100)
    with pytest.raises(StoreUnavailable, match="not a SQLite database") as caught:
        Store(garbage)
    assert str(garbage) in str(caught.value)
    with pytest.raises(StoreUnavailable, match="cannot be created or opened"):
        Store(tmp_path / "no" / "such" / "dir" / "tally.db")


def test_a_full_disk_at_start_up_names_the_problem(tmp_path):
    class Full(CappedStore):
        max_pages = 1

    with pytest.raises(StoreUnavailable, match="disk holding it is full"):
        Full(tmp_path / "tally.db")


@pytest.mark.parametrize(("path", "problem"), [
    ("not-a-db", "is not a SQLite database"),
    ("missing-dir", "cannot be created or opened"),
    ("/proc/tally-read-only.db", "cannot be created or opened"),  # a read-only file system, even for root
])
@pytest.mark.parametrize("command", ["serve", "worker"])
def test_start_up_gives_one_line_and_exits_2(tmp_path, path, problem, command):
    if path == "not-a-db":
        target = tmp_path / "garbage.db"
        target.write_bytes(b"\x00garbage" * 512)
    elif path == "missing-dir":
        target = tmp_path / "nowhere" / "tally.db"
    else:
        target = Path(path)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TALLY_DATABASE_PATH": str(target),
           "TALLY_PORT": "1"}
    done = subprocess.run([sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
                           command], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(target) in lines[0] and problem in lines[0], done.stderr
    assert "Traceback" not in done.stderr
