"""Logs and start-up: JSON lines on request, a job id on every line about a job, never the
API token; a bad setting stops the process with a message naming it."""

import base64
import json
import logging
import subprocess
import sys
from urllib.parse import quote, quote_plus

import httpx
import pytest

from app import logs
from tests.support.live import ROOT, free_port, serve
from tests.support.waiting import wait_for

TOKEN = "tk-9f2c1e77-do-not-log"


def test_a_real_server_logs_json_with_job_ids_and_never_the_token(tmp_path):
    env = {"TALLY_LOG_FORMAT": "json", "TALLY_API_TOKEN": TOKEN, "TALLY_LOG_LEVEL": "info",
           "TALLY_DATABASE_PATH": str(tmp_path / "t.db")}
    with serve([sys.executable, "-m", "app"], env, tmp_path / "server.log") as live:
        body = {"probe": "matmul", "params": {"sweep": "custom", "shapes": [{"m": 16, "k": 16, "n": 16}],
                                              "dtypes": ["float32"], "device": "cpu"}}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        job = httpx.post(f"{live.url}/api/v1/jobs", json=body, headers=auth, timeout=10)
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        # A client that puts the token in a URL: the access line must still not show it.
        httpx.get(f"{live.url}/api/v1/jobs", params={"token": TOKEN}, timeout=10)

        def succeeded() -> bool:
            return httpx.get(f"{live.url}/api/v1/jobs/{job_id}", timeout=10).json()["status"] == "succeeded"

        wait_for(succeeded, timeout=120, what=f"job {job_id} to succeed", every=0.2, context=live.log)
    text = live.log()
    assert TOKEN not in text
    lines = [json.loads(line) for line in text.splitlines()]
    about_job = [line for line in lines
                 if line["logger"] == "tally.jobs" and "dispatcher" not in line["message"]]
    assert {line.get("job_id") for line in about_job} == {job_id}, about_job
    assert any(line["message"].startswith("started") for line in about_job)
    assert any(line["message"] == "ended: succeeded" for line in about_job)
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert any({"method": "POST", "path": "/api/v1/jobs", "status": 202}.items() <= line.items()
               for line in access), access
    assert any(logs.REDACTED in line["path"] for line in access)


def record(message: str, *args, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("tally.jobs", logging.INFO, __file__, 1, message, args, None)
    rec.__dict__.update(extra)
    return rec


def test_human_lines_show_the_job_id_and_hide_the_token():
    human = logs.HumanFormatter(secrets=(TOKEN,))
    line = human.format(record("started: probe=%s", "matmul", job_id=7))
    assert line.endswith("INFO tally.jobs job=7: started: probe=matmul"), line
    hidden = human.format(record("header was %s", f"Bearer {TOKEN}"))
    assert TOKEN not in hidden and logs.REDACTED in hidden
    assert "job=" not in hidden


def test_json_lines_carry_the_job_id_as_a_field():
    line = json.loads(logs.JsonFormatter(secrets=(TOKEN,)).format(record("ended: %s", "oom", job_id=12)))
    assert (line["job_id"], line["message"], line["level"], line["logger"]) == (12, "ended: oom", "info",
                                                                                "tally.jobs")


def start(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_a_bad_setting_stops_start_up_naming_it(tmp_path):
    db = str(tmp_path / "t.db")
    cases = {"TALLY_PORT": "99999", "TALLY_LOG_FORMAT": "xml", "TALLY_GPUS": "0,x", "TALLY_QUEUE_LIMIT": "0"}
    for name, value in cases.items():
        for argv in ([sys.executable, "-m", "app"], [sys.executable, "-m", "app.cli", "worker"]):
            done = start(argv, TALLY_DATABASE_PATH=db, **{name: value})
            assert done.returncode == 2, (argv, name, done.stderr)
            assert f"invalid setting {name}" in done.stderr and "Traceback" not in done.stderr, done.stderr
    crossed = start([sys.executable, "-m", "app"], TALLY_DATABASE_PATH=db, TALLY_JOB_TIMEOUT_S="7200")
    assert crossed.returncode == 2 and "TALLY_JOB_TIMEOUT_S" in crossed.stderr, crossed.stderr


ODD_TOKEN = "Tok3n-s3cret/+=abc def"


@pytest.mark.parametrize("spelled", [
    ODD_TOKEN, quote(ODD_TOKEN, safe=""), quote(ODD_TOKEN), quote_plus(ODD_TOKEN),
    "Tok3n-s3cret%2f%2b%3dabc%20def", "".join(f"%{b:02X}" for b in ODD_TOKEN.encode()),
])
def test_every_url_spelling_of_the_token_is_redacted(spelled):
    line = logs.redact(f'127.0.0.1:5 - "GET /api/v1/jobs?x=1&token={spelled}&y=2 HTTP/1.1" 200', (ODD_TOKEN,))
    assert spelled not in line and logs.REDACTED in line and "x=1" in line and "y=2" in line, line


def test_a_basic_header_carrying_the_token_is_redacted():
    header = "Basic " + base64.b64encode(f"admin:{ODD_TOKEN}".encode()).decode()
    line = logs.redact(f"rejected {header} from 10.0.0.1", (ODD_TOKEN,))
    assert header not in line and line == f"rejected Basic {logs.REDACTED} from 10.0.0.1"
    assert logs.redact("Basic dXNlcjpvdGhlcg==", (ODD_TOKEN,)) == "Basic dXNlcjpvdGhlcg=="


def test_plain_uvicorn_redacts_the_token_in_any_encoding(tmp_path):
    env = {"TALLY_API_TOKEN": ODD_TOKEN, "TALLY_DATABASE_PATH": str(tmp_path / "t.db"),
           "TALLY_EMBEDDED_WORKER": "false"}
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port)]
    with serve(argv, {**env, "TALLY_PORT": str(port)}, tmp_path / "server.log") as live:
        for spelled in (quote(ODD_TOKEN, safe=""), quote_plus(ODD_TOKEN)):
            httpx.get(f"{live.url}/api/v1/jobs?token={spelled}", timeout=10)
    text = live.log()
    assert "GET /api/v1/jobs?token=" in text, text
    for spelled in (ODD_TOKEN, quote(ODD_TOKEN, safe=""), quote_plus(ODD_TOKEN), "Tok3n"):
        assert spelled not in text, text
