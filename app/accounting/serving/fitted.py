"""A step's time from a linear fit of measured steps (the serve probe's profile of its device, as
Vidur profiles one): what the engine asks of a step model, from five coefficients.

    seconds = per_step + per_token x tokens + per_sequence x sequences
            + per_read_token x (cached tokens each scheduled request reads)
            + per_pair x (attention pairs of each prompt chunk: its queries times the keys up to them)
            + per_decode_only, a step of decodes alone (replayed from a CUDA graph where the engine does)
"""

from dataclasses import dataclass


def pairs(length: int) -> int:
    """Causal attention pairs of a prompt of `length` tokens: each query and the keys up to it."""
    return length * (length + 1) // 2


@dataclass
class FittedStep:
    per_step_s: float
    per_token_s: float
    per_sequence_s: float
    per_read_token_s: float
    per_pair_s: float
    per_decode_only_s: float = 0.0
    host: float = 0.0
    bandwidth: float = 1.0
    """read() gives seconds, so its 'bytes' cross at one a second."""

    def forward(self, tokens: int) -> float:
        return self.per_step_s + self.per_token_s * tokens

    def sampling(self, sequences: int) -> float:
        return self.per_sequence_s * sequences

    def read(self, context: int) -> float:
        return self.per_read_token_s * context

    def chunk(self, offset: int, tokens: int) -> float:
        return self.per_pair_s * (pairs(offset + tokens) - pairs(offset))

    @property
    def floors(self) -> float:
        """What runs.py's decode-only runs add to a step's pieces."""
        return self.per_decode_only_s

    def seconds(self, *, tokens: int, sequences: int, read_bytes: float, attention: float) -> float:
        alone = self.per_decode_only_s if attention == 0.0 and tokens == sequences else 0.0
        return (self.forward(tokens) + self.sampling(sequences) + attention + read_bytes / self.bandwidth
                + alone)
