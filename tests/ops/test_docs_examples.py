"""The docs stay true: every curl and `tally calc` example of the README and of the docs site
works, every figure their prose quotes is the API's, every setting is listed with its default."""

import json
import re
import shlex

import pytest
import yaml

from app.config import Settings
from app.jobs.dispatcher import Dispatcher
from app.main import create_app
from tests.support import ROOT
from tests.support.api import Api


def _nav_pages(nav: list) -> list[str]:
    """The site's pages in mkdocs.yml's nav order, depth first."""
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


NAV = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
PAGES = [ROOT / "README.md"] + [ROOT / "docs" / name for name in _nav_pages(NAV)]
DOCS = "\n".join(path.read_text() for path in PAGES)
"""The README, then every page of the site in the order a reader meets them."""


def page(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def curl_examples() -> list[str]:
    return [line for line in DOCS.splitlines() if line.startswith("curl ")]


def test_every_endpoint_has_an_example():
    examples = [re.search(r"localhost:8000([^\s'?]+)", line).group(1) for line in curl_examples()]
    for template in create_app().openapi()["paths"]:
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        assert any(re.match(pattern, path) for path in examples), f"no docs example for {template}"


def test_every_curl_example_works_in_order(tmp_path):
    """Replayed top to bottom on a fresh database, as a reader would type them. Jobs run
    (on the CPU, with real children) only where an example reads a result."""
    api = Api(create_app(Settings(database_path=tmp_path / "docs.db")))
    dispatcher = Dispatcher(api.app.state.store, "docs")
    api.app.state.store.seen(worker_id="docs")  # as a running dispatcher does, for /readyz
    # The fleet's examples name the H200 of docs/measurements/, registered as a worker there would.
    api.app.state.store.register({
        "device": "GPU-47136eb1-1fb2-68e1-d23b-963ae407b727", "host": "gpu-box", "kind": "cuda",
        "gpu_index": 0, "name": "NVIDIA H200", "catalogue_id": "h200", "memory_bytes": 150754820096})
    try:
        for line in curl_examples():
            args = shlex.split(line)
            url = next(a for a in args if a.startswith(("localhost:8000", "'localhost:8000")))
            path = url.removeprefix("localhost:8000")
            if "/events" in path or "/result" in path:
                while dispatcher.run_once():
                    pass
            if "-d" in args:  # a body inline, or @FILE (a path from the checkout's root), as curl reads it
                data = args[args.index("-d") + 1]
                response = api.post(path, json.loads((ROOT / data[1:]).read_text() if data.startswith("@")
                                                     else data))
            elif "-X" in args:
                response = api.request(args[args.index("-X") + 1], path)
            else:
                response = api.get(path)
            expected = 202 if path in ("/api/v1/jobs", "/api/v1/campaigns", "/api/v1/calibration/campaigns") \
                and "-d" in args else 200
            if (path.startswith(("/api/v1/calibration/profiles", "/api/v1/calibration/import"))
                    or path in ("/api/v1/import/job", "/api/v1/import/campaign")) \
                    and ("-d" in args or "-X" in args):
                expected = 201
            assert response.status_code == expected, (line, response.text)
            if response.headers["content-type"].startswith("application/json"):
                response.json()
    finally:
        api.close()


def test_every_setting_is_documented_with_its_default():
    for name, field in Settings.model_fields.items():
        row = re.search(rf"\| `TALLY_{name.upper()}` \| `([^`]*)` \|", page("settings.md"))
        assert row, f"TALLY_{name.upper()} missing from docs/settings.md"
        assert row.group(1) == str(field.default), name


def test_docs_state_the_course_figures(api):
    """The figures the README and the API pages quote are the ones the API gives."""
    days = api.ok("/api/v1/time/training", {"params": 70e9, "tokens": 15e12, "gpu": "h100-sxm",
                                            "dtype": "bf16", "num_gpus": 1024, "mfu": 0.5})["days"]
    assert f"{days:.1f} days" in (ROOT / "README.md").read_text()
    assert f"{days:.1f} days" in page("api/time.md")
    assert "2,415,919,104 B = 2304 MiB" in page("api/formats.md")


def test_docs_calc_examples_run(capsys):
    """Every `tally calc` line of the README and the docs runs and prints the API's JSON."""
    from app.cli import main

    lines = [line for line in DOCS.splitlines() if line.startswith("tally calc ")]
    assert len(lines) >= 5
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0, line
        assert isinstance(json.loads(capsys.readouterr().out), (dict, list)), line


def test_docs_state_the_fit_figures(api):
    """The fit question's figures in docs/api/finetune.md are the API's."""
    text = page("api/finetune.md")
    def gb(value: int) -> str:
        return f"{value / 1e9:.1f} GB"

    def options(gpu: str, **more) -> dict:
        body = {"model": "llama3-8b", "seq_len": 2048, "gpu": gpu} | more
        return {o["option"]: o for o in api.ok("/api/v1/fit", body)["options"]}

    card, h100 = options("rtx-4090"), options("h100-sxm", batch_size=4)
    served = card["inference-bfloat16"]
    assert f"({gb(served['total_bytes'])} in bf16 with the KV cache of {served['largest_batch']}" in text
    assert f"QLoRA fits ({gb(card['qlora']['total_bytes'])};" in text
    assert f"LoRA in bf16 needs {gb(card['lora']['total_bytes'])}" in text
    assert f"full fine-tuning needs {gb(card['full']['total_bytes'])}, and fits on 8 such GPUs" in text
    assert "fits on 8 GPUs with ZeRO stage 3" in card["full"]["advice"]
    assert f"LoRA ({gb(h100['lora']['total_bytes'])}) and QLoRA fit" in text and h100["lora"]["fits"]
    assert "fits on 2 GPUs" in h100["full"]["advice"]
    qlora = api.ok("/api/v1/finetune", {"model": "llama3-8b", "mode": "qlora", "lora_rank": 16,
                                        "seq_len": 2048, "recompute": "full", "gpu": "rtx-4090"})
    mem = qlora["memory"]
    assert (f"{gb(mem['total'])} with gradient checkpointing: {gb(mem['frozen_weights'])} of NF4 base, "
            f"{gb(mem['activations'])} of\nactivations, {gb(mem['transient'])}") in text
    assert f"and {qlora['trainable_params']:,} trainable parameters" in text


def test_docs_state_the_all_reduce_figures(api):
    text = page("api/scale.md")
    t = api.ok("/api/v1/comm/collective", {"collective": "all_reduce", "bytes": "16GB", "ranks": 64,
                                           "gpu": "h100-sxm"})
    intra, inter = (level["seconds"] * 1e3 for level in t["levels"])
    assert f"takes\n{t['seconds'] * 1e3:.1f} ms: {intra:.1f} ms of reduce-scatter" in text
    assert f"and {inter:.1f} ms\nof all-reduce" in text
    assert f"busbw {t['busbw_bytes_per_sec'] / 1e9:.1f} GB/s" in text


def test_docs_state_the_plan_figures(api):
    body = {"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 1024, "global_batch_sequences": 512,
            "seq_len": 8192, "training_tokens": 15e12}
    plan = api.ok("/api/v1/plan/training", body)
    best = plan["best"][0]
    lo, bd = best["layout"], best["breakdown"]
    text = " ".join(page("api/scale.md").split())
    assert f"the search times and sizes {plan['evaluated']} layouts, {plan['fitting']} of which fit, and " \
           f"refuses {sum(plan['refused'].values())} candidates" in text
    degrees = (lo["data_parallel"], lo["tensor_parallel"], lo["pipeline_parallel"], lo["zero_stage"])
    assert degrees == (256, 4, 1, 3)
    assert (lo["micro_batches"], lo["micro_batch"], lo["recompute"]) == (2, 1, "selective")
    assert f"{best['step_seconds']:.2f} s a step, {best['tokens_per_sec']:,.0f} tokens/s, MFU " \
           f"{best['mfu'] * 100:.1f}% (HFU {best['hfu'] * 100:.1f}%)" in text
    gb = best["memory_bytes"] / 1e9
    assert f"{gb:.1f} GB per GPU; its {bd['data_parallel_total']:.2f} s of ZeRO-3" in text
    assert bd["data_parallel"] == 0 and f"{bd['tensor_parallel']:.2f} s of tensor-parallel" in text
    run = plan["energy"]["run"]
    steps = -(-15e12 // plan["tokens_per_step"])  # whole steps of 512 x 8192 tokens
    assert plan["energy"]["steps"] == steps and f"runs {steps:,.0f} steps" in text
    hours = steps * best["step_seconds"] * 1024 / 3600
    assert run["gpu_hours"] == pytest.approx(hours)
    mwh = hours * 0.700 * 1.1 / 1000  # 700 W a GPU, PUE 1.1
    assert run["energy_mwh"] == pytest.approx(mwh) and f"{hours:,.0f} GPU-hours, {mwh:,.0f} MWh" in text
    assert run["co2e_tonnes"] == pytest.approx(mwh * 0.385) and f"{mwh * 0.385:,.0f} tCO2e" in text


def test_docs_state_the_data_and_checkpoint_figures(api):
    """docs/api/data.md's dataset and checkpoint figures: by hand, and the API's."""
    text = " ".join(page("api/data.md").split())
    llama = api.ok("/api/v1/data/dataset", {"tokens": "1.4T", "vocab_size": 32000})
    assert llama["bytes"] == 1.4e12 * 2 and "2.8e12 bytes (2,800 GB)" in text
    fed = api.ok("/api/v1/data/dataset", {
        "tokens": "15T", "model": "llama3-8b", "shard_bytes": "1GB", "tokens_per_s": 4e6, "seq_len": 8192,
        "storage_read_bytes_per_s": "2GB"})
    assert fed["bytes"] == 15e12 * 4 and "15T tokens are 60,000 GB" in text
    rate = 4e6 * 8193 / 8192 * 4  # tokens/s x ids read per training token x 4 bytes (uint32)
    assert fed["loader"]["read_bytes_per_s"] == rate
    assert f"({rate / 1e6:.1f} MB/s for the second example)" in text
    cold = api.ok("/api/v1/data/dataset", {"tokens": 1e9, "vocab_size": 32000, "tokens_per_s": 1e6,
                                           "seq_len": 1024})["loader"]
    asked = 1025 * 2  # bytes a sequence asks for; its pages: (1 + 1024 x 2 / 4096) x 4096 bytes
    assert round(cold["page_read_bytes_per_s"] / cold["read_bytes_per_s"]) == round(1.5 * 4096 / asked) == 3
    assert "costs `page_read_bytes_per_s`, 3× the bytes asked for at seq_len 1024 in uint16" in text
    body = {"model": "llama3-8b", "write_bytes_per_s": "2GB", "read_bytes_per_s": "2GB",
            "every_n_steps": 1000,
            "step_seconds": 1.5}
    saved = api.ok("/api/v1/checkpoint", body)
    write_s = 8_030_261_248 * 14 / 2e9  # Llama-3-8B's parameters x 14 bytes at 2e9 bytes/s
    assert saved["write_seconds"] == write_s
    assert f"{saved['checkpoint_bytes'] / 1e9:.1f} GB for Llama-3-8B" in text
    share = write_s / (1000 * 1.5 + write_s)
    assert saved["schedule"]["share_of_run"] == share
    assert f"{write_s:.1f} s every 1,000 steps of 1.5 s is {100 * share:.2f}% of the run" in text
