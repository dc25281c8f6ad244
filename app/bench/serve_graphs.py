"""The serve probe's decode steps with fixed shapes, so a CUDA graph can replay them (vLLM captures its
decode batches at fixed sizes and pads a step up to the next one: vllm/config/compilation.py's
cudagraph_capture_sizes). One graph per batch size of BUCKETS up to max_num_seqs; a decode-only step of
b requests replays the smallest that holds b, its extra rows a padding slot's.

Each row carries its own request's slot and position as device tensors: the new key and value are
written at (slot, position), and attention reads the row's whole slot under a mask of the positions
written so far (gpt-fast's recipe, app/bench/graphed.py, per row). A step's prompt chunks stay on the
varlen path (app/bench/serve.py): their shapes vary with every step.

On CUDA the step is captured (torch.cuda.CUDAGraph) before serving; elsewhere it runs as is, eagerly
with the same fixed shapes, which is how the CPU suite checks it computes what the varlen path does.
"""

from functools import partial

import torch
import torch.nn.functional as F

from app.bench import graphed
from app.bench.models import Transformer, rope_tables

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def sizes(max_num_seqs: int) -> list[int]:
    """The batch sizes to capture: BUCKETS below max_num_seqs, and max_num_seqs itself."""
    return sorted({b for b in BUCKETS if b < max_num_seqs} | {max_num_seqs})


class StaticStep:
    """A decode step of `rows` requests over the slot cache; its inputs live in device tensors."""

    def __init__(self, model: Transformer, cache: list[tuple[torch.Tensor, torch.Tensor]], rows: int) -> None:
        self.model, self.cache, self.rows = model, cache, rows
        kc = cache[0][0]
        device, self.longest = kc.device, kc.shape[2]
        self.pad = kc.shape[0] - 1
        """The last slot: padding rows write and read it, no request's."""
        self.ids = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(rows, dtype=torch.long, device=device)
        self.slot = torch.full((rows,), self.pad, dtype=torch.long, device=device)
        self.out = torch.zeros(rows, dtype=torch.long, device=device)
        self.keys = torch.arange(self.longest, device=device)
        self.rope = None if model.pos is not None else rope_tables(self.longest, model.cfg.hd, device)
        self.run = self.step

    def load(self, pieces: list[tuple[int, int, int, list[int]]]) -> None:
        """Each decode piece (slot, position, 1, [its token]) into a row; the rest padding."""
        n = len(pieces)
        rows = pieces + [(self.pad, 0, 1, [0])] * (self.rows - n)
        self.ids.copy_(torch.tensor([[p[3][0]] for p in rows]))
        self.pos.copy_(torch.tensor([p[1] for p in rows]))
        self.slot.copy_(torch.tensor([p[0] for p in rows]))

    @torch.no_grad()
    def step(self) -> None:
        model = self.model
        x = model.tok(self.ids)  # (rows, 1, d)
        if model.pos is not None:
            x = x + model.pos(self.pos)[:, None]
        rope = None
        if self.rope is not None:  # each row at its own position: (rows, 1, 1, hd) against q (rows, h, 1, hd)
            rope = (self.rope[0][self.pos][:, None, None], self.rope[1][self.pos][:, None, None])
        for block, (kc, vc) in zip(model.blocks, self.cache, strict=True):
            x = block(x, rope, attend=partial(self._attend, block.attn, kc, vc, rope))
        logits = model.head(model.norm(x[:, -1])).float()
        self.out.copy_(logits.softmax(-1).argmax(-1))

    def _attend(self, attn, kc: torch.Tensor, vc: torch.Tensor, rope, y: torch.Tensor) -> torch.Tensor:
        rows = y.shape[0]
        q, k, v = attn.project(y, rope)  # (rows, h, 1, hd), (rows, kv_heads, 1, hd) x 2
        kc[self.slot, :, self.pos] = k[:, :, 0]
        vc[self.slot, :, self.pos] = v[:, :, 0]
        seen = (self.keys[None, :] <= self.pos[:, None]).view(rows, 1, 1, self.longest)
        group = q.reshape(rows, attn.kv_heads, attn.heads // attn.kv_heads, attn.hd)
        z = F.scaled_dot_product_attention(group, kc[self.slot], vc[self.slot], attn_mask=seen)
        return attn.out(z.reshape(rows, 1, attn.q_width))


def prepare(model: Transformer, cache, max_num_seqs: int, cuda: bool) -> dict[int, StaticStep]:
    """A fixed-shape step for each batch size; captured on CUDA."""
    steps = {rows: StaticStep(model, cache, rows) for rows in sizes(max_num_seqs)}
    if cuda:  # the padding rows' writes land in the padding slot
        for step in steps.values():
            step.run = graphed.cuda_graph(step.step)
    return steps


def replay(steps: dict[int, StaticStep], pieces: list[tuple[int, int, int, list[int]]]) -> list[int]:
    """A decode-only step through the smallest fixed size holding it; each piece's next token."""
    rows = min(r for r in steps if r >= len(pieces))
    step = steps[rows]
    step.load(pieces)
    step.run()
    return step.out[: len(pieces)].tolist()
