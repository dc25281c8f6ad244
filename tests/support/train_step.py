"""The train_step probe's small models on the CPU: a base layout, quick timing, and the bytes
autograd saves per block."""

from collections import defaultdict

import torch

from app.accounting.models import TransformerConfig
from app.bench.models import Transformer

# Timing as short as the probe allows: these tests read its memory and FLOPs, not its speed.
QUICK = {"warmup_s": 0.01, "measure_s": 0.01, "min_iters": 3, "max_iters": 5}
TRAINING = "/api/v1/memory/training"
# A Llama-shaped block at toy sizes, the base the tests vary.
LLAMA = {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "mlp": "swiglu", "norm": "rmsnorm",
         "position": "rope", "bias": False, "tied_embeddings": False}


def quiet(*_):
    return None


def saved_bytes_per_layer(cfg: TransformerConfig, b: int, s: int, dtype: torch.dtype) -> list[int]:
    """Bytes autograd keeps for backward in each block's forward: distinct storages,
    parameters excluded."""
    torch.manual_seed(0)
    model = Transformer(cfg).to(dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    current: list = [None]
    seen: dict = defaultdict(dict)
    for i, block in enumerate(model.blocks):
        block.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i))
        block.register_forward_hook(lambda m, a, o: current.__setitem__(0, None))

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[current[0]][storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(cfg.vocab_size, (b, s))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids)
    return [sum(seen[i].values()) for i in range(cfg.n_layers)]
