"""The paged KV cache's free blocks, as vLLM V1's block pool keeps them.

Freed blocks join the tail of one free queue and keep their content (their hash) until a new
allocation pops them from the head, so a prompt whose prefix is still there gets it back without
recomputing it; "free" counts those evictable cached blocks too (vllm/v1/core/block_pool.py,
`free_blocks` and `get_new_blocks`; kv_cache_utils.py `FreeKVCacheBlockQueue`, vLLM 0.11.0). The
queue is kept as runs of blocks with one owner each: a shared prefix (`("prefix", group)`), a
preempted request's own blocks (`("request", i)`), or content no one will ask for (None).
"""

from collections import deque
from collections.abc import Hashable


class BlockPool:
    def __init__(self, blocks: int) -> None:
        self.blocks = blocks
        self.free = blocks
        """Unreferenced blocks, cached ones included: what an allocation may take."""
        self._queue: deque[list] = deque([[None, blocks]]) if blocks else deque()
        self.cached: dict[Hashable, int] = {}
        """Blocks of each owner still in the queue (not yet evicted)."""

    @property
    def used(self) -> int:
        return self.blocks - self.free

    def take(self, n: int) -> None:
        """Allocate n blocks from the head, evicting the cached content they held (the caller checked
        n <= free)."""
        self.free -= n
        queue = self._queue
        while n:
            run = queue[0]
            got = min(n, run[1])
            run[1] -= got
            n -= got
            if run[0] is not None:
                left = self.cached[run[0]] - got
                if left:
                    self.cached[run[0]] = left
                else:
                    del self.cached[run[0]]
            if not run[1]:
                queue.popleft()

    def give(self, owner: Hashable | None, n: int) -> None:
        """Free n blocks to the tail; an owner's blocks stay findable until evicted."""
        if n <= 0:
            return
        self.free += n
        queue = self._queue
        if owner is None and queue and queue[-1][0] is None:
            queue[-1][1] += n
        else:
            queue.append([owner, n])
        if owner is not None:
            self.cached[owner] = self.cached.get(owner, 0) + n

    def reclaim(self, owner: Hashable) -> int:
        """Take back every block an owner still has in the queue (a prefix hit touches them: they are
        referenced again and leave the free queue); returns how many."""
        n = self.cached.pop(owner, 0)
        if n:
            self._queue = deque(run for run in self._queue if run[0] != owner)
            self.free -= n
        return n
