"""Prefix caching as vLLM V1 does it (kv_cache_manager.py `get_computed_blocks`, block_pool.py), over
the block pool's runs (pool.py): what a new or resumed request finds already computed, and who holds
the shared blocks.

- A hit is whole blocks and never the request's last token (vLLM recomputes it for its logits).
- A shared prefix (one of the traffic's `prefix_groups`) is held by its group while any request of it
  runs; when the last one ends, its blocks join the free queue still cached, and a later request of
  the group takes back what eviction has left of them (the chain's head: freed tail first).
- A preempted request's own blocks stay cached too, past its prefix; on resuming it takes back what
  is left of them, if its prefix hit is the one it had.
- The first request of a group computes the prefix; once it has, the group holds those blocks.
- `prefix_hit_rate` instead finds that share of every prompt cached and held elsewhere (no pool).
"""

from typing import TYPE_CHECKING

from app.accounting.serving.pool import BlockPool

if TYPE_CHECKING:
    from app.accounting.serving.engine import EngineConfig, Req


class PrefixCache:
    def __init__(self, cfg: "EngineConfig", pool: BlockPool, prefix_tokens: int) -> None:
        self.cfg, self.pool = cfg, pool
        self.blocks = prefix_tokens // cfg.block_size if cfg.prefix_caching else 0
        """A group's prefix in whole blocks (0: no shared prefixes, or caching off)."""
        self.refs: dict[int, int] = {}
        """Running requests of each group."""
        self.resident: dict[int, int] = {}
        """Prefix blocks each group holds while referenced."""

    def lookup(self, r: "Req") -> tuple[int, int, int, int]:
        """(tokens found computed, blocks of them shared with a prefix group, blocks of them the request
        itself left cached when preempted, cached blocks the hit takes out of the free queue)."""
        if r.remote:  # the prefill instance sent the prompt's cache; its last token is computed here
            return r.prompt - 1, 0, 0, 0
        cfg = self.cfg
        cap = (r.prompt + r.out - 1) // cfg.block_size  # whole blocks, never the last token
        if cfg.prefix_hit_rate is not None:
            shared = min(int(cfg.prefix_hit_rate * r.prompt) // cfg.block_size, cap)
            return shared * cfg.block_size, shared, 0, 0
        if not cfg.prefix_caching:
            return 0, 0, 0, 0
        group_hit = touch = 0
        if r.group >= 0 and self.blocks:
            if self.refs.get(r.group):
                group_hit = min(self.resident.get(r.group, 0), cap)
            else:
                touch = self.pool.cached.get(("prefix", r.group), 0)
                group_hit = min(touch, cap)
                touch = touch if group_hit else 0
        own = self.pool.cached.get(("request", r.i), 0) if group_hit == r.own_from else 0
        own_hit = min(own, cap - group_hit)
        return (group_hit + own_hit) * cfg.block_size, group_hit, own_hit, touch

    def admit(self, r: "Req", group_hit: int, own_hit: int) -> None:
        """The hit's blocks referenced again: the group's (back from the free queue if none held them),
        and the request's own (the rest of its own run freed for good)."""
        pool = self.pool
        if r.group >= 0 and self.blocks:
            if group_hit and not self.refs.get(r.group):
                self.resident[r.group] = pool.reclaim(("prefix", r.group))
            self.refs[r.group] = self.refs.get(r.group, 0) + 1
            r.in_group = True
        if own_hit:
            back = pool.reclaim(("request", r.i))
            pool.give(None, back - own_hit)

    def release(self, r: "Req") -> None:
        """A request of a group ends or is preempted: the last one out frees the prefix, still cached."""
        if not r.in_group:
            return
        left = self.refs[r.group] - 1
        self.refs[r.group] = left
        if not left:
            self.pool.give(("prefix", r.group), self.resident.pop(r.group, 0))
        r.in_group = False

    def promote(self, r: "Req") -> None:
        """Once a request has computed its group's whole prefix, the group holds those blocks."""
        if not r.in_group:
            return
        have = self.resident.get(r.group, 0)
        if have < self.blocks and r.shared == have and r.computed >= self.blocks * self.cfg.block_size:
            r.blocks -= self.blocks - have
            r.shared = self.blocks
            self.resident[r.group] = self.blocks
