"""Numbers as a person reads them (app/numbers.py), and the charts' copy of the rules in
static/app.js, run in the browser, agreeing with it value for value."""

import pytest

from app import numbers

SAMPLES = [7e12, 6.3e24, 1024, 0.15625, 0.00816, 999_600, -0.0, 1e-8, 123_456, 0.103, 9.996, -2.5e-7]


@pytest.mark.parametrize(("value", "text"), [
    (7e12, "7.00 × 10¹²"), (6.3e24, "6.30 × 10²⁴"), (0.15625, "0.156"), (1024, "1,024"),
    (-0.0, "0"), (1e-8, "1.00 × 10⁻⁸"), (999_600, "1.00 × 10⁶"), (0.103, "0.103")])
def test_three_significant_figures(value, text):
    assert numbers.sig(value) == text


def test_counts_read_in_short_scale():
    assert numbers.amount(5e9) == "5.0 B"  # not "5e+09"
    assert numbers.amount(70e9) == "70.0 B"
    assert numbers.amount(405e9) == "405 B"
    assert numbers.amount(15e12) == "15.0 T"
    assert numbers.amount(512) == "512"


def test_no_negative_zero_and_one_byte_unit():
    assert numbers.percent(-0.00001) == "0.0%"
    assert numbers.percent(-0.00001, signed=True) == "0.0%"
    assert numbers.percent(0.05, signed=True) == "+5.0%"
    assert numbers.gb(156_900_000_000) == "156.9 GB"
    assert numbers.tflops(1.03e11) == "0.103 TFLOP/s"
    assert numbers.money(2_150_000.4, "EUR") == "EUR 2,150,000"


def test_durations_read_in_the_unit_that_fits():
    assert numbers.duration(0.016832) == "16.8 ms"  # a decode step
    assert numbers.duration(1.196) == "1.20 s"  # a training step
    assert numbers.duration(8e-6) == "8.00 µs"  # an all-reduce's latency
    assert numbers.duration(0.999) == "999 ms" and numbers.duration(None) == "n/a"


def test_the_charts_format_as_the_pages_do(browser, base_url):
    page = browser.new_page()
    page.goto(base_url + "/time")
    got = page.evaluate("(xs) => xs.map((x) => window.Tally.sig(x))", SAMPLES)
    assert got == [numbers.sig(x) for x in SAMPLES]
    counts = [5e9, 70e9, 405e9, 15e12, 512, 8000]
    assert page.evaluate("(xs) => xs.map((x) => window.Tally.amount(x))", counts) == \
        [numbers.amount(x) for x in counts]
    page.close()
