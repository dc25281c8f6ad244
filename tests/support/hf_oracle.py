"""The parameter count transformers itself gives a config.json: the oracle the
import is checked against. Tests only; the server never imports transformers.

The model is built on the meta device, so no weights are allocated and even a
671B config is counted in well under a second.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def hf_param_count(config: dict[str, Any]) -> int:
    """Parameters of the causal LM transformers builds from `config` (tied
    weights counted once, as model.parameters() yields a shared tensor once)."""
    body = dict(config)
    cfg = AutoConfig.for_model(body.pop("model_type"), **body)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread, put back after: matrices this small run several times faster so."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
