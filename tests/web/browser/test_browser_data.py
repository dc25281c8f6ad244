"""The Data page and its checkpoint calculator in a real browser: the course's LLaMA figure
(1.4T tokens x 2 bytes = 2.8 TB) on opening, the loader's bandwidth and how long it reads, a
dtype too small for the vocabulary refused beside its input; a checkpoint's write time and
its share of the run worked by hand; "measured" with no checkpoint probe run refused beside
its field; a phone's width; no console error and nothing fetched off the box."""

import httpx
from playwright.sync_api import expect

from tests.support.browser import watched_at

LLAMA3_8B_PARAMS = 8_030_261_248  # Meta-Llama-3-8B's parameter count, as Hugging Face reports it


def test_data_page_opens_on_the_courses_llama_figure(watched, base_url, screenshots):
    page = watched.page
    page.goto(base_url + "/data", wait_until="networkidle")
    expect(page.get_by_test_id("dataset-bytes")).to_have_text("2,800.0 GB")  # 1.4e12 tokens x 2 bytes
    expect(page.get_by_test_id("dtype")).to_have_text("uint16")
    # 1e6 training tokens/s at seq_len 1024 read 1025/1024 x 2 bytes each: 2.00 MB/s, and
    # 1.4e12 tokens at 1e6 a second take 1.4e6 s = 16.2 days.
    expect(page.get_by_test_id("read-rate")).to_have_text("2.00 MB/s")
    expect(page.get_by_test_id("epoch")).to_have_text("16.2 days")
    # Cold reads in 4,096-byte pages: 1 + 1024 x 2 / 4096 = 1.5 pages a sequence, 1e6 / 1024 sequences/s.
    expect(page.get_by_test_id("page-rate")).to_have_text("6.00 MB/s")
    expect(page.get_by_test_id("shards")).to_have_text("2,800")  # 2.8e12 bytes in 1 GB files
    # The API answers the same body with the same bytes.
    api = httpx.post(base_url + "/api/v1/data/dataset", json={"tokens": 1.4e12, "vocab_size": 32000}).json()
    assert api["bytes"] == 2_800_000_000_000
    # A dtype too small for the vocabulary: refused beside the dtype, as the API refuses it.
    page.fill("#vocab_size", "70000")
    page.select_option("#dtype", "uint16")
    expect(page.locator("#dtype-error")).to_contain_text("65,535")
    page.select_option("#dtype", "auto")
    expect(page.get_by_test_id("dtype")).to_have_text("uint32")
    expect(page.get_by_test_id("dataset-bytes")).to_have_text("5,600.0 GB")  # 4 bytes a token
    assert "vocab_size=70000" in page.url  # the result is a link
    page.fill("#vocab_size", "32000")
    expect(page.get_by_test_id("dataset-bytes")).to_have_text("2,800.0 GB")
    page.screenshot(path=screenshots / "data.png", full_page=True)
    watched.clean()


def test_checkpoint_page_times_a_save_and_its_share(watched, own_base_url, screenshots):
    base_url = own_base_url  # a server of its own: nothing has measured its disk
    page = watched.page
    page.goto(base_url + "/data/checkpoint", wait_until="networkidle")
    write_s = LLAMA3_8B_PARAMS * 14 / 2e9  # bf16 weights 2 + fp32 master 4 + Adam's two fp32 moments 8
    expect(page.get_by_test_id("checkpoint-bytes")).to_have_text(f"{LLAMA3_8B_PARAMS * 14 / 1e9:,.1f} GB")
    expect(page.get_by_test_id("write-seconds")).to_have_text(f"{write_s:.1f} s")
    # A blocking save after 1,000 steps of 1.5 s: write_s / (1500 s + write_s).
    expect(page.get_by_test_id("share")).to_have_text(f"{100 * write_s / (1500 + write_s):.1f}%")
    page.fill("#every_n_steps", "100")
    expect(page.get_by_test_id("share")).to_have_text(f"{100 * write_s / (150 + write_s):.1f}%")
    page.fill("#every_n_steps", "0")
    expect(page.locator("#every_n_steps-error")).not_to_have_text("")
    page.fill("#every_n_steps", "1000")
    page.fill("#write_bytes_per_s", "measured")  # no checkpoint probe has run on this server
    expect(page.locator("#write_bytes_per_s-error")).to_contain_text("checkpoint probe")
    page.fill("#write_bytes_per_s", "2GB")
    expect(page.locator("#write_bytes_per_s-error")).to_have_text("")
    expect(page.get_by_test_id("share")).to_have_text(f"{100 * write_s / (1500 + write_s):.1f}%")
    page.get_by_test_id("data-link").click()
    expect(page.get_by_test_id("dataset-bytes")).to_be_visible()
    page.goto(base_url + "/data/checkpoint", wait_until="networkidle")
    page.screenshot(path=screenshots / "data-checkpoint.png", full_page=True)
    watched.clean()


def test_data_pages_fit_a_phone(browser, base_url):
    for path in ("/data", "/data/checkpoint"):
        phone = watched_at(browser, 390, 844)
        phone.page.goto(base_url + path, wait_until="networkidle")
        assert phone.page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0, path
        phone.clean()
        phone.page.context.close()
