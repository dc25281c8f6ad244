"""Gemma 3's sliding window as transformers 5.23 reads it: with use_bidirectional_attention,
Gemma3TextConfig turns sliding_window w into w // 2 + 1 (the mask is then |i - j| < that, both
ways), and the import reads the same window. Checked against the config object transformers
builds (gemma3_text, and gemma3's text_config) and against the mask its sliding layers receive.
The cache those layers keep is checked in test_kv_cache_hf.py."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from app.accounting.hf import import_config
from tests.support.api import assert_names_field
from tests.support.hf_configs_dense import SMALL

TEXT = SMALL["gemma3_text"]  # 7 layers, every 3rd global, sliding_window 16
IMPORT = "/api/v1/models/import"


def hf_config(raw: dict):
    return AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"})


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("window", [16, 9, 4, None], ids=["16", "9", "4", "absent"])
def test_the_window_is_the_one_transformers_configs_hold(bidirectional, window):
    text = {k: v for k, v in TEXT.items() if k != "sliding_window"}
    text["use_bidirectional_attention"] = bidirectional
    if window is not None:
        text["sliding_window"] = window
    theirs = hf_config(text).sliding_window  # absent: 4096 (bidirectional: 2049)
    assert import_config(text).config.sliding_window == theirs
    if bidirectional:
        assert theirs == (window or 4096) // 2 + 1
    wrapped = SMALL["gemma3"] | {"text_config": {k: v for k, v in text.items() if k != "model_type"}}
    assert hf_config(wrapped).text_config.sliding_window == theirs
    assert import_config(wrapped).config.sliding_window == theirs


@pytest.mark.parametrize("bidirectional", [False, True])
def test_the_window_is_what_the_sliding_layers_mask_keeps(bidirectional):
    # A 20-token prompt, longer than either window: each sliding layer's last query attends to
    # the window's tokens at or before it (and, bidirectional, to none after: it is the last).
    raw = TEXT | {"sliding_window": 8, "use_bidirectional_attention": bidirectional}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(raw), attn_implementation="eager").eval()
    masks: dict[int, torch.Tensor] = {}
    for i, layer in enumerate(model.model.layers):
        layer.self_attn.register_forward_pre_hook(
            lambda _m, _a, kwargs, i=i: masks.__setitem__(i, kwargs["attention_mask"]), with_kwargs=True)
    with torch.no_grad():
        model(torch.randint(0, raw["vocab_size"], (1, 20)))
    allowed = {i: mask[0, 0] == 0 for i, mask in masks.items()}  # eager: additive, 0 where attended
    ours = import_config(raw).config
    sliding = [i for i, windowed in enumerate(ours.windowed_layers) if windowed]
    assert sliding == [i for i, t in enumerate(model.config.layer_types) if t == "sliding_attention"]
    assert {int(allowed[i][-1].sum()) for i in sliding} == {ours.sliding_window}  # 8, or 8 // 2 + 1
    # Bidirectional, a middle query reads window - 1 tokens either side of itself.
    both_ways = 2 * ours.sliding_window - 1 if bidirectional else ours.sliding_window
    assert {int(allowed[i][10].sum()) for i in sliding} == {both_ways}


def test_a_null_window_cannot_be_halved(api):
    raw = TEXT | {"sliding_window": None, "use_bidirectional_attention": True}
    with pytest.raises(TypeError):  # transformers' __post_init__: None // 2
        hf_config(raw)
    assert_names_field(api.post(IMPORT, raw), "sliding_window")
    wrapped = SMALL["gemma3"] | {"text_config": {k: v for k, v in raw.items() if k != "model_type"}}
    assert_names_field(api.post(IMPORT, wrapped), "text_config.sliding_window")
