"""One engine step's time, for whatever mix of prompt chunks and decoding sequences it carries.

A step is one forward of every token the scheduler gave it, then sampling. Its time is kernels.py's
pass taken apart along what each piece depends on, as Vidur (vidur/entities/execution_time.py) and
NVIDIA's aiconfigurator (backends/vllm_backend.py `_get_mix_step_latency`) compose a mixed batch:

    forward(tokens)            every layer's GEMMs, elementwise kernels, cache writes, all-reduces
  + sampling(sequences)        the head on each scheduled request's last position, the sampler
  + attention of each chunk    a c-token chunk after o computed tokens: core(o + c) - core(o), the
                               causal FlashAttention core of its queries against every earlier key
  + cached bytes read / bandwidth   each request's computed context, read once (decode attention)
  + the kernels' floors; the host's launches where no CUDA graph replays them (max of the two)

So a step of one whole prompt is exactly latency.prefill_kernels, and a step of decodes alone is
latency.decode_kernels at their contexts. Each piece is remembered by the one count it depends on.

Speculative decoding adds the drafter's passes: k of them over the decoding sequences, each a
forward of one token a sequence (MTP: one layer of the target, its mean layer, and the head; a draft
model: its own forward and head), reading its own cache.
"""

from collections.abc import Callable
from dataclasses import dataclass

from app.accounting.inference import kernels
from app.accounting.inference.kernels import Deployment, Launch
from app.accounting.inference.roofline import Hardware
from app.accounting.matmul import MatmulDevice


@dataclass(frozen=True, slots=True)
class Drafter:
    """Speculative decoding's proposer: `tokens` drafts a step per decoding sequence."""

    tokens: int
    acceptance_rate: float
    """The chance each draft is accepted once the ones before it were (alpha of Leviathan et al.,
    arXiv 2211.17192, whose expected tokens a step are (1 - alpha^(k+1)) / (1 - alpha))."""
    method: str
    """"mtp" (the target's own multi-token-prediction layer) or "draft_model"."""
    model: "StepModel | None" = None
    """A draft model's step; None for MTP (the target's layer)."""


class StepModel:
    """A deployment's step time from its pieces, each remembered by its count."""

    def __init__(
        self,
        d: Deployment,
        hw: Hardware,
        dev: MatmulDevice,
        launch: Launch,
        *,
        host_seconds_per_op: float,
        read_bytes: Callable[[int], int],
    ) -> None:
        self.d, self.hw, self.dev, self.launch = d, hw, dev, launch
        self.read_bytes = read_bytes
        """One sequence's cached bytes on one GPU at a context (keys, values and any state)."""
        self.bandwidth = dev.memory_bandwidth_bytes_per_sec
        count = kernels.step_kernels(d.cfg, d.tensor_parallel, launch)
        self.floors = count * kernels.KERNEL_FLOOR_S
        self.host = count * host_seconds_per_op if launch in ("python", "eager") else 0.0
        self._forward: dict[int, float] = {}
        self._sampling: dict[int, float] = {}
        self._core: dict[int, float] = {0: 0.0}
        self._read: dict[int, int] = {0: 0}

    def forward(self, tokens: int) -> float:
        seconds = self._forward.get(tokens)
        if seconds is None:
            f = kernels.forward_parts(self.d, self.hw, self.dev, tokens)
            seconds = self._forward[tokens] = f.gemm_seconds + f.other_seconds + f.communication_seconds
        return seconds

    def sampling(self, sequences: int) -> float:
        seconds = self._sampling.get(sequences)
        if seconds is None:
            s = kernels.sampling_parts(self.d, self.dev, sequences)
            seconds = self._sampling[sequences] = s.gemm_seconds + s.other_seconds
        return seconds

    def core(self, prompt_len: int) -> float:
        """One prompt's causal attention core at this length, every layer."""
        seconds = self._core.get(prompt_len)
        if seconds is None:
            seconds = self._core[prompt_len] = kernels.prompt_attention_seconds(self.d, self.dev, prompt_len)
        return seconds

    def read(self, context: int) -> int:
        got = self._read.get(context)
        if got is None:
            got = self._read[context] = self.read_bytes(context)
        return got

    def chunk(self, offset: int, tokens: int) -> float:
        """A prompt chunk's attention: its queries against every key before them."""
        return self.core(offset + tokens) - self.core(offset)

    def seconds(self, *, tokens: int, sequences: int, read_bytes: float, attention: float) -> float:
        gpu = (
            self.forward(tokens)
            + self.sampling(sequences)
            + attention
            + read_bytes / self.bandwidth
            + self.floors
        )
        return gpu if gpu > self.host else self.host

    def draft_seconds(self, drafter: Drafter, sequences: int, read_bytes: float) -> float:
        """The drafter's k passes over `sequences` decoding sequences whose target contexts read
        `read_bytes`."""
        if drafter.model is not None:
            own = drafter.model
            one = own.forward(sequences) + own.sampling(sequences) + own.floors
            scale = own.d.kv_bytes_per_token / self.d.kv_bytes_per_token if self.d.kv_bytes_per_token else 0.0
            one += read_bytes * scale / self.bandwidth
        else:  # the MTP layer: a mean layer of the target and its head, reading one layer's cache
            layers = self.d.cfg.n_layers
            one = (self.forward(sequences) + read_bytes / self.bandwidth + self.floors) / layers
            one += self.sampling(sequences)
        return drafter.tokens * one
