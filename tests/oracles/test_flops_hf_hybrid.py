"""FLOPs of the hybrid families against FlopCounterMode on small CPU models transformers 5.23 builds from
the same config.json, forward and backward at two sequence lengths, through transformers' torch paths (no
fla or mamba_ssm kernels here), with eager attention and eager experts.

FlopCounterMode counts a depthwise conv1d's weight gradient as a dense convolution (its conv_backward
formula ignores groups), channels^2 x K where the work is channels x K; Tally counts the depthwise one,
so the counter's backward is Tally's plus exactly that, layer by layer.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from app.accounting.hf import import_config
from tests.oracles.test_hf_hybrid import IMPORT, built
from tests.support.conv_flops import depthwise_excess
from tests.support.hf_configs_hybrid import SMALL, random_configs
from tests.support.hf_oracle import one_thread


def counted(config: dict, batch: int, seq: int) -> tuple[int, int]:
    with one_thread():
        torch.manual_seed(0)
        cfg, model = built(config, "cpu")
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        with FlopCounterMode(display=False) as forward:
            logits = model(input_ids=ids, use_cache=False).logits
        with FlopCounterMode(display=False) as backward:
            logits.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops()


def dense_conv_excess(config: dict, batch: int, seq: int) -> int:
    return depthwise_excess(import_config(config).config, batch, seq)


def tally(api, config: dict, batch: int, seq: int) -> dict:
    model = api.ok(IMPORT, config)["config"]
    return api.ok(
        "/api/v1/flops/transformer", {"model": model, "batch_size": batch, "seq_len": seq, "causal": "full"}
    )


@pytest.mark.parametrize("seq", [37, 70])  # neither divides DeltaNet's 64-token chunks nor Bamba's 16
@pytest.mark.parametrize("family", list(SMALL))
def test_hybrid_flops_are_flop_counter_modes(api, family, seq):
    config = SMALL[family]
    answer = tally(api, config, 2, seq)
    forward, backward = counted(config, 2, seq)
    assert answer["forward"]["total"] == forward
    assert answer["backward"]["total"] + dense_conv_excess(config, 2, seq) == backward
    assert answer["forward"]["mixer_scan"] > 0


@pytest.mark.parametrize("config", random_configs(2, 43), ids=lambda c: c["model_type"])
def test_random_hybrid_flops_are_flop_counter_modes(api, config):
    for seq in (20, 45):
        answer = tally(api, config, 1, seq)
        forward, backward = counted(config, 1, seq)
        assert answer["forward"]["total"] == forward
        assert answer["backward"]["total"] + dense_conv_excess(config, 1, seq) == backward
