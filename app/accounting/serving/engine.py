"""One serving replica's scheduler, step by step, as vLLM V1 runs it (vllm/v1/core/sched/scheduler.py
`Scheduler.schedule` and `update_from_output`, kv_cache_manager.py `allocate_slots`, vLLM 0.11.0).

Each request has only its tokens (prompt, then outputs) and how many of them are computed; every step
gives each request the tokens that catch it up, within the step's token budget:
- Running requests first, in the order they were admitted, each min(tokens owed, budget left) (a
  long prompt is chunked by what the budget leaves). A request whose blocks cannot be allocated
  preempts the last running request (recompute: its blocks are freed, its computed tokens reset,
  and it goes to the front of the waiting queue), until it fits or preempted itself.
- Then, only if nothing was preempted, waiting requests in arrival order while fewer than
  max_num_seqs run and budget is left; the first whose blocks cannot be allocated stops admission.
  A new or resumed request first takes its cached prefix, in whole blocks and never its last token.
- A request emits a token when the step covers its last owed token (a partial prefill emits none):
  its first token at the end of the step with its prompt's last chunk. With speculative decoding a
  decoding request is owed 1 + k tokens (its drafts); the accepted drafts and one more are emitted,
  the rejected ones rolled back. Blocks of a finished request are freed at the end of its step.
- Blocks: a request holds blocks_for(computed + scheduled + lookahead) of them (vLLM's cdiv over the
  block size; for a hybrid or windowed model, what its layers hold as vLLM pages them).

Between events the engine often runs many decode steps alike (every request decoding, nothing to
admit): runs.py runs them together, without the scheduler's bookkeeping.
"""

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from app.accounting.serving import runs
from app.accounting.serving.pool import BlockPool
from app.accounting.serving.prefix import PrefixCache
from app.accounting.serving.steps import Drafter, StepModel


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    """Tokens a block holds: prefix hits are whole blocks of it."""
    num_blocks: int
    blocks_for: Callable[[int], int]
    """Blocks one sequence holds at a context (its pages in every layer, any state included)."""
    chunked_prefill: bool = True
    prefix_caching: bool = True
    prefix_hit_rate: float | None = None
    """A share of every prompt found cached (in whole blocks), held elsewhere: the request computes and
    allocates only the rest. None: hits come from what this replica really cached."""
    long_prefill_token_threshold: int = 0


class Req:
    __slots__ = (
        "i",
        "arrival",
        "prompt",
        "max_out",
        "group",
        "remote",
        "computed",
        "out",
        "blocks",
        "shared",
        "own_from",
        "in_group",
        "first",
        "finish",
        "preemptions",
    )

    def __init__(
        self, i: int, arrival: float, prompt: int, max_out: int, group: int = -1, remote: bool = False
    ) -> None:
        self.i, self.arrival, self.prompt, self.max_out, self.group = i, arrival, prompt, max_out, group
        self.remote = remote
        """Its prompt's cache arrives from a prefill instance (disaggregated): the last token is computed
        here."""
        self.computed = self.out = self.blocks = self.shared = self.own_from = self.preemptions = 0
        self.in_group = False
        self.first = self.finish = -1.0


@dataclass
class Series:
    """Per step: when it started, how long it took, and the queue and cache after scheduling."""

    start_s: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    blocks_used: list[int] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    drafts: int = 0
    accepted: int = 0
    draft_steps: int = 0
    """Steps of a request that carried drafts, summed over requests."""


class Engine:
    def __init__(
        self,
        cfg: EngineConfig,
        step: StepModel,
        *,
        drafter: Drafter | None = None,
        seed: int = 0,
        release_after: Callable[[Req, float], float] | None = None,
        give_up_waiting: int | None = None,
        execute: Callable[[list[tuple[Req, int, int]]], float] | None = None,
        batch_runs: bool = True,
    ) -> None:
        self.cfg, self.step, self.drafter = cfg, step, drafter
        self.rng = random.Random(seed)
        self.release_after = release_after
        """Disaggregated prefill: when a finished request's blocks are freed (its KV sent)."""
        self.pool = BlockPool(cfg.num_blocks)
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.prefix = PrefixCache(cfg, self.pool, 0)
        self.held: list[tuple[float, int, Req]] = []
        self.series = Series()
        self.head_blocked = False
        """The waiting queue's head could not get its blocks; it stays so until blocks are freed."""
        self.preempted = False
        self.give_up_waiting = give_up_waiting
        """Stop once more requests than this wait: past saturation, where only "saturated" is asked."""
        self.gave_up = False
        self.execute = execute
        self.batch_runs = batch_runs
        """Run identical decode steps together (runs.py); off, every step is scheduled alone (the tests'
        reference: the same times either way)."""
        """The serve probe: runs each scheduled step on a device and says how long it took; the step
        model then only counts tokens (time comes from the device)."""

    def run(self, reqs: list[Req], prefix_tokens: int = 0) -> Series:
        """Serve `reqs` (in arrival order) to the end; each gets its first-token and finish times."""
        self.prefix = PrefixCache(self.cfg, self.pool, prefix_tokens)
        now, nxt, total = 0.0, 0, len(reqs)
        while nxt < total or self.waiting or self.running:
            while nxt < total and reqs[nxt].arrival <= now:
                self.waiting.append(reqs[nxt])
                nxt += 1
            if self.give_up_waiting is not None and len(self.waiting) > self.give_up_waiting:
                self.gave_up = True
                break
            while self.held and self.held[0][0] <= now:
                self._free(heapq.heappop(self.held)[2], finished=True)
            if not self.running and not self.waiting:
                now = reqs[nxt].arrival
                continue
            upcoming = reqs[nxt].arrival if nxt < total else float("inf")
            if self.batch_runs and runs.can_run(self):
                now = runs.run(self, now, upcoming)
                continue
            scheduled, spec = self._schedule()
            if not scheduled and self.preempted:  # every running request was preempted: admit next step
                continue
            if not scheduled:  # nothing fits until held blocks are freed
                waits = [t for t in (upcoming, self.held[0][0] if self.held else None) if t is not None]
                if not waits or min(waits) == float("inf"):
                    raise RuntimeError(
                        "a request can never be scheduled: it needs more blocks than the cache"
                    )
                now = max(now, min(waits))
                continue
            now = self._finish_step(now, scheduled, spec)
        return self.series

    # ---- one step ---------------------------------------------------------------------------------

    def _schedule(self) -> tuple[list[tuple[Req, int, int]], int]:
        """(request, tokens, computed before) of each scheduled request, and the drafts scheduled."""
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        k = self.drafter.tokens if self.drafter else 0
        scheduled: list[tuple[Req, int, int]] = []
        drafts = 0
        preempted = False
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            owed = r.prompt + r.out - r.computed
            spec = k if r.out and owed == 1 else 0
            n = min(owed + spec, budget)
            if 0 < cfg.long_prefill_token_threshold < n:
                n = cfg.long_prefill_token_threshold
            need = cfg.blocks_for(r.computed + n + (k if r.out else 0)) - r.shared - r.blocks
            while need > self.pool.free:
                victim = running.pop()
                self._free(victim, finished=False)
                preempted = True
                if victim is r:
                    break
            else:
                if need > 0:
                    self.pool.take(need)
                    r.blocks += need
                scheduled.append((r, n, r.computed))
                drafts += max(0, n - owed)
                budget -= n
                i += 1
                continue
            break
        self.head_blocked = False
        self.preempted = preempted
        if not preempted:
            self._admit(budget, scheduled)
        return scheduled, drafts

    def _admit(self, budget: int, scheduled: list[tuple[Req, int, int]]) -> None:
        cfg, waiting, pool = self.cfg, self.waiting, self.pool
        skipped: list[Req] = []
        while waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            r = waiting[0]
            hit, group_hit, own_hit, touch = self.prefix.lookup(r)
            owed = r.prompt + r.out - hit
            if not cfg.chunked_prefill and owed > budget:  # vLLM 0.11: skip it, try the next
                skipped.append(waiting.popleft())
                continue
            n = min(owed, budget)
            if 0 < cfg.long_prefill_token_threshold < n:
                n = cfg.long_prefill_token_threshold
            fresh = max(0, cfg.blocks_for(hit + n) - group_hit - own_hit)
            if fresh + touch + own_hit > pool.free:
                self.head_blocked = True
                break
            waiting.popleft()
            self.prefix.admit(r, group_hit, own_hit)
            pool.take(fresh)
            r.shared, r.blocks, r.computed = group_hit, own_hit + fresh, hit
            self.running.append(r)
            scheduled.append((r, n, hit))
            budget -= n
        waiting.extendleft(reversed(skipped))

    def _free(self, r: Req, *, finished: bool) -> None:
        """Release a request's blocks (its own, then its prefix group's if it was the last to hold them),
        tail first as vLLM frees them; a preempted request's stay findable by it."""
        self.pool.give(None if finished else ("request", r.i), r.blocks)
        self.prefix.release(r)
        if not finished:
            r.preemptions += 1
            r.own_from = r.shared
            r.computed = 0
            self.waiting.appendleft(r)
        r.blocks = r.shared = 0
        r.remote = False
        self.head_blocked = False

    def _finish_step(self, now: float, scheduled: list[tuple[Req, int, int]], drafts: int) -> float:
        """Time the step, then apply it at its end: tokens emitted, drafts judged, requests finished."""
        step, st = self.step, self.series
        tokens = sequences = sampled = 0
        read = attention = sampled_read = 0.0
        for r, n, before in scheduled:
            tokens += n
            owed = r.prompt + r.out - before
            if n > owed or (r.out and owed == 1):  # decoding (with its drafts)
                sequences += 1 + n - owed
                st.decode_tokens += 1
            else:
                sequences += 1
                attention += step.chunk(before, n)
                st.prefill_tokens += n
            read += step.read(before)
            if n >= owed:
                sampled += 1
                sampled_read += step.read(before)
        if self.execute is not None:
            seconds = self.execute(scheduled)
        else:
            seconds = step.seconds(tokens=tokens, sequences=sequences, read_bytes=read, attention=attention)
            if self.drafter is not None and sampled:
                seconds += step.draft_seconds(self.drafter, sampled, sampled_read)
        end = now + seconds
        st.start_s.append(now)
        st.seconds.append(seconds)
        st.waiting.append(len(self.waiting))
        st.running.append(len(self.running))
        st.blocks_used.append(self.pool.used)
        done = False
        for r, n, before in scheduled:
            owed = r.prompt + r.out - before
            r.computed = before + n
            self.prefix.promote(r)
            if n < owed:
                continue
            emit = 1
            if n > owed:  # drafts: the accepted ones and one more; the rest rolled back
                accepted = self._accepted(n - owed)
                st.drafts += n - owed
                st.accepted += accepted
                st.draft_steps += 1
                emit += accepted
                r.computed -= n - owed - accepted
            emit = min(emit, r.max_out - r.out)
            if not r.out:
                r.first = end
            r.out += emit
            if r.out >= r.max_out:
                r.finish = end
                done = True
        if done:
            self._retire(end)
        return end

    def _accepted(self, drafts: int) -> int:
        alpha = self.drafter.acceptance_rate  # type: ignore[union-attr]
        rng, got = self.rng.random, 0
        while got < drafts and rng() < alpha:
            got += 1
        return got

    def _retire(self, end: float) -> None:
        keep = []
        for r in self.running:
            if r.finish < 0:
                keep.append(r)
            elif self.release_after is None:
                self._free(r, finished=True)
            else:
                heapq.heappush(self.held, (self.release_after(r, end), r.i, r))
        self.running = keep
