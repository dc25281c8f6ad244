"""Device memory as the device reports it (issue 30): each catalogue part's fits use the total a
device reports, cited, beside the datasheet's marketing figure; a request's override or a live
device's own report replaces both; every fit says which it used."""

import json
import re
from pathlib import Path

from app.accounting import hardware

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "docs").is_dir())
GIB = 2**30


def test_h200_fits_use_what_tallys_probe_measured_on_one():
    """docs/measurements/burn-in-h200.json: torch's total on the H200 Tally was lent."""
    text = (ROOT / "docs/measurements/burn-in-h200.json").read_text()
    json.loads(text)  # a whole record, not a fragment
    measured = {int(m) for m in re.findall(r'"memory_bytes": (\d+)', text)}
    h200 = hardware.gpu("h200")
    assert measured == {h200.memory_bytes} and h200.memory_source == "device"
    assert h200.datasheet_memory_bytes == 141e9  # the datasheet's "141GB": 6.5 % short of the device


def test_every_reported_figure_is_its_cited_report_transcribed():
    """A report in MiB (nvidia-smi's total, torch's total_memory=...MB) is that many 2^20 bytes; one in
    bytes is those bytes; one in GiB to two places (vLLM's log) is within its rounding. Each cites
    where it was published."""
    reported = [a for a in hardware.catalogue().values() if a.memory_source == "device"]
    assert len(reported) >= 15
    for acc in reported:
        report = acc.memory_report or ""
        assert "github.com/" in report or "docs/measurements/" in report, acc.id
        mib = re.search(r"total_memory=(\d+)MB", report) or re.search(r"(\d[\d,]*) MiB", report)
        exact = re.search(r"\((\d{9,}) bytes\)", report)
        gib = re.search(r"\((\d+\.\d\d)GiB\)", report)
        if gib:
            assert abs(acc.memory_bytes - float(gib.group(1)) * GIB) <= 0.005 * GIB, acc.id
        elif exact:
            assert acc.memory_bytes == int(exact.group(1)), acc.id
        elif "docs/measurements/" not in report:
            assert mib, acc.id
            assert acc.memory_bytes == int(mib.group(1).replace(",", "")) * 2**20, acc.id
        # a device holds more than its decimal datasheet figure, and less than 8 % more
        assert 1.0 < acc.memory_bytes / acc.datasheet_memory_bytes < 1.08, acc.id


def test_vllm_budgets_an_h100_as_its_log_says():
    """vLLM's start-up log on an H100 80GB (vllm-project/vllm#12126): "the current vLLM instance can
    use total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90) = 71.29GiB"."""
    h100 = hardware.gpu("h100-sxm")
    assert round(0.9 * h100.memory_bytes / GIB, 2) == 71.29
    assert "79.2 GiB" in hardware.memory_note(h100) and "not the datasheet's 80 GB" in hardware.memory_note(h100)


def test_an_override_or_a_live_device_replaces_both_figures():
    given = hardware.gpu("h100-sxm", hardware.GpuOverrides(memory_bytes=81_000_000_000))
    assert given.memory_bytes == 81e9 and given.datasheet_memory_bytes == 80e9
    assert given.memory_source == "gpu_overrides.memory_bytes"
    live = hardware.measured(hardware.gpu("h100-sxm"), 85_028_896_768)
    assert live.memory_bytes == 85_028_896_768 and "mem_get_info" in hardware.memory_note(live)
    unreported = [a for a in hardware.catalogue().values() if a.memory_source == "datasheet"]
    for acc in unreported:  # said so, and how to give the real figure
        assert acc.memory_bytes == acc.datasheet_memory_bytes
        assert "gpu_overrides.memory_bytes" in hardware.memory_note(acc)


def test_every_fit_says_which_memory_it_used(api):
    note = hardware.memory_note(hardware.gpu("h100-sxm"))
    fit = api.ok("/api/v1/fit", {"model": "llama3-8b", "gpu": "h100-sxm"})
    assert fit["gpu_memory_bytes"] == hardware.gpu("h100-sxm").memory_bytes and note in fit["assumptions"]
    training = api.ok("/api/v1/memory/training", {"model": "llama3-8b", "gpu": "h100-sxm"})
    assert training["gpu_memory_bytes"] == 85_057_317_582 and note in training["assumptions"]
    tune = api.ok("/api/v1/finetune", {"model": "llama3-8b", "gpu": "h100-sxm"})["memory"]
    assert note in tune["assumptions"]
    served = api.ok("/api/v1/inference/memory", {"model": "llama3-8b", "gpu": "h100-sxm"})
    assert served["gpu_memory_note"] == note and served["gpu_memory_bytes"] == 85_057_317_582
    plan = api.ok("/api/v1/plan/training", {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                                            "global_batch_sequences": 64})
    assert note in plan["assumptions"]
