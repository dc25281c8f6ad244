"""FLOPs of imported mixture-of-experts configs, exact against FlopCounterMode on the model
transformers builds from the same config.json: forward and backward, at two sequence lengths.

Routing needs real numbers (the experts loop picks its tokens with nonzero(), which the meta
device cannot run), so these small models are built on the CPU with random weights. Attention
is eager (every score computed) and so are the experts (`experts_implementation="eager"`, the
@use_experts_implementation dispatch in transformers/integrations/moe.py: one matmul pair per
expert over the tokens routed to it, not grouped_mm). Tally's convention, dropless routing with
routed FLOPs = tokens x top_k x one expert MLP, is then exact whatever the router picks."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from tests.support.hf_configs_moe import LLAMA4_SMALL, random_configs
from tests.support.hf_configs_moe import SMALL as CONFIGS
from tests.support.hf_oracle import one_thread


def counted(config: dict, batch: int, seq: int, seed: int = 0) -> tuple[int, int, list[list[int]]]:
    """(forward, backward) FLOPs FlopCounterMode counts for one training step's passes, and the
    tokens each router sent to each expert."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with one_thread():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                 experts_implementation="eager")
        loads = []
        for module in model.modules():
            if type(module).__name__.lower().endswith("topkrouter"):  # returns (logits, weights, indices)
                module.register_forward_hook(
                    lambda m, args, out: loads.append(
                        torch.bincount(out[2].flatten(), minlength=m.num_experts).tolist()))
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        with FlopCounterMode(display=False) as forward:
            logits = model(input_ids=ids).logits
        with FlopCounterMode(display=False) as backward:
            logits.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops(), loads


def tally(api, config: dict, batch: int, seq: int) -> dict:
    model = api.ok("/api/v1/models/import", config)["config"]
    return api.ok("/api/v1/flops/transformer", {"model": model, "batch_size": batch, "seq_len": seq,
                                                "causal": "full"})


@pytest.mark.parametrize("seq", [32, 96])
@pytest.mark.parametrize("family", list(CONFIGS))
def test_imported_moe_flops_match_flop_counter_mode(api, family, seq):
    answer = tally(api, CONFIGS[family], 2, seq)
    forward, backward, _ = counted(CONFIGS[family], 2, seq)
    assert answer["forward"]["total"] == forward
    assert answer["backward"]["total"] == backward
    # Every matmul here needs both operand gradients, the router's too (its softmax or sigmoid
    # scores weight the experts' outputs), so backward is exactly twice the forward.
    assert backward == 2 * forward
    parts = answer["forward"]
    assert parts["router"] > 0 and parts["routed_experts"] > 0
    shared = ("qwen2_moe", "deepseek_v2", "deepseek_v3", "glm4_moe")
    assert (parts["shared_experts"] > 0) == (family in shared)
    assert (parts["attention_latent"] > 0) == family.startswith("deepseek")


@pytest.mark.parametrize("seq", [32, 96])
def test_llama4_eager_experts_run_every_expert_and_tally_counts_the_routed_ones(api, seq):
    """transformers' Llama 4 runs each MoE layer's tokens through every expert (its bmm over
    num_local_experts copies, the unrouted ones weighted zero), so FlopCounterMode counts
    n_experts / top_k times the expert FLOPs dropless routing does: exactly that much more here."""
    config = LLAMA4_SMALL
    answer = tally(api, config, 2, seq)
    forward, backward, _ = counted(config, 2, seq)
    tokens, d, f = 2 * seq, config["hidden_size"], config["intermediate_size"]
    unrouted = config["num_local_experts"] - config["num_experts_per_tok"]
    moe_layers = 2  # 1 and 3: interleave_moe_layer_step 2
    extra = moe_layers * unrouted * tokens * 2 * d * f * 3  # gate, up and down of each unrouted copy
    assert answer["forward"]["total"] + extra == forward
    assert backward == 2 * forward
    assert answer["forward"]["shared_experts"] == moe_layers * tokens * 2 * d * f * 3


@pytest.mark.parametrize(("seq", "chunk"), [(1, 4), (7, 4), (8, 4), (37, 8), (100, 16)])
def test_chunked_pairs_are_transformers_chunked_causal_mask(seq, chunk):
    """causal='halved' counts L^2/2 pairs for each chunk of L tokens: the pairs transformers' chunked
    causal mask lets through (key in the query's chunk, not after it), their diagonal's L/2 left out
    as the causal convention does."""
    from transformers.masking_utils import chunked_causal_mask_function

    from app.accounting.blocks import Chunked, GroupedAttention
    from app.accounting.models import preset

    allowed = chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.long))
    t = torch.tensor
    seen = sum(bool(allowed(t(0), t(0), t(q), t(k))) for q in range(seq) for k in range(seq))
    cfg = preset("llama4-scout")
    block = Chunked(cfg, GroupedAttention(cfg), chunk)
    assert block.pairs_doubled(seq, "halved") == 2 * seen - seq
    assert block.pairs_doubled(seq, "full") == 2 * seq * seq
    # The token at position c reads the keys of its chunk up to itself.
    assert [block.tokens_kept(c) for c in range(1, seq + 1)] == \
        [sum(bool(allowed(t(0), t(0), t(c - 1), t(k))) for k in range(seq)) for c in range(1, seq + 1)]


def test_routed_flops_do_not_depend_on_where_tokens_go(api):
    # Other weights and tokens load the experts differently; dropless, the count stays
    # tokens x top_k expert MLPs, as Tally counts it.
    config = CONFIGS["mixtral"]
    runs = [counted(config, 2, 32, seed) for seed in (0, 1)]
    assert runs[0][2] != runs[1][2] and all(sum(load) == 64 * 2 for run in runs for load in run[2])
    assert runs[0][:2] == runs[1][:2]
    assert tally(api, config, 2, 32)["forward"]["total"] == runs[0][0]


@pytest.mark.parametrize("config", random_configs(3, 29), ids=lambda c: c["model_type"])
def test_random_configs_flops_match_flop_counter_mode(api, config):
    for seq in (32, 96):
        answer = tally(api, config, 2, seq)
        assert (answer["forward"]["total"], answer["backward"]["total"]) == counted(config, 2, seq)[:2]
