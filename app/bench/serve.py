"""serve: a mini serving engine on the device. The simulator's scheduler (vLLM V1's rules,
app/accounting/serving/engine.py) decides each step; this runs it for real and times it:

- every scheduled token of every request in one flattened forward, (1, T) tokens, as vLLM's varlen
  batch: the projections and MLPs over all of them at once;
- each request's attention over its slot of a preallocated cache, (slots, kv_heads, longest, head_dim)
  per layer and K or V: a chunk's new keys and values written at their positions, its queries attending
  causally to every key up to them through SDPA;
- the head on each request's last token, greedy sampling over fp32 probabilities.

Time is virtual: a step lasts what it measured (forward, sampling, the host's bookkeeping between),
an idle engine jumps to the next arrival. Before serving, a spread of step compositions is timed and
fitted (app/accounting/serving/fitted.py); the simulator serves the same requests with that fit.
"""

import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F

from app.accounting.serving import catalogue as serving_catalogue
from app.accounting.serving.engine import Engine, EngineConfig, Req
from app.accounting.serving.fitted import FittedStep, pairs
from app.bench import serve_graphs
from app.bench.common import Setup, setup, to_json
from app.bench.decode import _experts
from app.bench.generate import TORCH_DTYPES
from app.bench.models import Experts, Transformer
from app.bench.timer import sync
from app.probes import serve as probe
from app.probes.serve import BLOCK_TOKENS, ServeParams, ServeResult, StepFit

Piece = tuple[int, int, int, list[int]]
"""(cache slot, first position, tokens, their ids): one request's share of a step."""
FIT_REPEATS = 7
POOR_FIT = 0.2
"""A fit's rms relative error past which the note says the fitted column is doubtful: on a quiet host
the CPU fit's error was 5-9% over five runs, and 37% with the test suite on both cores."""


def _rope(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim) at each token's own position (app/bench/models.rope_tables' rule)."""
    inv = 1.0 / 10000 ** (
        torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    )
    angles = torch.outer(positions.float(), inv)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _attend(
    attn, kc: torch.Tensor, vc: torch.Tensor, rope, pieces: list[Piece], y: torch.Tensor
) -> torch.Tensor:
    q, k, v = attn.project(y, rope)  # (1, heads, T, hd), (1, kv_heads, T, hd) x 2
    gqa = attn.kv_heads != attn.heads
    outs, off = [], 0
    for slot, start, n, _ in pieces:
        kc[slot, :, start : start + n] = k[0, :, off : off + n]
        vc[slot, :, start : start + n] = v[0, :, off : off + n]
        keys, values = kc[slot : slot + 1, :, : start + n], vc[slot : slot + 1, :, : start + n]
        mask = None
        if n > 1:  # query i (position start + i) reads keys 0 .. start + i
            mask = (
                torch.arange(start + n, device=y.device)[None, :]
                <= (start + torch.arange(n, device=y.device))[:, None]
            )
        outs.append(
            F.scaled_dot_product_attention(
                q[:, :, off : off + n], keys, values, attn_mask=mask, enable_gqa=gqa
            )
        )
        off += n
    z = torch.cat(outs, dim=2)  # (1, heads, T, hd)
    return attn.out(z.transpose(1, 2).reshape(1, off, attn.q_width))


@torch.no_grad()
def step(
    model: Transformer, cache: list[tuple[torch.Tensor, torch.Tensor]], pieces: list[Piece]
) -> list[int]:
    """One step: every piece's tokens through the model; each piece's next token (greedy)."""
    return logits(model, cache, pieces).softmax(-1).argmax(-1).tolist()


@torch.no_grad()
def logits(
    model: Transformer, cache: list[tuple[torch.Tensor, torch.Tensor]], pieces: list[Piece]
) -> torch.Tensor:
    """fp32 logits (pieces, vocab) at each piece's last token, its keys and values written to its slot."""
    device = cache[0][0].device
    ids = torch.tensor([i for *_, ids in pieces for i in ids], device=device)[None]
    positions = torch.cat([torch.arange(start, start + n, device=device) for _, start, n, _ in pieces])
    x = model.tok(ids)
    rope = None
    if model.pos is not None:
        x = x + model.pos(positions)
    else:
        rope = _rope(positions, model.cfg.hd)
    for block, (kc, vc) in zip(model.blocks, cache, strict=True):
        served = partial(_experts, block.mlp) if isinstance(block.mlp, Experts) else None
        x = block(x, rope, attend=partial(_attend, block.attn, kc, vc, rope, pieces), mlp=served)
    last = torch.tensor([n for _, _, n, _ in pieces], device=device).cumsum(0) - 1
    return model.head(model.norm(x[0, last])).float()


class Runner:
    """The engine's steps, run on the device: each request's ids and cache slot."""

    def __init__(
        self,
        env: Setup,
        model: Transformer,
        cache,
        slots: int,
        prompts: dict[int, list[int]],
        graphs: dict | None = None,
    ) -> None:
        self.env, self.model, self.cache, self.graphs = env, model, cache, graphs
        """graphs: serve_graphs' fixed-shape steps by batch size, for decode-only steps; None: varlen only."""
        self.free = list(range(slots))[::-1]
        self.slot: dict[int, int] = {}
        self.tokens = prompts
        self.prompt = {i: len(t) for i, t in prompts.items()}

    def __call__(self, scheduled: list[tuple[Req, int, int]]) -> float:
        start = time.perf_counter()
        pieces = []
        for r, n, before in scheduled:
            if r.i not in self.slot:
                self.slot[r.i] = self.free.pop()
            pieces.append((self.slot[r.i], before, n, self.tokens[r.i][before : before + n]))
        if self.graphs is not None and all(n == 1 for _, _, n, _ in pieces):
            sampled = serve_graphs.replay(self.graphs, pieces)
        else:
            sampled = step(self.model, self.cache, pieces)
        for (r, n, before), token in zip(scheduled, sampled, strict=True):
            ids = self.tokens[r.i]
            if before + n >= len(ids):  # caught up: the token is emitted
                ids.append(token)
                if len(ids) - self.prompt[r.i] >= r.max_out:
                    self.free.append(self.slot.pop(r.i))
        sync(self.env.device)
        return time.perf_counter() - start


def _warm(model: Transformer, cache, sp: probe.ServePlan) -> None:
    """Every step size the engine will run, once, before anything is timed: a GEMM shape's first run
    pays for choosing (and on a CPU, oneDNN creating) its kernel, milliseconds, which would land on
    whichever request's step met it first. vLLM likewise runs its sizes before serving (its profile
    run and graph captures). Token counts 1 to the budget (past 512, every 16th), and batches of
    1 to max_num_seqs sequences (the head's rows)."""
    budget, longest = sp.max_num_batched_tokens, sp.longest
    for tokens in sorted(set(range(1, min(budget, 512) + 1)) | set(range(512, budget + 1, 16))):
        pieces, left, slot = [], tokens, 0
        while left:  # a slot holds `longest` positions: spread a long step over several
            n = min(left, longest)
            pieces.append((slot, 0, n, [1] * n))
            left, slot = left - n, slot + 1
        step(model, cache, pieces)
    for rows in range(1, sp.max_num_seqs + 1):
        step(model, cache, [(slot, 0, 1, [1]) for slot in range(rows)])


def _compositions(sp: probe.ServePlan) -> list[list[tuple[int, int, bool]]]:
    """Steps to time for the fit, each a list of (first position, tokens, a prompt chunk): prompts of
    a few lengths, one at an offset, decodes of a few batches at two contexts, and mixes of both."""
    budget, seqs = sp.max_num_batched_tokens, sp.max_num_seqs
    short, long = max(1, sp.longest // 4), max(2, sp.longest - 1)
    prompts = sorted({min(n, budget, sp.longest) for n in (4, 16, budget // 2, budget)})
    batches = sorted({min(b, seqs) for b in (1, 2, 4, seqs // 2, seqs)})
    out = [[(0, n, True)] for n in prompts]
    out.append([(short, min(budget, sp.longest - short), True)])
    out += [[(c, 1, False)] * b for b in batches for c in (short, long)]
    out += [
        [(short, 1, False)] * (b - 1) + [(0, min(budget - b + 1, sp.longest), True)] for b in batches if b > 1
    ]
    return out


def _fit(
    env: Setup, model: Transformer, cache, sp: probe.ServePlan, graphs: dict | None
) -> tuple[FittedStep, StepFit]:
    """The step's cost fitted to the compositions timed, each run as serving runs it (decodes alone
    replayed from `graphs` when given), by least squares on the relative error."""
    comps = _compositions(sp)
    steps = [[(slot, start, n, [1] * n) for slot, (start, n, _) in enumerate(comp)] for comp in comps]
    times: list[list[float]] = [[] for _ in comps]
    # Round-robin, the first round a warm-up: a slow spell of the host falls on every composition alike.
    for round_ in range(FIT_REPEATS + 1):
        for k, pieces in enumerate(steps):
            t0 = time.perf_counter()
            if graphs is not None and all(n == 1 for _, _, n, _ in pieces):
                serve_graphs.replay(graphs, pieces)
            else:
                step(model, cache, pieces)
            sync(env.device)
            if round_:
                times[k].append(time.perf_counter() - t0)
    rows = []
    for comp in comps:
        row = [
            1.0,
            sum(n for _, n, _ in comp),
            len(comp),
            sum(s for s, _, _ in comp),
            sum(pairs(s + n) - pairs(s) for s, n, chunk in comp if chunk),
        ]
        if graphs is not None:  # a decode-only step replays a graph: its own offset
            row.append(float(not any(chunk for *_, chunk in comp)))
        rows.append(row)
    seconds = [statistics.median(t) for t in times]
    a = torch.tensor(rows, dtype=torch.float64)
    b = torch.tensor(seconds, dtype=torch.float64)
    w = 1 / b  # relative error: every composition counts alike, short steps as long ones
    coef = torch.linalg.lstsq(a * w[:, None], (b * w)[:, None]).solution.flatten().tolist()
    errors = [
        sum(c * x for c, x in zip(coef, r, strict=False)) / s - 1 for r, s in zip(rows, seconds, strict=True)
    ]
    rms = (sum(e * e for e in errors) / len(errors)) ** 0.5
    alone = coef[5] if graphs is not None else 0.0
    return FittedStep(*coef[:5], per_decode_only_s=alone), StepFit(*coef[:5], len(rows), rms, alone)


def _latency(sp: probe.ServePlan, served: list[Req], steps) -> probe.ServeLatency:
    return probe.latency(
        [r.first for r in served],
        [r.finish for r in served],
        list(sp.requests.arrival_s),
        list(sp.requests.output_tokens),
        len(steps.seconds),
    )


def _simulated(sp: probe.ServePlan, config: EngineConfig, model) -> probe.ServeLatency:
    """The simulator on the same requests, each step timed by `model`."""
    twins = _requests(sp)
    return _latency(sp, twins, Engine(config, model).run(twins))


def _requests(sp: probe.ServePlan) -> list[Req]:
    reqs = sp.requests
    return [Req(i, reqs.arrival_s[i], reqs.prompt_tokens[i], reqs.output_tokens[i]) for i in range(len(reqs))]


def run(raw: dict, progress) -> dict:
    p, env = setup(ServeParams, raw)
    sp = probe.plan(p, env.cuda)
    dtype, device, cfg = TORCH_DTYPES[sp.dtype], env.device, sp.config
    with torch.device(device):
        model = Transformer(cfg).to(dtype).eval()
        shape = (sp.max_num_seqs + 1, cfg.kv_heads, sp.longest, cfg.hd)  # the last: graphs' padding rows
        cache = [
            (torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(cfg.n_layers)
        ]
    graphed = env.cuda if p.graphs is None else p.graphs
    graphs = serve_graphs.prepare(model, cache, sp.max_num_seqs, env.cuda) if graphed else None
    progress(0, 3, "warming every step size, then timing step compositions for the fit")
    _warm(model, cache, sp)
    fitted, fit = _fit(env, model, cache, sp, graphs)
    config = EngineConfig(
        max_num_seqs=sp.max_num_seqs,
        max_num_batched_tokens=sp.max_num_batched_tokens,
        block_size=BLOCK_TOKENS,
        num_blocks=sp.num_blocks,
        blocks_for=lambda c: -(-c // BLOCK_TOKENS),
        prefix_caching=False,
    )
    gen = torch.Generator().manual_seed(p.seed)
    prompts = {
        i: torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()
        for i, n in enumerate(sp.requests.prompt_tokens)
    }
    progress(1, 3, f"serving {len(sp.requests)} requests")
    served = _requests(sp)
    runner = Runner(env, model, cache, sp.max_num_seqs, prompts, graphs)
    engine = Engine(config, fitted, execute=runner)  # type: ignore[arg-type]
    measured_steps = engine.run(served)
    progress(2, 3, "simulating the same requests")
    measured = _latency(sp, served, measured_steps)
    simulated = _simulated(sp, config, fitted)
    acc = env.catalogue()
    catalogue = None
    if acc is not None:  # Tally's own step for this GPU, launched as this engine launches
        catalogue = _simulated(sp, config, serving_catalogue.served(cfg, acc, sp.dtype, graphs=graphed))
    progress(3, 3, "done")
    return to_json(
        ServeResult(
            probe="serve",
            environment=env.environment(p.seed),
            model=sp.name,
            params=sp.params,
            dtype=sp.dtype,
            requests=len(served),
            rate_per_s=sp.rate_per_s,
            max_num_seqs=sp.max_num_seqs,
            max_num_batched_tokens=sp.max_num_batched_tokens,
            measured=measured,
            simulated=simulated,
            fit=fit,
            ttft_p50_ratio=simulated.ttft_p50 / measured.ttft_p50,
            tpot_p50_ratio=simulated.tpot_p50 / measured.tpot_p50,
            notes=[
                f"Time is virtual: {len(measured_steps.seconds):,} steps took "
                f"{sum(measured_steps.seconds):.3g} s of the device; idle time between arrivals is skipped.",
                "simulated (fitted step): the simulator with the step cost fitted before serving (the fit "
                "table). "
                + (
                    "simulated (catalogue): with Tally's own step model for this GPU, uncalibrated."
                    if catalogue
                    else "No catalogue model: this device is not a catalogue GPU."
                ),
                *([f"The fit is poor ({fit.rms_relative_error:.0%} rms over its compositions, above "
                   f"{POOR_FIT:.0%}): the host was busy, or steps do not follow the fit's form; the fitted "
                   "column is doubtful."] if fit.rms_relative_error > POOR_FIT else []),
            ],
            catalogue=catalogue,
            graphs=graphed,
            catalogue_ttft_p50_ratio=None if catalogue is None else catalogue.ttft_p50 / measured.ttft_p50,
            catalogue_tpot_p50_ratio=None if catalogue is None else catalogue.tpot_p50 / measured.tpot_p50,
        )
    )
