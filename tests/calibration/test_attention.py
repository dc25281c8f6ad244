"""The attention probe (SDPA forward and backward) and what a profile takes from it: its FLOPs
against torch's FlopCounterMode, its runs through the worker on this CPU, and a profile whose
attention runs time the attention core of a calibrated step (app/accounting/calibration/attention.py)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count

from app.accounting.calibration import attention as core
from app.accounting.calibration import step, surface
from app.accounting.calibration.profile import MatmulSample
from app.bench import attention as bench
from app.inputs.schemas import TransformerConfigIn
from app.probes import campaign
from app.probes.attention import BACKWARD_FACTOR, AttentionPoint
from tests.calibration import running
from tests.calibration.test_profiles import PER_ACT, PER_OP, PER_OPT, line, store_matmul, store_steps
from tests.support.bench_jobs import finished, here, stats
from tests.support.results import result_for

QUICK = {"warmup_s": 0.01, "measure_s": 0.02, "min_iters": 3, "max_iters": 5}
FORWARD_RATIO, STEP_RATIO = 2.0, 1.5  # the synthetic device's SDPA over its bare GEMMs


def counted(b, h, s, d) -> tuple[int, int]:
    """(forward, forward and backward) FLOPs of SDPA without a mask: the forward as FlopCounterMode
    counts the math kernel's two batched matmuls, the backward by torch's own formula for the fused
    kernels (flop_counter.sdpa_backward_flop_count: the scores recomputed, then dP, dV, dQ, dK)."""
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as fwd:
        F.scaled_dot_product_attention(q, k, v)
    shape = (b, h, s, d)
    return fwd.get_total_flops(), fwd.get_total_flops() + sdpa_backward_flop_count(shape, shape, shape, shape)


def test_the_probe_counts_sdpa_as_flopcountermode_does_and_halves_it_under_a_causal_mask():
    result = bench.run(QUICK | {"shapes": [{"batch": 2, "heads": 3, "seq_len": 48, "head_dim": 16}],
                                "causal": False}, lambda *_: None)
    (point,) = result["points"]
    forward, both = counted(2, 3, 48, 16)
    assert point["forward_flops"] == forward
    assert point["forward_backward_flop_per_sec"] * point["forward_backward"]["median"] == pytest.approx(both)
    assert BACKWARD_FACTOR * forward == both
    plain = core.core(batch=2, heads=3, seq_len=48, head_dim=16, causal=False)
    assert sum(g.flops for g in plain.forward + plain.backward) == both
    # FlopCounterMode counts every pair whatever the mask; with one, Tally counts half (6ND's convention).
    c = core.core(batch=2, heads=3, seq_len=48, head_dim=16, causal=True)
    assert c.forward_flops == forward / 2
    assert result["backend"] == "auto" and result["skipped"] == []


def test_a_kernel_that_cannot_run_here_is_skipped_with_torchs_reason():
    result = bench.run(QUICK | {"shapes": [{"batch": 1, "heads": 2, "seq_len": 32, "head_dim": 16}],
                                "backend": "cudnn"}, lambda *_: None)
    assert result["points"] == [] and len(result["skipped"]) == 1
    assert result["skipped"][0]["what"] == "float32 b1 h2 s32 d16" and result["skipped"][0]["reason"]


def test_a_measured_run_is_stored_and_its_pairs_reach_the_ledger(make_api):
    api = make_api()
    job = {"probe": "attention", "params": QUICK | {"shapes": [{"batch": 1, "heads": 2, "seq_len": 64,
                                                                "head_dim": 16}]}}
    (job_id,) = running.run(api.app.state.store, [job])
    (point,) = api.get(f"/api/v1/jobs/{job_id}").json()["result"]["points"]
    assert point["forward"]["median"] > 0 and point["forward_backward"]["median"] > 0
    points = api.get("/api/v1/accuracy", params={"probe": "attention"}).json()["points"]
    pairs = {p["metric"]: p for p in points if p["job_id"] == job_id and p["mode"] == "datasheet"}
    assert set(pairs) == {"attention_forward_seconds", "attention_step_seconds"}
    assert pairs["attention_forward_seconds"]["measured"] == point["forward"]["median"]
    # At the dense peak, a prediction is faster than any measurement.
    assert all(p["predicted"] < p["measured"] for p in pairs.values())


def bare(b, h, s, d, *, backward: bool) -> float:
    """The synthetic device's surface time for the core's GEMMs at their causal share."""
    samples = [MatmulSample("float32", m, k, n, line(m, k, n), 0.0, (1,))
               for m, k, n in campaign.MATMUL_SHAPES["cpu"]]
    surf = surface.fit(samples, "float32")
    return core.core(batch=b, heads=h, seq_len=s, head_dim=d).gemm_seconds(surf, backward=backward)


def attention_point(b, h, s, d) -> AttentionPoint:
    flops = core.core(batch=b, heads=h, seq_len=s, head_dim=d).forward_flops
    fwd, both = FORWARD_RATIO * bare(b, h, s, d, backward=False), STEP_RATIO * bare(b, h, s, d, backward=True)
    return AttentionPoint(batch=b, heads=h, seq_len=s, head_dim=d, dtype="float32", causal=True,
                          forward_flops=round(flops), forward=stats(fwd), forward_backward=stats(both),
                          forward_flop_per_sec=flops / fwd, forward_backward_flop_per_sec=3.5 * flops / both,
                          peak_flop_per_sec=None)


def store_attention(store, shapes) -> int:
    points = [attention_point(*s) for s in shapes]
    result = result_for("attention", environment=here(), backend="auto", points=points, skipped=[])
    return finished(store, result)


def test_a_profiles_attention_runs_time_the_core_of_a_calibrated_step(make_api):
    api = make_api()
    store = api.app.state.store
    store_matmul(store)
    measured = store_attention(store, campaign.ATTENTION_SHAPES["cpu"])

    def synthetic(params: dict) -> float:
        cfg = TransformerConfigIn(**params["model"]).to_engine()
        c = step.counts(cfg, batch_size=params["batch_size"], seq_len=params["seq_len"], precision="fp32",
                        optimizer="adamw")
        samples = [MatmulSample("float32", m, k, n, line(m, k, n), 0.0, (1,))
                   for m, k, n in campaign.MATMUL_SHAPES["cpu"]]
        surf = surface.fit(samples, "float32")
        gemms = sum(surf.seconds(g.m, g.k, g.n, g.groups) for g in c.gemms)
        cores = STEP_RATIO * sum(a.gemm_seconds(surf, backward=True) for a in c.attention)
        return gemms + cores + c.ops * PER_OP + c.activation_bytes * PER_ACT + c.optimizer_bytes * PER_OPT

    store_steps(store, campaign.train_steps("cpu"), timed=synthetic)
    profile = api.post("/api/v1/calibration/profiles", {}).json()
    assert len(profile["attention"]) == len(campaign.ATTENTION_SHAPES["cpu"])
    assert {j for a in profile["attention"] for j in a["jobs"]} == {measured}
    page = api.get("/calibration", params={"profile": profile["id"]}).text
    assert "attention (SDPA)</th><td>8 shapes (float32), sequences 32 to 256" in page
    fit = profile["train_step"][0]
    assert (fit["seconds_per_op"], fit["seconds_per_activation_byte"], fit["seconds_per_optimizer_byte"]) == (
        pytest.approx((PER_OP, PER_ACT, PER_OPT), rel=1e-3))

    held = campaign.held_out("cpu")[7]["params"]
    answer = api.ok("/api/v1/time/step", {k: held[k] for k in ("model", "batch_size", "seq_len")}
                    | {"calibration": profile["id"]})["calibrated"]
    cfg = TransformerConfigIn(**held["model"]).to_engine()
    layers_bare = cfg.n_layers * bare(held["batch_size"], cfg.n_heads, held["seq_len"], cfg.hd, backward=True)
    assert answer["attention_seconds"] == pytest.approx(STEP_RATIO * layers_bare, rel=1e-6)
    assert answer["seconds"] == pytest.approx(synthetic(held), rel=1e-4)
    assert f"attention jobs {measured}" in answer["sources"][1]

    # A later attention run, not in the profile, is scored by it: the same ratios, so no error.
    later = store_attention(store, [(4, 4, 96, 16)])
    rows = api.get("/api/v1/accuracy", params={"probe": "attention", "mode": "calibrated"}).json()["points"]
    scored = [r for r in rows if r["job_id"] == later]
    assert {r["metric"] for r in scored} == {"attention_forward_seconds", "attention_step_seconds"}
    assert all(r["predicted"] == pytest.approx(r["measured"], rel=1e-6) for r in scored)
