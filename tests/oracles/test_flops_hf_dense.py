"""FLOPs of the dense families' imported configs, exact against FlopCounterMode on the transformers
model built from the same config.json (meta device, eager attention, which computes every score,
window or not): forward and backward at two sequence lengths, one above the configs' 16-token
windows. gemma3 runs its text model, Gemma3ForCausalLM from text_config."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

from tests.support.hf_configs_dense import SMALL


def counted(config: dict, batch: int, seq: int) -> tuple[int, int]:
    """(forward, backward) FLOPs FlopCounterMode counts for one training step's passes."""
    if config["model_type"] == "gemma3":
        config = {"model_type": "gemma3_text", **config["text_config"]}
    fields = {k: v for k, v in config.items() if k != "model_type"}
    cfg = AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        logits = model(input_ids=ids).logits
    with FlopCounterMode(display=False) as backward:
        logits.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops()


@pytest.mark.parametrize("seq", [32, 96])
@pytest.mark.parametrize("name", list(SMALL))
def test_imported_config_flops_match_flop_counter_mode(api, name, seq):
    config = api.ok("/api/v1/models/import", SMALL[name])["config"]
    answer = api.ok("/api/v1/flops/transformer", {"model": config, "batch_size": 2, "seq_len": seq,
                                                  "causal": "full"})
    forward, backward = counted(SMALL[name], 2, seq)
    assert answer["forward"]["total"] == forward
    assert answer["backward"]["total"] == backward
