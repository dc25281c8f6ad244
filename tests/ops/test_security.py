"""The server refuses what a hostile web page could make a browser send it: state changes from
another site (403), requests under a rebound host name (400); and its pages carry a
Content-Security-Policy and friends. The browser's view: tests/web/browser/test_browser.py."""

import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from app.config import Settings
from app.ops.security import hostname
from app.paths import TEMPLATES_DIR
from tests.support.api import Api, assert_names_field

JOBS = "/api/v1/jobs"
JOB = {"probe": "bandwidth", "params": {"size_bytes": 2**20, "measure_s": 0.01}}
FORM = {"content-type": "application/x-www-form-urlencoded"}
EVIL = "http://evil.example"


def count(api: Api) -> int:
    return api.get(JOBS).json()["count"]


# --- cross-site request forgery ------------------------------------------------------------------

def test_a_cross_origin_launch_is_refused_and_queues_nothing(make_api):
    api = make_api()
    for headers in ({"origin": EVIL, "content-type": "text/plain"}, {"origin": EVIL} | FORM,
                    {"sec-fetch-site": "cross-site"} | FORM, {"origin": "null"} | FORM,
                    {"origin": "http://localhost:8001"} | FORM):  # same host, another port
        response = api.post("/ui/benchmarks/launch", content="probe=bandwidth", headers=headers)
        body = assert_names_field(response, "origin", status=403)
        assert body["detail"][0]["type"] == "cross_site"
    assert count(api) == 0


def test_a_cross_origin_cancel_is_refused_and_the_job_stays_queued(make_api):
    api = make_api()
    job = api.post(JOBS, JOB).json()
    for headers in ({"origin": EVIL}, {"sec-fetch-site": "cross-site"}):
        assert_names_field(api.post(f"{JOBS}/{job['id']}/cancel", headers=headers), "origin", status=403)
        assert_names_field(api.post(JOBS, JOB, headers=headers), "origin", status=403)
    assert api.get(f"{JOBS}/{job['id']}").json()["status"] == "queued"
    assert count(api) == 1


def test_same_origin_and_header_free_requests_change_state(make_api):
    api = make_api()
    same = {"origin": "http://localhost", "sec-fetch-site": "same-origin"}
    first = api.post("/ui/benchmarks/launch", content=urlencode({"probe": "bandwidth"}), headers=same | FORM)
    assert first.status_code == 200 and "Job #1" in first.text, first.text
    assert api.post(JOBS, JOB).status_code == 202  # curl and scripts send neither header
    assert api.post(f"{JOBS}/1/cancel", headers=same).json()["status"] == "cancelled"
    assert api.post(f"{JOBS}/2/cancel", headers={"sec-fetch-site": "none"}).status_code == 200


def test_reading_from_another_site_is_not_refused(make_api):
    """GET changes nothing; what another site may read of it is CORS's business (none here)."""
    api = make_api()
    response = api.get(JOBS, headers={"origin": EVIL, "sec-fetch-site": "cross-site"})
    assert response.status_code == 200 and "access-control-allow-origin" not in response.headers


def test_the_launch_route_refuses_a_body_that_is_not_its_form(make_api):
    api = make_api()
    body = assert_names_field(api.post("/ui/benchmarks/launch", content=b"anything",
                                       headers={"content-type": "text/plain"}), "body")
    assert body["detail"][0]["loc"] == ["body"] and "x-www-form-urlencoded" in body["message"]
    assert_names_field(api.post("/ui/benchmarks/launch", json={"probe": "bandwidth"}), "body")
    assert_names_field(api.post("/ui/benchmarks/launch", content=b"anything", headers=FORM), "probe")
    assert_names_field(api.post("/ui/benchmarks/launch", content=b"", headers=FORM), "probe")
    assert count(api) == 0


# --- DNS rebinding --------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["rebound.example", "rebound.example:8000", "127.0.0.1.evil.example",
                                  "localhost.evil", ""])
def test_a_loopback_server_refuses_other_host_names(make_api, host):
    api = make_api()
    for path in ("/", "/api/v1/hardware", "/healthz"):
        response = api.get(path, headers={"host": host})
        body = assert_names_field(response, "host", status=400)
        assert body["detail"][0]["loc"] == ["header", "host"] and "TALLY_ALLOWED_HOSTS" in body["message"]


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "LocalHost:1", "127.0.0.1:8000",
                                  "[::1]:8000", "[::1]"])
def test_a_loopback_server_answers_its_loopback_names(make_api, host):
    assert make_api().get("/api/v1/hardware", headers={"host": host}).status_code == 200


def test_allowed_hosts_default_by_bind_address():
    loopback = ["localhost", "127.0.0.1", "::1"]
    for bound in ("127.0.0.1", "localhost", "::1", "[::1]"):
        assert Settings(host=bound).allowed_hosts == loopback, bound
    assert Settings(host="0.0.0.0").host_names() is None  # bound elsewhere: any host
    assert Settings(host="127.0.0.1", allowed_hosts="*").host_names() is None


def test_allowed_hosts_from_the_environment(monkeypatch, make_api):
    monkeypatch.setenv("TALLY_ALLOWED_HOSTS", "Tally.Lab, [fd00::1] ,")
    settings = Settings(host="0.0.0.0")
    assert settings.allowed_hosts == ["tally.lab", "fd00::1"]
    api = make_api(host="0.0.0.0")
    for host, status in {"tally.lab:8000": 200, "[fd00::1]:80": 200, "127.0.0.1:8000": 200,
                         "other.lab": 400}.items():
        assert api.get("/healthz", headers={"host": host}).status_code == status, host


def test_hostname_of_a_host_header():
    assert [hostname(h) for h in ("a.b:80", "A.B", "[::1]:8000", "[::1]", "::1", "[bad")] == [
        "a.b", "a.b", "::1", "::1", "::1", "[bad"]


# --- headers on the pages ------------------------------------------------------------------------

PAGES = ["/", "/formats", "/tensors", "/time", "/memory", "/flops", "/matmul", "/mlp", "/fit", "/benchmarks",
         "/docs", "/ui/time", "/ui/fit", "/static/app.js", "/static/fit.js"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_carries_the_security_headers(api, path):
    response = api.get(path)
    assert response.status_code == 200
    csp = dict(part.strip().split(" ", 1) for part in response.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == csp["script-src"] == csp["style-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


def test_pages_run_no_inline_script():
    """Every <script> names a file in static/; no on*= handler, no style= attribute."""
    for template in Path(TEMPLATES_DIR).rglob("*.html"):
        text = template.read_text()
        scripts = re.findall(r"<script\b[^>]*>", text)
        assert all('src="/static/' in s for s in scripts), (template, scripts)
        assert not re.search(r"\son[a-z]+\s*=|\sstyle\s*=|hx-on", text), template


def test_the_docs_page_starts_swagger_from_a_static_file(api):
    page = api.get("/docs").text
    assert re.findall(r"<script\b[^>]*>", page) == [
        '<script src="/static/vendor/swagger-ui/swagger-ui-bundle.js">', '<script src="/static/docs.js">']
    assert api.get("/static/docs.js").status_code == 200
