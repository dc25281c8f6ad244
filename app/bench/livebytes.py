"""Peak live tensor bytes on a device without allocator statistics (CPU).

A dispatch mode sees every tensor every op creates, forward, backward and the
optimizer's alike; a tensor's storage counts from its creation until it is
freed. This is what torch.cuda.max_memory_allocated reports on a GPU, without
the caching allocator's rounding to 512-byte blocks.
"""

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0

    def track(self, tensor: torch.Tensor) -> None:
        """Count a tensor made outside the mode (parameters, optimizer state, inputs). A DTensor
        (FSDP2's sharded parameters, their gradients and optimizer state, and the ops' results on
        them) counts as its local shard: the mode sees the DTensor op, not the local op under it."""
        tensor = getattr(tensor, "_local_tensor", tensor)
        storage = tensor.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes == 0 or tensor.device.type == "meta":
            return
        key = storage.data_ptr()
        held = self._live.get(key)
        if held is not None and not held[0].expired():
            return
        self._live[key] = (StorageWeakRef(storage), nbytes)
        self.current += nbytes - (held[1] if held else 0)

    def _collect(self) -> None:
        dead = [key for key, (ref, _) in self._live.items() if ref.expired()]
        for key in dead:
            self.current -= self._live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._collect()  # what was freed since the last op, before this one allocates
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.track(t)
        self.peak = max(self.peak, self.current)
        return out
