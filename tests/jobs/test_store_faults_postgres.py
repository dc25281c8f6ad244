"""A PostgreSQL job database going wrong, as tests/jobs/test_storage_faults.py has SQLite's: nothing
listening, no such database, a login refused. Start-up says which in one line and exits 2; at run
time the API answers a JSON 503 naming the problem, never a 500."""

import json
import subprocess
import sys

import psycopg
import pytest

from app.config import Settings
from app.jobs.storage import StoreUnavailable
from app.jobs.store import Store
from app.main import create_app
from tests.support import pg
from tests.support.api import Api
from tests.support.jobs import FAULT_ARGV
from tests.support.live import ROOT
from tests.support.waiting import wait_for

JOB = {"probe": "bandwidth", "params": {"device": "cpu", "size_bytes": 2**20}}
PASSWORD = "right-horse-battery"


@pytest.fixture(scope="module")
def password_user(pg_server) -> str:
    """A role that must log in with a password (scram-sha-256 over the socket); the URL of its own
    database, password included. The cluster trusts every other role."""
    with psycopg.connect(pg_server, autocommit=True) as db:
        db.execute(f"CREATE ROLE careful LOGIN PASSWORD '{PASSWORD}'")
        db.execute("CREATE DATABASE careful OWNER careful")
        hba = db.execute("SHOW hba_file").fetchone()[0]
        with open(hba) as f:
            rules = f.read()
        with open(hba, "w") as f:  # the first matching line wins
            f.write(f"local all careful scram-sha-256\n{rules}")
        db.execute("SELECT pg_reload_conf()")
    return pg.database_url(pg_server, "careful").replace("tally@", f"careful:{PASSWORD}@")


def problems(tmp_path, pg_server, password_user) -> dict[str, tuple[str, str]]:
    """name: (a URL, what its one-line problem says)."""
    return {
        "nothing listening": (f"postgresql://tally@/postgres?host={tmp_path}&port={pg.PORT}",
                              "cannot be reached"),
        "no such database": (pg.database_url(pg_server, "no_such_db"), "no such database"),
        "login refused": (password_user.replace(PASSWORD, "wrong"), "refused the login"),
    }


@pytest.mark.parametrize("name", ["nothing listening", "no such database", "login refused"])
def test_store_unavailable_says_in_one_line_what_is_wrong(tmp_path, pg_server, password_user, name):
    url, said = problems(tmp_path, pg_server, password_user)[name]
    with pytest.raises(StoreUnavailable, match=said) as caught:
        Store(url)
    message = str(caught.value)
    assert "\n" not in message and "wrong" not in message  # the password is never shown
    if name == "login refused":
        right = Store(password_user)  # the right password gets in
        right.close()


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_start_up_gives_one_line_and_exits_2(tmp_path, pg_server, command):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TALLY_PORT": "1",
           "TALLY_DATABASE_URL": pg.database_url(pg_server, "no_such_db")}
    done = subprocess.run([sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
                           command], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no_such_db" in lines[0] and "no such database" in lines[0], done.stderr


def test_a_bad_scheme_is_a_settings_error_naming_the_variable(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TALLY_DATABASE_URL": "mysql://tally@db/tally"}
    done = subprocess.run([sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
                           "worker"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("tally: invalid setting TALLY_DATABASE_URL:") and "'mysql'" in done.stderr


def test_a_database_gone_at_run_time_is_a_json_503_and_nothing_else_breaks(pg_server):
    url = pg.new_database(pg_server)
    api = Api(create_app(Settings(database_url=url, embedded_worker=False)))
    try:
        first = api.post("/api/v1/jobs", JOB)
        assert first.status_code == 202, first.text
        with psycopg.connect(pg_server, autocommit=True) as db:
            db.execute(f"DROP DATABASE {url.split('?')[0].rsplit('/', 1)[1]} WITH (FORCE)")
        for response in (api.post("/api/v1/jobs", JOB), api.get("/api/v1/jobs"), api.get("/api/v1/jobs/1")):
            assert response.status_code == 503, response.text
            body = response.json()
            assert body["detail"][0]["field"] == "database" and "no such database" in body["message"]
            assert response.headers["retry-after"].isdigit()
        assert api.get("/readyz").json()["database"] is False
        assert api.get("/healthz").status_code == 200
        scrape = api.get("/metrics")  # monitoring still sees the server, and that the database is out
        assert scrape.status_code == 200 and "tally_jobs_available 0.0" in scrape.text
        assert 'tally_http_requests_total{method="POST",route="/api/v1/jobs",status="503"}' in scrape.text
    finally:
        api.close()
        api.app.state.store.close()


@pytest.mark.parametrize(("given", "taken"), [
    ("postgresql://tally:pw@db:5432/tally", "postgresql+psycopg://tally:pw@db:5432/tally"),
    ("postgres://db/tally", "postgresql+psycopg://db/tally"),
    ("postgresql+psycopg://db/tally", "postgresql+psycopg://db/tally"),
    ("sqlite:////var/lib/tally/tally.db", "sqlite:////var/lib/tally/tally.db"),
    ("", None),
])
def test_database_urls_taken(given, taken):
    settings = Settings(database_url=given)
    assert settings.database_url == taken
    assert settings.database() == (taken or settings.database_path)


@pytest.mark.parametrize(("given", "said"), [
    ("mysql://db/tally", "the scheme 'mysql' is not one Tally speaks"),
    ("sqlite://", "needs a file path"),
    ("sqlite:///:memory:", "needs a file path"),
    ("db.example:5432/tally", "a URL is SCHEME://"),
])
def test_database_urls_refused_saying_why(given, said):
    with pytest.raises(ValueError, match=said):
        Settings(database_url=given)
    if "://" in given:
        with pytest.raises(ValueError, match=said):
            Store(given)


def test_the_database_password_is_kept_out_of_the_logs():
    settings = Settings(database_url="postgresql://tally:s3cret-pw@db/tally")
    assert "s3cret-pw" in settings.secrets()


def test_a_worker_whose_database_is_gone_logs_the_error_once_not_every_pass(tmp_path, pg_server):
    """A real `tally worker` loop against a PostgreSQL database dropped under it fails on every pass
    (five a second); its log holds the error once, however many passes fail (each one counted by
    the loop's debug line), until a minute has gone by."""
    url = pg.new_database(pg_server)
    log = tmp_path / "worker.log"
    script = ("import json, logging, sys\nfrom app.jobs.worker import run\n"
              "logging.basicConfig(level=logging.INFO)\nlogging.getLogger('tally.jobs').setLevel(logging.DEBUG)\n"
              "run(**json.loads(sys.argv[1]))\n")
    args = {"database": url, "worker_id": "w", "child_argv": FAULT_ARGV}
    with open(log, "w") as out:
        worker = subprocess.Popen([sys.executable, "-c", script, json.dumps(args)], cwd=ROOT, stderr=out)
    try:
        wait_for(lambda: "dispatcher w started" in log.read_text(), what="the worker to start")
        with psycopg.connect(pg_server, autocommit=True) as db:
            db.execute(f"DROP DATABASE {url.split('?')[0].rsplit('/', 1)[1]} WITH (FORCE)")
        wait_for(lambda: "error in the job loop" in log.read_text(), what="the first error")
        failed_at = log.read_text().count("waiting (")
        wait_for(lambda: log.read_text().count("waiting (") >= failed_at + 20, what="twenty more failing passes")
        lines = log.read_text().splitlines()
        assert sum(line.startswith("ERROR") for line in lines) == 1, [ln for ln in lines if ln.startswith("ERROR")]
    finally:
        worker.kill()
        worker.wait()
