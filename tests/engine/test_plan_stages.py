"""Uneven pipeline stages, context parallelism and ZeRO-2/3 with pipelines, each against the
published setup it models or a hand calculation."""

import pytest

from dataclasses import replace

from app.accounting import flops, models
from app.accounting.comm.collectives import Link, collective_time
from app.accounting.errors import InvalidInput
from app.accounting.plan import volumes
from app.accounting.plan.layout import Cluster, Layout
from app.accounting.plan.search import Limits, search, stage_splits
from app.accounting.plan.step import step_time
from app.accounting.training import activations, memory
from app.accounting.training.sharding import interleaves, split_layers
from tests.engine.test_plan import workload

LLAMA_405B = models.preset("llama3.1-405b")


# --- the stage split --------------------------------------------------------------------------

def test_llama3_405b_puts_a_layer_fewer_on_the_first_and_last_of_16_stages() -> None:
    # Llama 3 paper, section 3.3.2: 126 layers on 16 stages, one layer fewer on the first and the
    # last stage than on the others (8).
    split = split_layers(126, 16)
    assert split == (7, *[8] * 14, 7)
    # ... and its interleaved schedule: the first chunk of the first stage holds only the embedding,
    # the last of the last only the head and loss, so 8 chunks of one slot each on every stage.
    assert interleaves(split, 8) and not interleaves(split, 3)


def test_bloom_176b_on_12_stages() -> None:
    # BLOOM-176B: 70 layers on PP12 (BigScience, "BLOOM", section 3.4.2) with Megatron-DeepSpeed's
    # partition counting the embeddings as layers: 72 slots, 6 per stage, so 5 layers on the
    # first and last stage and 6 on the ten others.
    assert split_layers(70, 12) == (5, *[6] * 10, 5)


def test_megatron_first_and_last_stage_layers_leave_the_rest_to_the_middle() -> None:
    # --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 2 on 61 layers and
    # 16 stages: 56 layers over 14 middle stages, 4 each.
    assert split_layers(61, 16, 3, 2) == (3, *[4] * 14, 2)
    # 57 over 14: 1 stage more than 4; the later middle stage takes it.
    assert split_layers(61, 16, 2, 2) == (2, *[4] * 13, 5, 2)
    assert sum(split_layers(61, 16, 5, None)) == 61


@pytest.mark.parametrize("pp,first,last,field", [
    (1, 3, None, "first_stage_layers"),         # one stage has no split
    (2, 3, 3, "first_stage_layers"),            # two stages must sum to n_layers (32)
    (16, 20, 20, "first_stage_layers"),         # leaves -8 for 14 middle stages
    (40, None, None, "pipeline_parallel"),      # more stages than layers
])
def test_a_split_no_framework_runs_is_refused_naming_the_field(pp, first, last, field) -> None:
    with pytest.raises(InvalidInput) as err:
        split_layers(32, pp, first, last)
    assert err.value.field == field


def test_in_flight_micro_batches_fall_by_one_per_stage() -> None:
    # 1F1B (Narayanan et al. 2021, section 2.2.1): stage i runs pp - i - 1 warm-up forwards, so it
    # holds pp - i micro-batches' activations at its peak; the last stage holds one.
    assert [memory.in_flight_layers(8, i, pp=16, v=1) for i in (0, 1, 15)] == [8 * 16, 8 * 15, 8]
    # Megatron-LM's interleaved schedule: 2 (pp - i - 1) + (v - 1) pp warm-up chunks plus one.
    assert memory.in_flight_layers(8, 15, pp=16, v=8) == (7 * 16 + 1) * 8 // 8


def test_the_busiest_stage_can_be_a_middle_one() -> None:
    # Llama 3 405B's split, no recompute, one sequence of 8,192 tokens per micro-batch, TP8:
    # the first stage holds 7 layers x 16 micro-batches = 112 layers' activations, the second
    # 8 x 15 = 120, so the second (or a later 8-layer stage) decides, not the first.
    mem = memory.training_memory(model=LLAMA_405B, params=None, precision="bf16_mixed", optimizer="adamw",
                                 batch_size=1, seq_len=8192, tensor_parallel=8, pipeline_parallel=16,
                                 data_parallel=8, zero_stage=1)
    assert mem.pipeline_split == [7, *[8] * 14, 7]
    by_stage = {s.stage: s for s in mem.stages}
    per_layer = mem.activation_detail.per_layer_total
    assert mem.pipeline_stage_index == 1 and mem.pipeline_stage == "middle"
    assert mem.activation_detail.layers_held == 8 * 15
    assert by_stage[1].activations == 8 * 15 * per_layer  # no embedding, no head on a middle stage
    assert by_stage[0].activations == 7 * 16 * per_layer  # no dropout: the embedding keeps no mask
    assert mem.total == max(s.total for s in mem.stages)


def test_the_search_chooses_llama3s_split_and_interleaving() -> None:
    # Llama 3 405B on 16,384 H100s (Llama 3 paper, table 4): TP8, PP16, DP128, 16M-token batches of
    # 8,192-token sequences; the search, pinned to those degrees, may take any split and chunks.
    w = workload("llama3.1-405b", gpus=16384, batch=2048, seq=8192)
    res = search(w, Limits(tensor_parallel=(8,), pipeline_parallel=(16,), context_parallel=(1,),
                           micro_batch=(1,), zero_stage=(1,)), top_k=3)
    best = res.best[0].layout
    assert best.pipeline_split == (7, *[8] * 14, 7) and best.virtual_stages == 8
    # The even split and the one a layer lighter on each end are both tried.
    assert stage_splits(126, 16, Limits()) == [(7, *[8] * 14, 7), (6, *[8] * 12, 9, 9, 6)]


def test_the_slowest_stage_sets_the_pace() -> None:
    # 32 layers on 4 stages: 7, 9, 9, 7. The middle stages' 9 layers set each micro-batch's time,
    # unless the last stage's 7 layers and the LM head take longer.
    w = workload("llama3-8b", gpus=4, batch=8, seq=2048)
    lo = Layout(data_parallel=1, tensor_parallel=1, pipeline_parallel=4, expert_parallel=1, zero_stage=0,
                micro_batch=1, micro_batches=8, virtual_stages=1, recompute="none", sequence_parallel=False,
                pipeline_split=(7, 9, 9, 7))
    fwd = flops.transformer_forward(w.model, 1, 2048)
    per_layer = (fwd.total - fwd.lm_head) / w.model.n_layers
    slowest = max(9 * per_layer, 7 * per_layer + fwd.lm_head)
    st = step_time(w, lo)
    rate = w.peak_flop_per_sec * w.compute_efficiency
    assert st.breakdown.compute == pytest.approx(8 * 3 * slowest / rate)


# --- ZeRO-2/3 (FSDP) with pipeline parallelism ------------------------------------------------

def test_fsdp_with_a_pipeline_holds_and_sends_what_zero1_does() -> None:
    # torch.distributed.pipelining keeps the stage's parameters gathered and its gradients unsharded
    # until the last micro-batch's backward: at the peak only optimizer state and master weights are
    # sharded, and each step gathers the parameters once and reduce-scatters the gradients once.
    kw = dict(model=models.preset("llama3-8b"), params=None, precision="bf16_mixed", optimizer="adamw",
              batch_size=1, seq_len=4096, pipeline_parallel=4, data_parallel=8)
    z1 = memory.training_memory(**kw, zero_stage=1)
    for zero in (2, 3):
        z = memory.training_memory(**kw, zero_stage=zero)
        assert (z.parameters, z.gradients, z.optimizer_state, z.total) == (
            z1.parameters, z1.gradients, z1.optimizer_state, z1.total)
        assert any("reshard_after_backward" in a for a in z.assumptions)
        assert volumes.data_parallel(params=10, param_bytes=2, grad_bytes=2, zero_stage=zero, micro_batches=8,
                                     pipeline=True) == volumes.data_parallel(
            params=10, param_bytes=2, grad_bytes=2, zero_stage=1, micro_batches=8)
    # Without a pipeline ZeRO-3 shards the parameters: 1/8 of ZeRO-1's.
    assert memory.training_memory(**(kw | {"pipeline_parallel": 1}), zero_stage=3).parameters * 8 == pytest.approx(
        memory.training_memory(**(kw | {"pipeline_parallel": 1}), zero_stage=1).parameters, abs=8)


# --- context parallelism ----------------------------------------------------------------------

def test_context_parallel_ranks_keep_a_cth_of_the_sequence_and_shard_over_data_x_context() -> None:
    cfg = models.preset("llama3-8b")
    kw = dict(model=cfg, params=None, precision="bf16_mixed", optimizer="adamw", batch_size=1, zero_stage=1)
    cp = memory.training_memory(**kw, seq_len=131072, context_parallel=16, data_parallel=2)
    local = memory.training_memory(**kw, seq_len=131072 // 16, data_parallel=32)
    assert cp.activations == local.activations
    assert cp.optimizer_state == local.optimizer_state  # sharded over 2 x 16 ranks
    # The ring's arriving chunk of K and V: 8 KV heads x 128 x 2 (K and V) x 8,192 tokens x 2 bytes.
    assert cp.transient - local.transient == 8 * 128 * 2 * 8192 * 2
    gathered = memory.training_memory(**kw, seq_len=131072, context_parallel=16, data_parallel=2,
                                      context_parallel_algorithm="all_gather")
    assert gathered.transient - local.transient == 15 * 8 * 128 * 2 * 8192 * 2


def test_context_parallel_needs_two_chunks_per_rank() -> None:
    with pytest.raises(InvalidInput) as err:
        memory.training_memory(model=models.preset("llama3-8b"), params=None, precision="bf16_mixed",
                               optimizer="adamw", batch_size=1, seq_len=8192 + 16, context_parallel=16)
    assert err.value.field == "context_parallel"


def _cp_workload(link: Link, algorithm: str):
    w = workload("llama3-8b", gpus=8, batch=8, seq=131072)
    return replace(w, cluster=Cluster(8, 8, link, None), context_parallel_algorithm=algorithm)


def test_the_all_gather_variant_is_exposed_and_the_ring_hides_behind_attention() -> None:
    # 131,072 tokens over CP8: each rank's K and V are 16,384 x 8 heads x 128 x 2 x 2 bytes per layer.
    lo = Layout(data_parallel=1, tensor_parallel=1, pipeline_parallel=1, expert_parallel=1, zero_stage=0,
                micro_batch=1, micro_batches=8, virtual_stages=1, recompute="full", sequence_parallel=False,
                context_parallel=8)
    chunk = 16384 * 8 * 128 * 2 * 2
    link = Link(450e9, 3.4e-6)
    w = _cp_workload(link, "all_gather")
    per_layer = sum(collective_time(op, 8 * chunk, 8, gpus_per_node=8, intra=link).seconds
                    for op in ("all_gather", "reduce_scatter"))
    assert step_time(w, lo).breakdown.context_parallel == pytest.approx(8 * 32 * per_layer)
    # The ring's 7 sends of 4 MiB at 450 GB/s take about 0.07 ms, far less than the attention core
    # over 131k tokens: nothing is exposed. Over a link 10,000 times slower it is exposed.
    assert step_time(_cp_workload(link, "ring"), lo).breakdown.context_parallel == 0
    slow = step_time(_cp_workload(Link(45e6, 3.4e-6), "ring"), lo).breakdown.context_parallel
    assert slow > 0
    # Ring exposure, worked out: forward 7 sends, backward 14, minus the core's own time (its
    # backward twice its forward), over 32 layers and 8 micro-batches; sends get 80% of a node link
    # of no named kind (NCCL's topology model, src/graph/topo.h).
    fwd = flops.transformer_forward(w.model, 1, 131072)
    core = (fwd.attention_scores + fwd.attention_values) / 32 / 8 / (w.peak_flop_per_sec * 0.5)
    send = 3.4e-6 + chunk / (0.80 * 45e6)
    assert slow == pytest.approx(8 * 32 * (max(0, 7 * send - core) + max(0, 14 * send - 2 * core)))


def test_the_search_tries_context_parallelism_only_for_long_sequences() -> None:
    short = search(workload("llama3-8b", gpus=8, batch=8, seq=8192), Limits(recompute=("full",)), top_k=50,
                   points=True)
    assert all("cp" not in p.label for p in short.points)
    long = search(workload("llama3-8b", gpus=8, batch=8, seq=131072), Limits(recompute=("full",)), top_k=50,
                  points=True)
    assert {p.label.split()[2] for p in long.points if "cp" in p.label} == {"cp2", "cp4", "cp8"}


# --- FP8 training recipes ---------------------------------------------------------------------

LLAMA_8B = models.preset("llama3-8b")
# Llama 3 8B's decoder linear weights by hand: q and o 4096 x 4096, k and v 4096 x 1024 (8 KV heads
# of 128), gate, up and down 4096 x 14336; 32 layers.
LINEAR_8B = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)


@pytest.mark.parametrize("recipe", ["fp8_delayed", "fp8_current", "fp8_blockwise"])
def test_fp8_keeps_two_fp8_weight_copies_and_fp8_linear_inputs(recipe) -> None:
    kw = dict(model=LLAMA_8B, params=None, optimizer="adamw", batch_size=1, seq_len=4096)
    bf16 = memory.training_memory(**kw, precision="bf16_mixed")
    f8 = memory.training_memory(**kw, precision=recipe)
    assert bf16.weight_copies == 0
    assert f8.weight_copies == pytest.approx(2 * LINEAR_8B, rel=1e-6)  # row- and column-wise, 1 byte each
    # Each layer's four linear inputs (q/k/v's and the MLP's up: the normed residual, h each; o's, h;
    # down's, d_ff) kept in 1 byte instead of 2: 3h + d_ff bytes fewer per token per layer.
    saved = bf16.activation_detail.per_layer_total - f8.activation_detail.per_layer_total
    assert saved == 4096 * (3 * 4096 + 14336)
    per = memory.state_bytes_per_param(recipe, "adamw")
    # Transformer Engine keeps fp32 Adam moments; DeepSeek-V3 bf16 ones (section 3.3.3).
    assert per.optimizer_state == (4 if recipe == "fp8_blockwise" else 8)
    assert (per.parameters, per.gradients, per.master_weights) == (2, 2, 4)


def test_fp8_runs_the_linear_gemms_at_the_float8_peak() -> None:
    # One GPU, one 2,048-token sequence: linear FLOPs at 1,979 TFLOP/s, the attention core and the
    # LM head at 989.5, each x 0.5; backward twice the forward.
    w = replace(workload("llama3-8b", gpus=1, batch=1, seq=2048), precision="fp8_delayed",
                cluster=Cluster(1, 1, Link(1.0, 0.0), None), fp8_peak_flop_per_sec=1979e12)
    lo = Layout(data_parallel=1, tensor_parallel=1, pipeline_parallel=1, expert_parallel=1, zero_stage=0,
                micro_batch=1, micro_batches=1, virtual_stages=1, recompute="none", sequence_parallel=False)
    fwd = flops.transformer_forward(w.model, 1, 2048)
    core = fwd.attention_scores + fwd.attention_values
    linear = fwd.total - fwd.lm_head - core
    expected = 3 * (linear / (1979e12 * 0.5) + (core + fwd.lm_head) / (989.5e12 * 0.5))
    st = step_time(w, lo)
    assert st.breakdown.compute == pytest.approx(expected)
    # MFU stays against the bf16 peak: model FLOPs / (time x 989.5e12), above the 0.5 it would be in bf16.
    assert st.mfu == pytest.approx(3 * fwd.total / (st.step_seconds * 989.5e12))
    assert st.mfu > 0.5


# --- torchtitan's op-level selective checkpointing -------------------------------------------

def test_op_selective_saves_torchtitans_tensors() -> None:
    # torchtitan/distributed/activation_checkpoint.py, "op" policy: in each block, matmul and SDPA
    # outputs are saved but every second matmul's. Llama's block runs wq, wk, wv, wo, w1, w3, w2:
    # saved per token are the block input (4,096), q (4,096), v (1,024), the attention output (4,096)
    # and its fp32 log-sum-exp (32 heads), w1's output (14,336) and w2's (4,096), in bf16.
    mem = memory.training_memory(model=LLAMA_8B, params=None, precision="bf16_mixed", optimizer="adamw",
                                 batch_size=1, seq_len=4096, recompute="op_selective")
    per_token = 2 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4 * 32
    assert mem.activation_detail.per_layer_total == 4096 * per_token
    # Its recompute: k, o and w3 again, 2 x tokens x (4,096 x 1,024 + 4,096 x 4,096 + 4,096 x 14,336) FLOPs.
    assert activations.op_selective_recompute_flops(LLAMA_8B, 4096) == 2 * 4096 * 4096 * (1024 + 4096 + 14336)


def test_op_selective_is_refused_for_a_block_torchtitan_does_not_run_it_on() -> None:
    with pytest.raises(InvalidInput) as err:
        memory.training_memory(model=models.preset("mixtral-8x7b"), params=None, precision="bf16_mixed",
                               optimizer="adamw", batch_size=1, seq_len=4096, recompute="op_selective")
    assert err.value.field == "recompute"


def test_overlapped_tensor_parallelism_hides_behind_the_linear_gemms() -> None:
    # TP8 on one node, 4 micro-batches of one 4,096-token sequence, no recompute. Over a link 1,000
    # times slower than NVLink the collectives outlast the GEMMs: what shows is their excess over the
    # micro-batch's linear GEMMs (its compute less the attention core's forward and twice that backward).
    lo = Layout(data_parallel=1, tensor_parallel=8, pipeline_parallel=1, expert_parallel=1, zero_stage=0,
                micro_batch=1, micro_batches=4, virtual_stages=1, recompute="none", sequence_parallel=True)
    for link, hidden in ((Link(450e9, 3.4e-6), True), (Link(450e6, 3.4e-6), False)):
        w = replace(workload("llama3-8b", gpus=8, batch=4, seq=4096), cluster=Cluster(8, 8, link, None))
        plain = step_time(w, lo).breakdown
        overlapped = step_time(replace(w, overlap_tensor_parallel=True), lo).breakdown
        fwd = flops.transformer_forward(w.model, 1, 4096)
        core = (fwd.attention_scores + fwd.attention_values) / 8 / (989.5e12 * 0.5)
        window = plain.compute - 4 * 3 * core
        assert overlapped.tensor_parallel == (0 if hidden else pytest.approx(plain.tensor_parallel - window))
        assert plain.tensor_parallel > 0


# --- tensor-parallel groups that straddle nodes -------------------------------------------------

def test_a_tensor_group_that_straddles_two_nodes_runs_at_the_network() -> None:
    # Megatron-LM's rank order puts tensor ranks next to each other: with TP6 on 8-GPU nodes ranks 6-11
    # form a group across nodes 0 and 1. Its ring is as slow as its network hop, so TP6 over 48 GPUs
    # is timed over the network, while TP4 (two groups a node) and TP6 inside one node stay on NVLink.
    from app.accounting.plan.layout import Group, groups
    assert groups(layout_of(tp=6, dp=8), 8)["tensor"] == Group(6, 1)
    assert groups(layout_of(tp=4, dp=12), 8)["tensor"] == Group(4, 4)
    assert groups(layout_of(tp=6, dp=1), 8)["tensor"] == Group(6, 6)
    # Its collectives take what they would if every rank sat in a node of its own, on the network.
    w = workload("gpt3-175b", gpus=48, batch=48, seq=2048)  # 96 heads: TP4 and TP6 both split them
    lo = layout_of(tp=6, dp=8)
    alone = replace(w, cluster=Cluster(48, 1, w.cluster.intra, w.cluster.inter))
    assert step_time(w, lo).breakdown.tensor_parallel == pytest.approx(step_time(alone, lo).breakdown.tensor_parallel)
    assert step_time(w, lo).breakdown.tensor_parallel > step_time(w, layout_of(tp=4, dp=12)).breakdown.tensor_parallel


def layout_of(tp: int, dp: int, b: int = 1, m: int = 1) -> Layout:
    return Layout(data_parallel=dp, tensor_parallel=tp, pipeline_parallel=1, expert_parallel=1, zero_stage=1,
                  micro_batch=b, micro_batches=m, virtual_stages=1, recompute="selective", sequence_parallel=True)


# --- activation offload and a chunked loss ----------------------------------------------------

def test_offloaded_activations_leave_two_layers_on_the_gpu() -> None:
    # Llama 3 8B, no recompute, 4 stages: the first holds 8 layers x 4 micro-batches. Offloaded,
    # 2 layers' saved tensors stay on the GPU and the other 30 are in host memory.
    kw = dict(model=LLAMA_8B, params=None, precision="bf16_mixed", optimizer="adamw", batch_size=1, seq_len=4096,
              pipeline_parallel=4, first_stage_layers=8)
    kept = memory.training_memory(**kw)
    off = memory.training_memory(**kw, activation_offload=True)
    per_layer = kept.activation_detail.per_layer_total
    first = next(s for s in off.stages if s.stage == 0)
    assert first.activations == 2 * per_layer  # no dropout: nothing outside the layers on the first stage
    assert off.activation_detail.offloaded >= 6 * per_layer
    assert off.total < kept.total


def test_a_chunked_loss_keeps_no_whole_sequence_logits() -> None:
    # Llama 3 8B, 4,096 tokens, one GPU: the whole-sequence loss keeps fp32 logits (4 x 128,256 bytes a
    # token) and makes two fp32 gradients of them; in 8 chunks none is kept, one chunk's gradients are
    # made at a time, and the head's input gradient (4,096 bf16 a token) is kept from the forward.
    kw = dict(model=LLAMA_8B, params=None, precision="bf16_mixed", optimizer="adamw", batch_size=1, seq_len=4096)
    whole = memory.training_memory(**kw)
    chunked = memory.training_memory(**kw, loss_chunks=8)
    assert whole.activations - chunked.activations == 4096 * (4 * 128256 - 2 * 4096)
    assert chunked.transient == 2 * 4 * 4096 * 128256 // 8
    assert whole.transient == 2 * 4 * 4096 * 128256


def test_offload_copies_over_pcie_show_when_they_outlast_compute() -> None:
    # One GPU, full-width Llama 3 8B, no recompute: each micro-batch's 32 layers of saved tensors go out
    # and back over a link 10,000 times slower than PCIe 5, so each copy outlasts its pass.
    lo = Layout(data_parallel=1, tensor_parallel=1, pipeline_parallel=1, expert_parallel=1, zero_stage=0,
                micro_batch=1, micro_batches=2, virtual_stages=1, recompute="none", sequence_parallel=False)
    w = replace(workload("llama3-8b", gpus=1, batch=2, seq=2048), cluster=Cluster(1, 1, Link(1.0, 0.0), None),
                activation_offload=True, pcie_bytes_per_sec=64e9 / 1e4)
    st = step_time(w, lo)
    copy = 32 * st.memory.activation_detail.per_layer_total / (64e9 / 1e4)
    fwd = st.breakdown.compute / 2 / 3  # a micro-batch's forward: a third of its compute
    assert st.breakdown.activation_offload == pytest.approx(2 * ((copy - fwd) + (copy - 2 * fwd)))
    # Over PCIe 5 (64 GB/s) with full recompute only each layer's 8 KiB-a-token input moves: it hides.
    # Without recompute, 8B's saved tensors per token outrun its compute per token, and show.
    pcie = replace(w, pcie_bytes_per_sec=64e9)
    assert step_time(pcie, replace(lo, recompute="full")).breakdown.activation_offload == 0
    assert 0 < step_time(pcie, lo).breakdown.activation_offload < st.breakdown.activation_offload


def test_fsdp_casts_a_layer_at_a_time_to_fp8() -> None:
    # Llama 3 8B over 8 ranks with ZeRO-3 and no pipeline: FSDP gathers one decoder layer at a time
    # (and prefetches the next), so FP8 copies of 2 layers exist: 2 x 2 bytes x one layer's linear
    # weights (q and o 4,096^2, k and v 4,096 x 1,024, gate, up and down 4,096 x 14,336) plus its two
    # norms (4,096 each); ZeRO-1 keeps the whole model's (Transformer Engine's per-step cache).
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    kw = dict(model=LLAMA_8B, params=None, precision="fp8_delayed", optimizer="adamw", batch_size=1,
              seq_len=4096, data_parallel=8)
    assert memory.training_memory(**kw, zero_stage=3).weight_copies == 2 * 2 * layer
    assert memory.training_memory(**kw, zero_stage=1).weight_copies == pytest.approx(2 * LINEAR_8B, rel=1e-6)
