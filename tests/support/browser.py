"""The browser tests' tools: a Tally server in a thread, Chromium's flags, a page that records
console errors, Content-Security-Policy violations and requests leaving the box, and the checks
the pages share (charts drawn, a phone's width, readable axes). The fixtures that use them are in
tests/web/browser/conftest.py."""

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import httpx
import uvicorn
from playwright.sync_api import Browser, Page

from app.config import Settings
from app.main import create_app
from tests.support.waiting import wait_for

CHROMIUM = os.environ.get("TALLY_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The app on 127.0.0.1 at a free port, in a thread of this process; its base URL."""
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=30, what="the server to start", every=0.05)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_for_charts(page: Page, selector: str, count: int) -> None:
    """Until `count` canvases match and Chart.js has drawn each (htmx settles a swap a moment
    after its text appears, and the charts are drawn then)."""
    drawn = f"[...document.querySelectorAll({selector!r})].map(c => Chart.getChart(c) !== undefined)"
    page.wait_for_function(f"{drawn}.length === {count} && {drawn}.every(Boolean)")


# Chromium logs a Content-Security-Policy violation as a console error; this makes sure of it
# (and names the directive), whatever the browser's wording.
REPORT_CSP = """document.addEventListener("securitypolicyviolation", e => console.error(
    `CSP violation: ${e.effectiveDirective} blocked ${e.blockedURI || "inline"}`
    + ` at ${e.sourceFile}:${e.lineNumber}`));"""


class Watched:
    """A page that records console errors, Content-Security-Policy violations among them,
    and every request leaving 127.0.0.1."""

    def __init__(self, page: Page) -> None:
        self.page, self.errors, self.outside = page, [], []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.outside.append(r.url)
                if urlparse(r.url).hostname not in ("127.0.0.1", None) else None)

    def violations(self) -> list[str]:
        return [e for e in self.errors if "Content Security Policy" in e or "CSP violation" in e]

    def clean(self) -> None:
        assert self.violations() == [], self.violations()
        assert self.errors == [], self.errors
        assert self.outside == [], self.outside


def watched_at(browser: Browser, width: int = 1280, height: int = 900) -> Watched:
    """A page of its own viewport, watched as `watched` is; close its context when done."""
    context = browser.new_context(viewport={"width": width, "height": height})
    context.add_init_script(REPORT_CSP)
    return Watched(context.new_page())


def assert_fits_a_phone(browser: Browser, url: str, charts: int, shot: os.PathLike) -> None:
    """A 390 px phone: the page's charts drawn, no sideways scroll, nothing off the box, and the
    answer above the form (issue 28, point 13: the Inference answer began 1,800 px down)."""
    watched = watched_at(browser, 390, 844)
    page = watched.page
    page.goto(url, wait_until="networkidle")
    wait_for_charts(page, "#result canvas", charts)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    assert page.evaluate("document.querySelector('#result').getBoundingClientRect().top"
                         " < document.querySelector('.calc form').getBoundingClientRect().top")
    page.screenshot(path=shot, full_page=True)
    watched.clean()
    page.context.close()


def run(base: str, probe: str, params: dict) -> int:
    """Submit a job to the server at `base` and wait for it to succeed; its id."""
    job = httpx.post(base + "/api/v1/jobs", json={"probe": probe, "params": params}).json()
    wait_for(lambda: httpx.get(f"{base}/api/v1/jobs/{job['id']}").json()["status"] == "succeeded",
             timeout=120, what=f"job {job['id']} to succeed")
    return job["id"]


def cancel_launched(page: Page, base: str) -> None:
    """Cancel the job whose card the page shows (#job), launched from its form: the test's check
    is the launch, and the server is shared, so the run must not hold the dispatcher."""
    card = page.locator("#job article.job")
    card.wait_for()
    job_id = int(card.get_attribute("id").removeprefix("job-"))
    httpx.post(f"{base}/api/v1/jobs/{job_id}/cancel")  # a job that has already ended stays as it ended


# Every axis of every chart on a page: its tick labels, their pixel positions and widths.
AXES = """() => [...document.querySelectorAll('canvas')].flatMap(c => {
  const chart = Chart.getChart(c);
  return Object.values(chart.scales).map(s => ({id: s.id, horizontal: s.isHorizontal(),
    labels: s.ticks.map(t => String(t.label)), pixels: s.ticks.map(t => s.getPixelForValue(t.value)),
    sizes: s.isHorizontal() ? s._labelSizes.widths : s._labelSizes.heights}));
})"""


NUMERIC = re.compile(r"^-?[0-9][0-9,.]*( × 10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+|e[+-][0-9]+)?$")


def readable(axes: list[dict]) -> None:
    """Axis labels as the pages write numbers: no e+/e-, at most three significant figures, and no
    two labels on an axis overlapping."""
    for axis in axes:
        for label in filter(NUMERIC.match, axis["labels"]):  # not category names ("mlp")
            assert "e+" not in label and "e-" not in label, (axis["id"], axis["labels"])
            digits = label.split("×")[0].replace(",", "").replace(".", "").strip().strip("0")
            assert len(digits) <= 3, (axis["id"], axis["labels"])
        along = sorted(zip(axis["pixels"], axis["sizes"], strict=True))
        for (p0, s0), (p1, s1) in zip(along, along[1:], strict=False):
            assert p1 - p0 >= (s0 + s1) / 2, (axis["id"], axis["labels"], axis["pixels"])
