"""The Benchmarks pages in a real browser: the launch form shows the
one-shape field only for the one-shape sweep (and does not send it otherwise), the history's
A/B pickers are labelled and its button styled, the matmul table's shape column stays on one
line on a 390 px phone, and the compare page draws both runs on one chart."""

from playwright.sync_api import expect

from tests.support.browser import AXES, cancel_launched, readable, run, wait_for_charts

TINY = {"sweep": "custom", "shapes": [{"m": 512, "k": 512, "n": 512}, {"m": 64, "k": 64, "n": 64}],
        "dtypes": ["float32", "bfloat16"], "warmup_s": 0.0, "measure_s": 0.001, "min_iters": 2,
        "max_iters": 3}


def test_the_one_shape_field_is_there_only_for_the_one_shape_sweep(watched, base_url):
    page = watched.page
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    shape = page.locator("#shape")
    expect(page.locator("#sweep")).to_have_value("squares")
    expect(shape).to_be_hidden()
    expect(shape).to_be_disabled()
    page.select_option("#sweep", "custom")
    expect(shape).to_be_visible()
    expect(shape).to_be_enabled()
    page.select_option("#sweep", "quick")
    expect(shape).to_be_hidden()
    # A hidden field is not sent: the launch carries the sweep but no shape.
    with page.expect_request(lambda r: r.url.endswith("/ui/benchmarks/launch")) as launched:
        page.click("#launch-form button[type=submit]")
    body = launched.value.post_data
    assert "sweep=quick" in body and "shape=" not in body
    cancel_launched(page, base_url)
    watched.clean()


def test_history_pickers_are_labelled_and_the_compare_button_is_a_button(watched, base_url, tmp_path):
    ids = [run(base_url, "bandwidth", {"size_bytes": 2**20, "measure_s": 0.01, "seed": s}) for s in (1, 2)]
    page = watched.page
    page.goto(base_url + "/benchmarks", wait_until="networkidle")
    for job_id in ids:
        cell = page.locator("#history tr", has=page.locator(f"a[href='/benchmarks/jobs/{job_id}']")).locator(
            "td.pick")
        expect(cell).to_have_text("A B")  # visible letters beside the radios
        expect(page.get_by_role("radio", name=f"A: job {job_id}")).to_be_visible()
        expect(page.get_by_role("radio", name=f"B: job {job_id}")).to_be_visible()
    style = "(e) => { const s = getComputedStyle(e); return [s.backgroundColor, s.color, s.borderRadius]; }"
    compare = page.get_by_role("button", name="Compare A and B")
    launch = page.locator("#launch-form button[type=submit]")
    assert compare.evaluate(style) == launch.evaluate(style)
    assert compare.evaluate(style)[0] != "rgba(0, 0, 0, 0)"  # filled, not the browser's default
    page.get_by_role("radio", name=f"A: job {ids[0]}").check()
    page.get_by_role("radio", name=f"B: job {ids[1]}").check()
    compare.click()
    expect(page.get_by_test_id("compare-table")).to_contain_text("copy, median")
    wait_for_charts(page, "canvas", 1)
    labels = page.evaluate("Chart.getChart(document.querySelector('canvas')).data.datasets.map(d => d.label)")
    assert sorted(labels) == ["A copy", "B copy"]
    page.screenshot(path=tmp_path / "compare-bandwidth.png", full_page=True)
    watched.clean()


def test_matmul_runs_overlay_on_one_chart(watched, base_url, tmp_path):
    a, b = run(base_url, "matmul", TINY), run(base_url, "matmul", TINY)
    page = watched.page
    page.goto(base_url + f"/benchmarks/compare?a={a}&b={b}", wait_until="networkidle")
    wait_for_charts(page, "canvas", 1)
    sets = page.evaluate("Chart.getChart(document.querySelector('canvas')).data.datasets"
                         ".map(d => [d.label, d.data.length, d.borderDash.length > 0])")
    assert sorted(sets) == [["A bfloat16", 2, False], ["A float32", 2, False],
                            ["B bfloat16", 2, True], ["B float32", 2, True]]
    expect(page.get_by_test_id("compare-differences")).to_have_count(0)  # same shapes, same dtypes
    page.screenshot(path=tmp_path / "compare-matmul.png", full_page=True)
    watched.clean()


def test_the_shape_column_stays_on_one_line_on_a_phone(browser, base_url, tmp_path):
    job = run(base_url, "matmul", TINY)
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(base_url + f"/benchmarks/jobs/{job}", wait_until="networkidle")
    cell = page.locator("td.shape").first
    expect(cell).to_contain_text("512 × 512 × 512")
    height, line = cell.evaluate("(e) => { const s = getComputedStyle(e); "
                                 "return [e.getBoundingClientRect().height - parseFloat(s.paddingTop) "
                                 "- parseFloat(s.paddingBottom), parseFloat(s.lineHeight)]; }")
    assert height < 1.5 * line, (height, line)  # one line, not five
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, overflow  # the table scrolls inside itself; the page does not
    page.screenshot(path=tmp_path / "job-phone.png", full_page=True)
    context.close()


def test_calculator_chart_ticks_are_readable(watched, base_url):
    """The FLOPs chart once wrote its axis as 5.0e+11, 1.0e+12."""
    page = watched.page
    for path in ("/flops", "/mlp"):
        page.goto(base_url + path, wait_until="networkidle")
        wait_for_charts(page, "canvas", 1)
        readable(page.evaluate(AXES))
    watched.clean()


def test_benchmark_chart_ticks_are_readable(watched, base_url):
    """Axis labels written as the pages write numbers (no 0.0040000, no 1.0000), at most
    three significant figures, and no two labels on an axis overlapping (a log axis once
    printed 80, 90 and 100 on top of one another)."""
    job = run(base_url, "matmul", TINY)
    page = watched.page
    page.goto(base_url + f"/benchmarks/jobs/{job}", wait_until="networkidle")
    wait_for_charts(page, "canvas", 2)
    axes = page.evaluate(AXES)
    assert len(axes) >= 4
    readable(axes)
    watched.clean()


def test_the_collectives_job_draws_busbw_beside_the_fitted_line(watched, base_url, tmp_path):
    """Two gloo ranks through the real dispatcher and child: the page draws each collective's
    measured busbw as points and the model fitted to them as a dashed line, with readable log axes."""
    sizes = [1024, 16384, 262144, 1048576]
    job = run(base_url, "collectives", {"device": "cpu", "sizes_bytes": sizes, "iterations": 3,
                                        "warmup_iterations": 1})
    page = watched.page
    page.goto(base_url + f"/benchmarks/jobs/{job}", wait_until="networkidle")
    wait_for_charts(page, "canvas", 1)
    sets = page.evaluate("() => Chart.getChart(document.querySelector('canvas')).data.datasets.map("
                         "d => [d.label, d.data.length, (d.borderDash || []).length > 0])")
    ops = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
    # Per collective, in the run's order: its points, then its fitted line; no catalogue line on a CPU.
    assert sets == [s for op in ops for s in ([op, len(sizes), False], [op + " fitted", len(sizes), True])]
    expect(page.get_by_test_id("busbw-caption")).to_contain_text("No catalogue link")
    expect(page.get_by_test_id("collective-points").locator("tbody tr")).to_have_count(5 * len(sizes))
    readable(page.evaluate(AXES))
    page.screenshot(path=tmp_path / "collectives.png", full_page=True)
    watched.clean()
