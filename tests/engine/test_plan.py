"""The layout engine against hand-computed cases: the bubble formula, Megatron-LM's and ZeRO's
communication volumes as published, the interleaved schedule's in-flight micro-batches, and a
step whose every term is worked out here from nccl-tests' ring formulas."""

import math
from itertools import product

import pytest

from app.accounting import flops, hardware, models
from app.accounting.comm.collectives import RING_BASE_LATENCY_S, Link
from app.accounting.plan import volumes
from app.accounting.plan.layout import Cluster, Layout, divisors, groups
from app.accounting.plan.search import Limits, search
from app.accounting.plan.step import Workload, memory_of, step_time
from app.accounting.training import memory
from tests.support.api import assert_names_field

H100 = hardware.gpu("h100-sxm")
NVLINK = Link(450e9, 3.4e-6)
NDR = Link(50e9, 9.6e-6)


def workload(model: str = "llama3-8b", gpus: int = 8, batch: int = 64, seq: int = 2048, *,
             overlap: bool = True, inter: Link | None = NDR) -> Workload:
    return Workload(models.preset(model), H100, Cluster(gpus, 8, NVLINK, inter if gpus > 8 else None),
                    global_batch=batch, seq_len=seq, precision="bf16_mixed", optimizer="adamw",
                    peak_flop_per_sec=989.5e12, compute_efficiency=0.5, overlap_data_parallel=overlap)


def layout(dp: int = 1, tp: int = 1, pp: int = 1, ep: int = 1, zero: int = 0, b: int = 1, m: int = 1,
           v: int = 1, recompute: str = "none", sp: bool = True) -> Layout:
    return Layout(data_parallel=dp, tensor_parallel=tp, pipeline_parallel=pp, expert_parallel=ep,
                  zero_stage=zero, micro_batch=b, micro_batches=m, virtual_stages=v, recompute=recompute,
                  sequence_parallel=sp and tp > 1)


# --- Megatron-LM's and ZeRO's volumes, as published ------------------------------------------

@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("sp", [False, True])
def test_tensor_parallel_bytes_per_layer_are_megatrons(t: int, sp: bool) -> None:
    # Narayanan et al. 2021, section 3.2: two all-reduces of b*s*h forward and two backward per
    # layer; a ring all-reduce sends 2(t-1)/t of its buffer. Korthikanti et al. 2022, 4.2.2: with
    # sequence parallelism the all-gathers and reduce-scatters move the same bytes.
    b, s, h, dtype = 2, 4096, 8192, 2
    msgs = volumes.tensor_parallel(tokens=b * s, d_model=h, act_bytes=dtype, sequence_parallel=sp,
                                   recompute="none")
    sent = sum(m.count * volumes.wire_bytes(m, t) for m in msgs)
    assert sent == pytest.approx(4 * 2 * (t - 1) / t * b * s * h * dtype)
    full = volumes.tensor_parallel(tokens=b * s, d_model=h, act_bytes=dtype, sequence_parallel=sp,
                                   recompute="full")
    # Full recompute runs each layer's forward, and its two collectives, once more.
    assert sum(m.count * volumes.wire_bytes(m, t) for m in full) == pytest.approx(sent * 6 / 4)


def test_pipeline_sends_bsh_per_micro_batch_split_over_tensor_ranks() -> None:
    # Narayanan et al. 2021: b*s*h between consecutive stages per micro-batch; with the
    # scatter/gather optimisation (section 4.1) each of t tensor ranks sends 1/t of it.
    assert volumes.pipeline(tokens=4 * 2048, d_model=4096, act_bytes=2, tp=1) == 4 * 2048 * 4096 * 2
    assert volumes.pipeline(tokens=4 * 2048, d_model=4096, act_bytes=2, tp=8) == 4 * 2048 * 4096 * 2 // 8


@pytest.mark.parametrize("n", [2, 8, 64])
def test_zero_volumes_are_the_papers(n: int) -> None:
    # Rajbhandari et al. 2020, section 7: stages 0, 1 and 2 move 2 psi per GPU (an all-reduce's
    # worth), stage 3 moves 3 psi (1.5x); psi in elements, here in bytes, and a ring sends (n-1)/n.
    psi, ring = 10**9, (n - 1) / n
    for stage, elements in ((0, 2), (1, 2), (2, 2), (3, 3)):
        msgs = volumes.data_parallel(params=psi, param_bytes=2, grad_bytes=2, zero_stage=stage,
                                     micro_batches=1)
        sent = sum(m.count * volumes.wire_bytes(m, n) for m in msgs)
        assert sent == pytest.approx(elements * psi * 2 * ring)


def test_expert_all_to_all_sends_every_tokens_top_k_copies_away() -> None:
    # Dispatch and combine, forward and backward: 4 all-to-alls of tokens x top_k x h, each rank
    # keeping 1/ep of its copies; with sequence parallelism a tensor rank routes 1/t of the tokens.
    tokens, h, k, ep = 8192, 4096, 2, 8
    msgs = volumes.expert_parallel(tokens=tokens, d_model=h, top_k=k, act_bytes=2, tp=2,
                                   sequence_parallel=True, recompute="none")
    assert sum(m.count for m in msgs) == 4
    sent = sum(m.count * volumes.wire_bytes(m, ep) for m in msgs)
    assert sent == 4 * tokens // 2 * k * h * 2 * (ep - 1) / ep


# --- placement ------------------------------------------------------------------------------

def test_groups_follow_megatrons_rank_order() -> None:
    # 64 GPUs, 8 a node, tp 4 inner, dp 16, pp 1: each node holds 2 tensor groups, so a data-
    # parallel group has 2 ranks in each of 8 nodes; experts over ep 4 of those: 2 per node.
    g = groups(layout(dp=16, tp=4, ep=4), 8)
    assert (g["tensor"].ranks, g["tensor"].per_node) == (4, 4)
    assert (g["data"].ranks, g["data"].per_node) == (16, 2)
    assert (g["expert"].ranks, g["expert"].per_node) == (4, 2)
    assert (g["expert_data"].ranks, g["expert_data"].per_node) == (4, 1)
    assert g["pipeline"].per_node == 1  # 64 GPUs: neighbouring stages sit on different nodes
    assert groups(layout(dp=2, tp=2, pp=2), 8)["pipeline"].per_node == 2


# --- the step, term by term -----------------------------------------------------------------

def test_one_gpu_step_is_its_flops_at_the_efficiency() -> None:
    w = workload(gpus=1, batch=8)
    st = step_time(w, layout(b=2, m=4))
    fwd = flops.transformer(w.model, 1, w.seq_len).forward.total
    assert st.step_seconds == pytest.approx(3 * fwd * 8 / (989.5e12 * 0.5))
    assert st.mfu == pytest.approx(0.5) and st.hfu == pytest.approx(0.5)
    assert st.tokens_per_sec == pytest.approx(8 * w.seq_len / st.step_seconds)


def test_data_parallel_all_reduce_hand_computed() -> None:
    # Two GPUs in one node, ZeRO 0, nothing overlapped: the step is the compute plus one ring
    # all-reduce of the 16-bit gradients, t = base + 2(n-1) x latency + 2(n-1)/n x S / bw, the ring
    # getting 80% of a node link of no named kind's 450 GB/s line rate (NCCL's topology model prices
    # NVLink at 20 of 25 GB/s, src/graph/topo.h; rings measure 78-82% on A100 and H200 nodes).
    w = workload(gpus=2, batch=2, overlap=False)
    st = step_time(w, layout(dp=2))
    grads = memory_of(w, layout(dp=2)).params_per_gpu * 2
    ring = RING_BASE_LATENCY_S + 2 * 3.4e-6 + 2 * (1 / 2) * grads / (0.80 * 450e9)
    assert st.breakdown.data_parallel == pytest.approx(ring)
    assert st.step_seconds == pytest.approx(st.breakdown.compute + ring)
    overlapped = step_time(workload(gpus=2, batch=2), layout(dp=2))
    # Overlapped with the backward (2/3 of a step with no recompute): only what outlasts it shows.
    backward = overlapped.breakdown.compute * 2 / 3
    assert overlapped.breakdown.data_parallel == pytest.approx(max(0.0, ring - backward))


@pytest.mark.parametrize(("pp", "v", "m"), [(4, 1, 8), (4, 2, 8), (8, 5, 16), (2, 1, 1)])
def test_bubble_is_p_minus_1_over_v_m_of_the_ideal_time(pp: int, v: int, m: int) -> None:
    # Narayanan et al. 2021: the bubble is (p - 1) / (v m) of the pipeline's ideal time.
    w = workload("llama3-70b", gpus=pp * 8, batch=m, seq=4096)
    st = step_time(w, layout(tp=8, pp=pp, v=v, m=m))
    bd = st.breakdown
    ideal = bd.compute + bd.tensor_parallel + bd.expert_parallel + bd.pipeline_p2p
    assert bd.pipeline_bubble == pytest.approx((pp - 1) / (v * m) * ideal)
    assert st.step_seconds == pytest.approx(ideal + bd.pipeline_bubble + bd.data_parallel)


def test_recompute_adds_hardware_flops_not_model_flops() -> None:
    w = workload(gpus=1, batch=1)
    none, sel, full = (step_time(w, layout(recompute=r)) for r in ("none", "selective", "full"))
    fwd = flops.transformer(w.model, 1, w.seq_len).forward
    assert none.model_flops_per_step == sel.model_flops_per_step == full.model_flops_per_step
    core = fwd.attention_scores + fwd.attention_values
    assert sel.hardware_flops_per_step - none.hardware_flops_per_step == core
    assert full.hardware_flops_per_step - none.hardware_flops_per_step == fwd.total - fwd.lm_head
    assert full.mfu < none.mfu and full.hfu == pytest.approx(0.5)


def test_interleaving_holds_megatrons_warm_up_chunks() -> None:
    # Megatron-LM's interleaved 1F1B: the first rank warms up 2(p-1) + (v-1)p chunks and holds one
    # more, each of layers / (p v): the first stage's activations grow by 1 + (p-1)/(p v).
    cfg = models.preset("llama3-70b")
    pp, v = 4, 5
    kw = dict(model=cfg, params=None, precision="bf16_mixed", optimizer="adamw", batch_size=1, seq_len=4096,
              tensor_parallel=8, pipeline_parallel=pp)
    plain = memory.training_memory(**kw).activation_detail
    inter = memory.training_memory(**kw, virtual_stages=v).activation_detail
    chunks = 2 * (pp - 1) + (v - 1) * pp + 1
    assert plain.layers_held == cfg.n_layers  # p micro-batches x layers / p
    assert inter.layers_held == chunks * cfg.n_layers // (pp * v)
    assert inter.layers_held == pytest.approx(cfg.n_layers * (1 + (pp - 1) / (pp * v)))


# --- the search -----------------------------------------------------------------------------

def test_search_counts_every_candidate_once() -> None:
    # The candidate space built here independently: tp x pp dividing 16, ep 1, four ZeRO stages,
    # micro-batches dividing the rank's share, three recomputes; with pp > 1 the even split of 32
    # layers and, with three stages or more, one with a layer fewer on each end; chunks v dividing
    # every stage's layers, or its slots counting the embedding and the loss as a layer of the first
    # and the last stage. No context parallelism: 1,024-token sequences are below the search's 8,192.
    w = workload("llama3-8b", gpus=16, batch=32, seq=1024)
    res = search(w, Limits(), top_k=3, points=True)
    L = w.model.n_layers

    def chunks(split: list[int]) -> int:
        slots = [split[0] + 1, *split[1:-1], split[-1] + 1]
        return sum(all(n % v == 0 for n in split) or all(n % v == 0 for n in slots) for v in range(1, L + 2))

    total = 0
    for tp, pp in product(divisors(16), repeat=2):
        if 16 % (tp * pp):
            continue
        dp = 16 // (tp * pp)
        share = 32 // dp if 32 % dp == 0 else 0
        batches = len(divisors(share)) if share else 1
        if pp == 1:
            total += 4 * 3 * batches
            continue
        q = L // pp
        splits = [[q] * pp]
        if pp > 2:  # a layer fewer on each end, the middle stages sharing the two, the later ones first
            middle = [q] * (pp - 2)
            for i in (-1, -2):
                middle[i] += 1
            splits.append([q - 1, *middle, q - 1])
        total += sum(4 * 3 * batches * chunks(split) for split in splits)
    assert res.evaluated + sum(res.refused.values()) == total
    assert res.evaluated == len(res.points)
    assert res.fitting == sum(p.fits for p in res.points)
    assert set(res.refused) <= {"tensor_parallel_across_nodes", "tensor_parallel_heads", "pipeline_layers",
                                "batch", "virtual_stages"}


def test_search_returns_the_fastest_fitting_valid_layouts() -> None:
    w = workload("llama3-8b", gpus=16, batch=32, seq=1024)
    res = search(w, Limits(), top_k=5, points=True)
    assert len(res.best) == 5
    times = [s.step_seconds for s in res.best]
    assert times == sorted(times)
    assert times[0] == min(p.step_seconds for p in res.points if p.fits)
    for st in res.best:
        lo = st.layout
        assert lo.gpus == 16 and lo.tensor_parallel <= 8 and st.fits
        assert lo.data_parallel * lo.micro_batch * lo.micro_batches == 32
        assert w.model.n_layers % lo.pipeline_parallel == 0
        assert st.memory_bytes <= H100.memory_bytes


def test_limits_pin_one_layout() -> None:
    w = workload("llama3-8b", gpus=16, batch=32, seq=1024)
    one = Limits(tensor_parallel=(4,), pipeline_parallel=(2,), zero_stage=(1,), micro_batch=(2,),
                 virtual_stages=(2,), recompute=("selective",))
    res = search(w, one, top_k=5)
    assert res.evaluated == 1
    st = res.best[0]
    assert st.step_seconds == step_time(w, layout(dp=2, tp=4, pp=2, zero=1, b=2, m=8, v=2,
                                                  recompute="selective")).step_seconds


def test_nothing_fits_gives_the_closest() -> None:
    w = workload("llama3-70b", gpus=8, batch=8, seq=4096)
    res = search(w, Limits(zero_stage=(0,), recompute=("none",)), top_k=5, points=True)
    assert res.fitting == 0 and res.best == []
    assert res.least_memory.memory_bytes == min(p.memory_bytes for p in res.points) > H100.memory_bytes


def test_moe_layouts_use_expert_parallelism() -> None:
    w = workload("mixtral-8x7b", gpus=16, batch=32, seq=2048)
    res = search(w, Limits(recompute=("selective",), zero_stage=(1,)), top_k=50, points=True)
    eps = {st.layout.expert_parallel for st in res.best}
    assert eps - {1}, eps
    with_ep = next(st for st in res.best if st.layout.expert_parallel > 1)
    assert with_ep.breakdown.expert_parallel > 0 and with_ep.traffic_bytes.expert_parallel > 0
    assert all(8 % st.layout.expert_parallel == 0 for st in res.best)
    assert math.isfinite(with_ep.mfu) and 0 < with_ep.mfu < 0.5


def test_the_memory_api_takes_virtual_stages(api):
    body = {"model": "llama3-70b", "tensor_parallel": 8, "pipeline_parallel": 4, "seq_len": 4096}
    plain = api.ok("/api/v1/memory/training", body)["activation_detail"]["layers_held"]
    five = api.ok("/api/v1/memory/training", body | {"virtual_stages": 5})
    inter = five["activation_detail"]["layers_held"]
    assert (plain, inter) == (80, (2 * 3 + 4 * 4 + 1) * 80 // 20)
    for bad in ({"virtual_stages": 3}, {"virtual_stages": 2, "pipeline_parallel": 1}):
        assert_names_field(api.post("/api/v1/memory/training", body | bad), "virtual_stages")
