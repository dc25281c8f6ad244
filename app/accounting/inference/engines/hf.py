"""transformers' generate: a model in a process, with no budget of its own.

generate() allocates as it goes: DynamicLayer.update concatenates each step's keys and values
onto the cache (src/transformers/cache_utils.py: torch.cat along the sequence, nothing
preallocated), in the model's dtype and unpaged. What fits is then the device's total less the
CUDA context, the weights and the prefill forward's largest live set (workspace.py, at the
prompt's tokens: max_num_batched_tokens is batch x prompt here), with logits only for the last
position (generate's logits_to_keep=1).
"""

from app.accounting.inference.engines.base import Budget, Reserved, budget
from app.accounting.units import GIB

NAME = "transformers"
DEFAULT_PREFILL_TOKENS = 2048
"""The prefill forward's tokens when the request does not say (batch x prompt)."""


def plan(*, total: int, weights: int, activations: int, tokens: int, startup: int) -> Budget:
    reserved = [
        Reserved("weights", weights, True, "the model's weights (from_pretrained onto this GPU)"),
        Reserved("activations", activations, True,
                 f"the prefill forward's largest live set over {tokens:,} tokens (max_num_batched_tokens: batch x "
                 "prompt), logits for the last position only"),
    ]
    return budget(NAME, total, total - startup,
                  f"the device's total less a {startup / GIB:.2f} GiB CUDA context: the DynamicCache grows until "
                  "memory runs out", reserved)
