"""One record per probe (app/probes/registry.py), read by everything that names probes:
the child, the jobs API, admission, the launch form and `tally probe`."""

import dataclasses
import importlib
import re
import time
import typing

import pytest
import torch

from app.accounting.errors import InvalidInput
from app.bench.timer import flush_bytes as timer_flush_bytes
from app.device import host
from app.jobs import admission
from app.probes import params as probe_params
from app.probes.bandwidth import BandwidthParams
from app.probes.registry import PROBES
from tests.support.cli import run_main

NAMES = list(PROBES)
GPU_ONLY = {"dcgm_diag": ("cpu",)}
"""Probes that refuse a device kind (DCGM diagnoses GPUs): their `need` raises, naming params.device."""


def test_the_openapi_document_lists_the_registrys_probes(api):
    spec = api.get("/openapi.json").json()
    body = spec["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert list(body["discriminator"]["mapping"]) == NAMES
    result = spec["components"]["schemas"]["JobOut"]["properties"]["result"]["anyOf"][0]
    assert sorted(result["discriminator"]["mapping"]) == sorted(NAMES)
    listed = spec["paths"]["/api/v1/jobs"]["get"]["parameters"]
    probe = next(p for p in listed if p["name"] == "probe")["schema"]["anyOf"][0]["enum"]
    assert probe == NAMES


def test_the_launch_form_lists_the_registrys_probes(api):
    page = api.get("/benchmarks").text
    select = re.search(r'<select id="probe".*?</select>', page, re.S).group(0)
    assert re.findall(r'<option value="([^"]+)"', select) == NAMES


def test_tally_probe_help_lists_the_registrys_probes(capsys):
    status, out, _ = run_main(capsys, "probe", "--help")
    assert status == 0
    listed = out.split("positional arguments:")[1].split("options:")[0]
    assert re.findall(r"^    (\w+)", listed, re.M) == NAMES
    for probe in PROBES.values():
        assert " ".join(probe.summary.split()[:4]) in " ".join(out.split())


@pytest.mark.parametrize("name", NAMES)
def test_each_record_is_whole(name):
    probe = PROBES[name]
    module, _, function = probe.entry.partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    hints = typing.get_type_hints(probe.result)
    assert dataclasses.is_dataclass(probe.result) and typing.get_args(hints["probe"]) == (name,)
    defaults = probe.params()  # every parameter has a default
    for kind in ("cpu", "cuda"):
        if kind in GPU_ONLY.get(name, ()):  # refused at submission, naming the field that chose it
            with pytest.raises(InvalidInput) as refused:
                probe.need(defaults, kind)
            assert refused.value.field == "params.device"
            continue
        need, field = probe.need(defaults, kind)
        assert need > 0 and field.startswith("params.")
        least, field = probe.least_seconds(defaults, kind)
        assert least >= 0 and field.startswith("params.")


@pytest.mark.parametrize("name,raw", [
    ("matmul", {"device": "cpu", "sweep": "custom", "shapes": [{"m": 8, "k": 8, "n": 8}] * 3,
                "dtypes": ["float32", "tfloat32", "bfloat16"]}),
    ("bandwidth", {"device": "cpu", "size_bytes": probe_params.MIB}),
    ("transfer", {"device": "cpu", "sizes_bytes": [4096, 16384]}),
    ("data_loader", {"device": "cpu", "file_bytes": probe_params.MIB, "train_tokens_per_s": 1e3}),
])
def test_least_seconds_is_a_floor_of_the_real_run(name, raw):
    """The estimate admission refuses by is never more than the probe really takes."""
    probe = PROBES[name]
    raw |= {"warmup_s": 0.05, "measure_s": 0.001, "min_iters": 1, "max_iters": 2}
    least, _ = probe.least_seconds(probe.params.model_validate(raw), "cpu")
    assert least >= 0.05  # one warm-up at least
    module, _, function = probe.entry.partition(":")
    start = time.perf_counter()
    getattr(importlib.import_module(module), function)(raw, lambda *_: None)
    assert time.perf_counter() - start >= least


def test_admission_counts_the_timers_flush_buffer():
    """The size the timer allocates and the size admission adds are one function's answer."""
    assert timer_flush_bytes(torch.device("cpu")) == probe_params.flush_bytes("cpu", None)
    assert probe_params.flush_bytes("cuda", 50 * 10**6) == 256 * 2**20  # an H100's 50 MB L2
    assert probe_params.flush_bytes("cuda", 200 * 2**20) == 400 * 2**20  # max(256 MiB, 2 x L2)
    params = BandwidthParams(device="cpu", size_bytes=probe_params.MIB)
    memory = host().memory_bytes
    just_over = (memory - probe_params.flush_bytes("cpu", None)) // 2 + probe_params.MIB
    admission.check_fits("bandwidth", params, host())  # 2 MiB and the flush buffer fit
    with pytest.raises(Exception, match="needs about"):
        admission.check_fits("bandwidth", params.model_copy(update={"size_bytes": just_over}), host())
