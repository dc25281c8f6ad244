"""Every page in a real browser (tests/web/browser/conftest.py): each loads with no console error
and nothing fetched off the box, the course's figures on the calculators, a CPU probe launched
from the page, each probe's job page, a burn-in campaign, two runs compared, a phone's width and
dark mode, and a page on another origin that cannot launch or cancel jobs."""

import functools
import http.server
import struct
import threading

import httpx
import pytest
import torch
from playwright.sync_api import expect

from tests.support.browser import wait_for_charts
from tests.support.waiting import wait_for
from tests.support.devices import H100_REPORTED_BYTES

PAGES = ["/", "/formats", "/tensors", "/time", "/memory", "/flops", "/matmul", "/mlp", "/fit", "/benchmarks",
         "/docs", "/fleet", "/burn-in"]


@pytest.mark.parametrize("path", PAGES)
def test_pages_load_cleanly_and_stay_on_the_box(watched, base_url, path):
    watched.page.goto(base_url + path, wait_until="networkidle")
    expect(watched.page.locator("body")).to_be_visible()
    watched.clean()


def test_time_form_computes_the_course_example(watched, base_url, screenshots):
    page = watched.page
    page.goto(base_url + "/time?params=1e9&tokens=1e12&num_gpus=8&mfu=0.3", wait_until="networkidle")
    for name, value in {"params": "70e9", "tokens": "15e12", "num_gpus": "1024", "mfu": "0.5"}.items():
        page.fill(f"#{name}", value)
    page.select_option("#gpu", "h100-sxm")
    expect(page.get_by_test_id("days")).to_have_text("143.9")
    assert "num_gpus=1024" in page.url and "mfu=0.5" in page.url  # the result is a link
    # Beside the days: 3,537,140 GPU-hours x 700 W (board power) x PUE 1.1 = 2,724 MWh; x 385 g/kWh = 1,049 t.
    expect(page.get_by_test_id("energy")).to_have_text("2,724 MWh")
    expect(page.get_by_test_id("co2e")).to_have_text("1,049 t")
    wait_for_charts(page, "#result canvas", 1)
    page.screenshot(path=screenshots / "time.png", full_page=True)
    page.fill("#pue", "1.2")  # 2,723.6 MWh / 1.1 x 1.2 = 2,971 MWh
    expect(page.get_by_test_id("energy")).to_have_text("2,971 MWh")
    watched.clean()


def test_an_invalid_field_shows_its_message_beside_it(watched, base_url):
    page = watched.page
    page.goto(base_url + "/time", wait_until="networkidle")
    page.fill("#mfu", "2")
    expect(page.locator("#mfu-error")).to_contain_text("<= 1")
    expect(page.locator("#mfu")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#params-error")).to_have_text("")
    page.fill("#mfu", "0.5")
    expect(page.locator("#mfu-error")).to_have_text("")
    watched.clean()


def test_memory_page_stacks_each_zero_stage_against_the_gpu(watched, base_url, screenshots):
    """The course's question: the largest model 8 H100s train in fp32 with AdamW (16 bytes
    per parameter, no activations), with the states sharded over all 8 (ZeRO 3): 40e9 on the
    course's 80e9 bytes a GPU, 42.5e9 on the 85.06e9 an H100 reports."""
    page = watched.page
    page.goto(base_url + "/memory?gpu=h100-sxm&data_parallel=8&precision=fp32&optimizer=adam&zero_stage=3",
              wait_until="networkidle")
    expect(page.get_by_test_id("max-params")).to_have_text(f"{8 * H100_REPORTED_BYTES / 16 / 1e9:.1f} B")
    wait_for_charts(page, "#result canvas", 1)
    chart = page.evaluate("(() => { const c = Chart.getChart(document.querySelector('#result canvas'));"
                          " return {labels: c.data.labels, sets: c.data.datasets.length}; })()")
    # Nine kinds stacked (the states, weight copies, activations, transient, inputs, and the peak
    # moment's bytes beyond the start of backward) and the GPU's capacity line.
    assert chart["labels"] == ["ZeRO 0", "ZeRO 1", "ZeRO 2", "ZeRO 3"] and chart["sets"] == 10
    page.fill("#seq_len", "-1")
    expect(page.locator("#seq_len-error")).not_to_have_text("")
    page.fill("#seq_len", "4096")
    expect(page.locator("#seq_len-error")).to_have_text("")
    page.screenshot(path=screenshots / "memory.png", full_page=True)
    watched.clean()


def test_flops_page_sets_the_exact_count_beside_6nd(watched, base_url, screenshots):
    """Independent check: 6 x params x tokens from the page's own parameter count."""
    page = watched.page
    page.goto(base_url + "/flops?model=gpt2&batch_size=8&seq_len=1024", wait_until="networkidle")
    expect(page.get_by_test_id("six-n-d")).to_have_text("6.12 × 10¹²")  # 6 x 124,439,808 x 8,192
    before = page.get_by_test_id("step-flops").inner_text()
    page.select_option("#causal", "halved")
    expect(page.get_by_test_id("step-flops")).not_to_have_text(before)
    assert "causal=halved" in page.url
    page.wait_for_function(
        "Chart.getChart(document.querySelector('#result canvas'))?.data.labels.length === 6")
    page.screenshot(path=screenshots / "flops.png", full_page=True)
    watched.clean()


def test_formats_page_shows_the_course_examples_one_click_away(watched, base_url, screenshots):
    """1e-8 underflows to 0 in float16 (smallest subnormal 2**-24, torch.finfo's tiny is
    2**-14) and 0.15625 = 1.01b x 2**-3 is exact: the bit boxes spell it out."""
    page = watched.page
    page.goto(base_url + "/formats?value=0.15625&dtype=float32", wait_until="networkidle")
    bits = page.locator(".bits .bit").all_inner_texts()
    assert "".join(bits) == f"{struct.unpack('>I', struct.pack('>f', 0.15625))[0]:032b}"
    expect(page.get_by_test_id("range")).to_have_text("exact")
    page.get_by_test_id("example-1e-8").click()
    expect(page.get_by_test_id("stored")).to_have_text("0")
    expect(page.get_by_test_id("range")).to_have_text("underflow")
    assert page.locator(".bits .bit").count() == 16
    expect(page.locator("#value")).to_have_value("1e-8")  # the form follows the example
    expect(page.locator("#dtype")).to_have_value("float16")
    page.screenshot(path=screenshots / "formats.png", full_page=True)
    watched.clean()


def test_tensors_page_follows_torch_view_rules(watched, base_url, screenshots):
    """Oracle: torch itself, on the same strides."""
    x = torch.arange(6).view(2, 3).t()
    page = watched.page
    page.goto(base_url + "/tensors", wait_until="networkidle")
    expect(page.get_by_test_id("contiguous")).to_have_text("no" if not x.is_contiguous() else "yes")
    expect(page.get_by_test_id("storage-index")).to_have_text(str(x[2, 1].item()))
    expect(page.get_by_test_id("view")).to_contain_text("not possible")
    page.fill("#view_shape", "6")
    expect(page.get_by_test_id("view")).to_contain_text("not possible")
    page.fill("#index", "1, 2")
    page.fill("#shape", "2, 3")
    page.fill("#stride", "3, 1")
    expect(page.get_by_test_id("view")).to_contain_text("possible, with strides (1)")
    expect(page.get_by_test_id("storage-index")).to_have_text(str(torch.arange(6).view(2, 3)[1, 2].item()))
    page.fill("#shape", "2, x")
    expect(page.locator("#shape-error")).not_to_have_text("")
    page.fill("#shape", "2, 3")
    expect(page.locator("#shape-error")).to_have_text("")
    expect(page.get_by_test_id("view")).to_contain_text("possible")
    page.screenshot(path=screenshots / "tensors.png", full_page=True)
    watched.clean()


def test_a_cpu_probe_launched_from_the_page_runs_and_charts(watched, base_url, screenshots):
    page = watched.page
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    page.select_option("#sweep", "custom")
    page.fill("#shape", "64, 64, 64")
    page.click("button[type=submit]")
    status = page.get_by_test_id("job-status")
    expect(status).to_have_text("succeeded", timeout=60_000)
    wait_for_charts(page, "#job canvas", 2)  # TFLOP/s by size, and the roofline
    rows = page.locator("#job table tbody tr")
    expect(rows).to_have_count(2)  # float32 and bfloat16, the boxes ticked by default
    page.screenshot(path=screenshots / "benchmarks.png", full_page=True)
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    link = page.locator("table a", has_text="CSV").first
    assert link.get_attribute("href").endswith("format=csv")
    watched.clean()


def test_launch_refusals_show_the_api_message(watched, base_url):
    page = watched.page
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    page.select_option("#probe", "train_step")
    page.select_option("#model", "llama3.1-405b")
    page.click("button[type=submit]")
    expect(page.locator("#params-error")).to_contain_text("the job needs about")
    watched.clean()


def test_overview_shows_this_box_and_its_latest_calibration(watched, base_url, screenshots):
    device = httpx.get(base_url + "/api/v1/device").json()
    page = watched.page
    page.goto(base_url + "/", wait_until="networkidle")
    expect(page.get_by_test_id("device-name")).to_have_text(device["name"])
    for path in ("/fit", "/formats", "/tensors", "/flops", "/memory", "/time", "/inference", "/benchmarks"):
        expect(page.locator(f"a.card[href='{path}']")).to_be_visible()
    page.screenshot(path=screenshots / "overview.png", full_page=True)
    watched.clean()


@pytest.mark.parametrize("probe,params,charts", [
    ("transfer", {"sizes_bytes": [4096, 65536], "measure_s": 0.01, "min_iters": 2, "max_iters": 3}, 1),
    ("train_step", {"model": {"kind": "cruncher", "dim": 64, "num_layers": 2}, "batch_size": 2, "seq_len": 8,
                    "steps": 2, "warmup_steps": 1}, 1),
    ("bandwidth", {"size_bytes": 2**20, "measure_s": 0.01}, 0),
    ("generate", {"prompt_lens": [16], "batch_sizes": [1, 2], "contexts": [32], "decode_steps": 2,
                  "warmup_s": 0, "measure_s": 0.01, "min_iters": 2, "max_iters": 3}, 0),
])
def test_job_pages_chart_each_probe(watched, base_url, probe, params, charts, screenshots):
    job = httpx.post(base_url + "/api/v1/jobs", json={"probe": probe, "params": params}).json()
    page = watched.page
    page.goto(base_url + f"/benchmarks/jobs/{job['id']}", wait_until="networkidle")
    expect(page.get_by_test_id("job-status")).to_have_text("succeeded", timeout=60_000)
    wait_for_charts(page, "canvas", charts)
    page.screenshot(path=screenshots / f"job-{probe}.png", full_page=True)
    watched.clean()


def test_a_running_campaign_is_cancelled_from_the_burn_in_page(watched, own_base_url):
    """A campaign whose burn-in would run for a minute: the page's Cancel button stops it, and the
    page, reloaded, shows it ended and offers no button."""
    made = httpx.post(f"{own_base_url}/api/v1/campaigns", json={"probe": "burn_in", "params": {
        "sustain_s": 60, "warmup_s": 0.01, "measure_s": 0.02}}, timeout=30)
    assert made.status_code == 202, made.text
    campaign = made.json()["id"]
    page = watched.page
    page.goto(f"{own_base_url}/burn-in?campaign={campaign}", wait_until="networkidle")
    expect(page.get_by_test_id("campaign-summary")).to_contain_text("still running")
    with page.expect_navigation():  # the button's answer reloads the page (HX-Refresh)
        page.get_by_role("button", name="Cancel this campaign").click()
    wait_for(lambda: httpx.get(f"{own_base_url}/api/v1/campaigns/{campaign}", timeout=10).json()["done"],
             what="the campaign to end")
    page.reload(wait_until="networkidle")
    expect(page.get_by_test_id("campaign-summary")).not_to_contain_text("still running")
    expect(page.get_by_test_id("cancel-campaign")).to_have_count(0)
    statuses = {j["status"] for j in httpx.get(f"{own_base_url}/api/v1/campaigns/{campaign}", timeout=10).json()["jobs"]}
    assert statuses == {"cancelled"}
    watched.clean()


def test_a_burn_in_campaign_on_the_fleet_page_and_the_burn_in_page(watched, base_url, screenshots):
    """This server's embedded CPU dispatcher is the fleet's one device: a campaign runs on it and
    both pages show it."""
    made = httpx.post(f"{base_url}/api/v1/campaigns", json={"probe": "burn_in", "params": {
        "sustain_s": 0.2, "warmup_s": 0.01, "measure_s": 0.02}}, timeout=30)
    assert made.status_code == 202, made.text
    campaign = made.json()
    wait_for(lambda: httpx.get(f"{base_url}/api/v1/campaigns/{campaign['id']}", timeout=10).json()["done"],
             timeout=120, what="the campaign's end")
    page = watched.page
    page.goto(f"{base_url}/burn-in?campaign={campaign['id']}", wait_until="networkidle")
    expect(page.get_by_test_id("burn-in-table")).to_be_visible()
    expect(page.get_by_test_id("leaderboard")).to_contain_text("1")
    expect(page.get_by_test_id("device-history")).to_be_visible()
    # Issue 28, point 13: nothing runs off a 1280 px window (wide tables scroll in their own box).
    assert page.evaluate("window.innerWidth") == 1280
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    for table in page.locator("table").all():
        assert table.evaluate("t => t.getBoundingClientRect().right <= window.innerWidth")
    page.screenshot(path=screenshots / "burn-in.png", full_page=True)
    page.goto(f"{base_url}/fleet", wait_until="networkidle")
    expect(page.get_by_test_id("fleet-devices")).to_contain_text(":cpu")
    page.screenshot(path=screenshots / "fleet.png", full_page=True)
    watched.clean()


def test_two_runs_side_by_side(watched, base_url, screenshots):
    ids = [httpx.post(base_url + "/api/v1/jobs", json={"probe": "bandwidth", "params": {
        "size_bytes": 2**20, "measure_s": 0.01, "seed": seed}}).json()["id"] for seed in (1, 2)]
    page = watched.page
    page.goto(base_url + f"/benchmarks/jobs/{ids[1]}", wait_until="networkidle")
    expect(page.get_by_test_id("job-status")).to_have_text("succeeded", timeout=60_000)
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    page.check(f"input[name=a][value='{ids[0]}']")
    page.check(f"input[name=b][value='{ids[1]}']")
    page.click("text=Compare A and B")
    expect(page.locator(".runs li")).to_have_count(2)
    expect(page.locator(".runs li").nth(0)).to_contain_text(f"#{ids[0]}")
    expect(page.get_by_test_id("compare-table")).to_contain_text("GB/s")
    wait_for_charts(page, "canvas", 1)  # both runs on one chart
    page.screenshot(path=screenshots / "compare.png", full_page=True)
    watched.clean()


def test_pages_fit_a_phone_and_follow_dark_mode(browser, base_url, screenshots):
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    page = context.new_page()
    for path in ("/", "/memory", "/benchmarks"):
        page.goto(base_url + path, wait_until="networkidle")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, (path, overflow)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(13, 17, 23)"  # the dark palette's --bg
    page.goto(base_url + "/memory", wait_until="networkidle")
    page.screenshot(path=screenshots / "memory-phone-dark.png", full_page=True)
    context.close()


def test_matmul_and_mlp_pages_count_like_flop_counter_mode(watched, base_url, screenshots):
    from torch.utils.flop_counter import FlopCounterMode
    page = watched.page
    page.goto(base_url + "/matmul?m=1024&k=256&n=64", wait_until="networkidle")
    with FlopCounterMode(display=False) as counter:
        torch.randn(1024, 256) @ torch.randn(256, 64)
    expect(page.get_by_test_id("matmul-flops")).to_have_text(f"{counter.get_total_flops():,}")
    page.goto(base_url + "/mlp?batch=8&dims=16,32,4&input_requires_grad=false", wait_until="networkidle")
    w1, w2 = torch.randn(16, 32, requires_grad=True), torch.randn(32, 4, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        (torch.randn(8, 16) @ w1 @ w2).sum().backward()
    expect(page.get_by_test_id("mlp-total")).to_have_text(f"{counter.get_total_flops():,}")
    wait_for_charts(page, "#result canvas", 1)
    page.screenshot(path=screenshots / "mlp.png", full_page=True)
    watched.clean()


def test_a_page_for_a_job_that_does_not_exist_is_a_404(base_url):
    for path in ("/benchmarks/jobs/999999", "/ui/benchmarks/jobs/999999",
                 "/benchmarks/compare?a=999998&b=999999"):
        response = httpx.get(base_url + path)
        assert response.status_code == 404 and "no job 99999" in response.json()["message"], path


def test_an_inline_script_is_a_csp_violation_that_fails_the_check(watched, base_url):
    """The pages' policy runs no inline script, and the helper above catches the attempt."""
    page = watched.page
    page.goto(base_url + "/", wait_until="networkidle")
    page.evaluate("() => { const s = document.createElement('script'); s.textContent = 'window.ran = 1';"
                  " document.head.append(s); }")
    assert page.evaluate("window.ran") is None
    wait_for(watched.violations, what="the violation to be reported")
    with pytest.raises(AssertionError, match="script-src"):
        watched.clean()


ATTACK = """<!doctype html><title>another site</title>
<iframe name="a"></iframe><iframe name="b"></iframe><iframe name="c"></iframe>
<form action="{tally}/ui/benchmarks/launch" method="post" target="a">
  <input name="probe" value="bandwidth"></form>
<form action="{tally}/ui/benchmarks/launch" method="post" target="b" enctype="text/plain">
  <input name="anything" value="x"></form>
<form action="{tally}/api/v1/jobs/{job}/cancel" method="post" target="c"></form>
<script>for (const form of document.forms) form.submit();</script>
"""


@pytest.fixture(scope="module")
def other_site(tmp_path_factory):
    """A second web server on another loopback port, serving the pages in its folder."""
    root = tmp_path_factory.mktemp("other-site")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, server.server_address[1]
    server.shutdown()
    thread.join(10)


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])  # same site, another port; another site
def test_a_page_on_another_origin_cannot_launch_or_cancel_jobs(browser, base_url, other_site, name):
    jobs = base_url + "/api/v1/jobs"
    slow = {"probe": "bandwidth", "params": {"size_bytes": 2**20, "measure_s": 30}}
    job = httpx.post(jobs, json=slow).json()
    before = httpx.get(jobs).json()["count"]
    root, port = other_site
    (root / f"attack-{job['id']}.html").write_text(ATTACK.format(tally=base_url, job=job["id"]))
    context = browser.new_context()
    page = context.new_page()
    answers: dict[str, list[int]] = {}
    page.on("response", lambda r: answers.setdefault(r.url.removeprefix(base_url), []).append(r.status)
            if r.url.startswith(base_url) else None)
    try:
        page.goto(f"http://{name}:{port}/attack-{job['id']}.html")
        # Playwright delivers events only inside its own calls: wait in one, not in time.sleep.
        wait_for(lambda: page.wait_for_timeout(20) or sum(map(len, answers.values())) >= 3,
                 what="the three posts to be answered", context=lambda: answers)
        assert answers == {"/ui/benchmarks/launch": [403, 403], f"/api/v1/jobs/{job['id']}/cancel": [403]}
        assert httpx.get(jobs).json()["count"] == before
        assert httpx.get(f"{jobs}/{job['id']}").json()["status"] in ("queued", "running")
    finally:
        context.close()
        httpx.post(f"{jobs}/{job['id']}/cancel")  # no Origin, as curl: allowed


@pytest.mark.parametrize("path", ["/docs", "/burn-in"])
def test_dark_mode_and_a_1280_px_window(browser, base_url, path):
    """Issue 28, point 13: /docs stayed light in dark mode; the Burn-in page's tables were cut off
    at 1280 px. In the reader's dark scheme the page is dark, and nothing runs off the window."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    page = context.new_page()
    page.goto(base_url + path, wait_until="networkidle")
    if path == "/docs":
        page.locator(".opblock").first.wait_for()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    red, green, blue = (int(x) for x in background.removeprefix("rgb(").rstrip(")").split(",")[:3])
    assert red + green + blue < 150, background
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    context.close()
