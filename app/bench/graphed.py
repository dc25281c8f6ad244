"""A decode step that runs like an engine's: fixed shapes, so it can be captured once and replayed.

gpt-fast's recipe (pytorch-labs/gpt-fast, generate.py and model.py): a preallocated cache that
attention reads whole under a mask, the position a device tensor (the cache written with
index_copy_, RoPE read from a table at that index), sampling on the device, the next token
written back into the step's own input, so N replays decode N tokens with no host sync. Here
the step is captured as a CUDA graph (torch.cuda.CUDAGraph) on CUDA, and compiled with
torch.compile where there is no GPU and a C compiler is present (the CPU's inductor backend),
else run as is: the same fixed-shape code on every device, so the CPU suite tests it.

The step reads every slot of each layer's cache (the mask hides those not yet written), as
gpt-fast's does: at the last timed step of a run, exactly the context the roofline counts.
Dense key/value attention only: latent attention's absorbed decode and the experts' routing
(decode.py) are data-dependent and stay eager.
"""

import shutil
from collections.abc import Callable
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F

from app.bench.decode import Cache, LayerCache, prefill, sample
from app.bench.models import Attention, Transformer, rope_tables

Capture = Literal["cuda_graph", "torch.compile", "static eager"]


class StaticDecode:
    """One decode step of `batch` sequences over `cache`, with its inputs in device tensors."""

    def __init__(self, model: Transformer, cache: Cache, batch: int) -> None:
        self.model, self.cache = model, cache
        device = next(model.parameters()).device
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        """Position of the token in `ids`; the step advances it."""
        self.rope = None
        if model.pos is None:  # RoPE: the model's whole table once (max_seq_len rows), read at pos
            self.rope = rope_tables(model.cfg.max_seq_len, model.cfg.hd, device)
        self.slots = {n: torch.arange(n, device=device) for n in {layer.slots for layer in cache.layers}}

    def start(self, ids: torch.Tensor, position: int) -> None:
        """Feed `ids` (B, 1) at `position` next: device copies, nothing captured is replaced."""
        self.ids.copy_(ids)
        self.pos.fill_(position)

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        model = self.model
        x = model.tok(self.ids)
        if model.pos is not None:
            x = x + model.pos(self.pos)
        rope = None if self.rope is None else (self.rope[0][self.pos], self.rope[1][self.pos])  # (1, hd)
        for block, layer in zip(model.blocks, self.cache.layers, strict=True):
            x = block(x, rope, attend=partial(self._attend, block.attn, layer, rope))
        nxt = sample(model.head(model.norm(x[:, -1])).float())
        self.ids.copy_(nxt)
        self.pos.add_(1)
        return nxt

    def _attend(self, attn: Attention, layer: LayerCache, rope, y: torch.Tensor) -> torch.Tensor:
        b = y.shape[0]
        q, k, v = attn.project(y, rope)  # (B, h, 1, hd), (B, kv_heads, 1, hd) x 2
        kc, vc = layer.tensors
        slot = self.pos % layer.slots  # a ring in a windowed layer, as decode.py keeps it
        kc.index_copy_(2, slot, k)
        vc.index_copy_(2, slot, v)
        # slot j holds position j until the ring wraps, and a live position after: all read then
        seen = (self.slots[layer.slots] <= self.pos).view(1, 1, 1, layer.slots)
        group = q.reshape(b, attn.kv_heads, attn.heads // attn.kv_heads, attn.hd)
        z = F.scaled_dot_product_attention(group, kc, vc, attn_mask=seen)  # (B, kv_heads, group, hd)
        return attn.out(z.reshape(b, 1, attn.q_width))


def cuda_graph(step: Callable[[], object]) -> Callable[[], object]:
    """`step` captured as a CUDA graph, its replay returned: warmed up off the default stream first,
    as torch.cuda.graphs asks. The warm-up and the capture run the step (its writes land)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def compiler_present() -> bool:
    return shutil.which("cc") is not None or shutil.which("gcc") is not None


@torch.no_grad()
def prepare(static: StaticDecode, cuda: bool) -> tuple[Callable[[], object], Capture]:
    """The step as it will be replayed, and how it was made. Warming up and capturing run the step,
    which writes the cache: it is put back as it was, as are the step's inputs."""
    ids, pos = static.ids.clone(), static.pos.clone()
    kept = [t.clone() for t in static.cache.tensors()]
    if cuda:
        run, how = cuda_graph(static.step), "cuda_graph"
    elif compiler_present():
        compiled = torch.compile(static.step, fullgraph=True, dynamic=False)
        compiled()  # compiles
        run, how = compiled, "torch.compile"
    else:
        run, how = static.step, "static eager"
    for tensor, saved in zip(static.cache.tensors(), kept, strict=True):
        tensor.copy_(saved)
    static.start(ids, int(pos))
    return run, how


def compiled_prefill(cuda: bool) -> tuple[Callable[..., torch.Tensor], Capture]:
    """decode.prefill compiled on its own, as gpt-fast's --compile_prefill does: torch.compile with
    fixed shapes (one build per prompt length; no CUDA graph, a prefill is long enough to hide its
    launches), or decode.prefill itself where there is no compiler. Called as decode.prefill is."""
    if cuda or compiler_present():
        return torch.compile(prefill, dynamic=False), "torch.compile"
    return prefill, "static eager"


@torch.no_grad()
def decode(run: Callable[[], object], static: StaticDecode, ids: torch.Tensor, start: int,
           steps: int) -> torch.Tensor:
    """`steps` tokens per sequence from `ids` at position `start`, replaying the prepared step."""
    static.start(ids, start)
    for _ in range(steps):
        run()
    return static.ids
