"""A mixture-of-experts MLP (Mixtral, Qwen-MoE, DeepSeek-V2/V3): a router picks top_k of n_experts
routed experts per token; shared experts (DeepSeek, Qwen2-MoE), built as one MLP, run on every
token, Qwen2-MoE's behind a d_model -> 1 sigmoid gate. Experts and routers have biases only with
expert_bias and router_bias (gpt-oss).

Per layer, with d = d_model, e = n_experts, k = top_k, f = d_ff_expert, s = the shared width,
m = 3 for gated experts (2 otherwise):
  weights   router (e, d), replicated; routed experts stacked as GGUF stores them, (e, f, d) per
            gate and up and (e, d, f) for down, split over tensor ranks like an MLP and over
            expert-parallel ranks; shared experts as an MLP of width s; the shared gate (1, d)
  FLOPs     2 t d e for the router; 2 t k d f m for the routed experts (dropless: t x k expert
            MLPs however tokens spread); 2 t d (s m + gate) for the shared experts
  saved     as transformers routes (softmax over the experts in fp32, top_k, renormalised) and
            Megatron-LM dispatches (copies sorted by expert, outputs weighted and summed back)
  active    parameters one token reads: the router, the shared experts and k routed experts
DeepSeek-V3's e_score_correction_bias is a buffer in transformers: counted apart (`buffers`).
"""

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from app.accounting.blocks.base import FP32, INDEX_BYTES, Item, Mlp, Weight
from app.accounting.blocks.dense import DenseMlp
from app.accounting.blocks.gated import mlp_kind


@dataclass(frozen=True)
class Experts(Mlp):
    kind: ClassVar[str] = "experts"
    routes: ClassVar[bool] = True

    @cached_property
    def expert(self) -> DenseMlp:
        """One routed expert: an MLP of d_ff_expert, gated as the model's MLPs are."""
        return mlp_kind(self.cfg)(self.cfg, self.cfg.ff_expert, component="routed_experts",
                                  bias=self.cfg.expert_bias)

    @cached_property
    def shared(self) -> DenseMlp | None:
        """The shared experts as one MLP, or None."""
        if not self.cfg.ff_shared:
            return None
        return mlp_kind(self.cfg)(self.cfg, self.cfg.ff_shared, suffix="_shexp", component="shared_experts")

    @property
    def top_k(self) -> int:
        return self.cfg.top_k

    def _weights(self) -> list[Weight]:
        cfg, d, e, f = self.cfg, self.cfg.d_model, self.cfg.n_experts, self.cfg.ff_expert
        weights = [Weight("ffn_gate_inp.weight", (e, d), "router", "replicated", "router")]
        if cfg.router_bias:
            weights.append(Weight("ffn_gate_inp.bias", (e,), "router", "replicated"))
        if cfg.gated:
            weights.append(Weight("ffn_gate_exps.weight", (e, f, d), "routed_experts", "column",
                                  "experts_gate_up"))
        weights += [Weight("ffn_up_exps.weight", (e, f, d), "routed_experts", "column", "experts_gate_up"),
                    Weight("ffn_down_exps.weight", (e, d, f), "routed_experts", "row", "experts_down")]
        if cfg.expert_bias:  # llama.cpp's gpt-oss tensors; down's added after the all-reduce
            weights += [Weight(f"ffn_{name}_exps.bias", (e, f), "routed_experts", "column")
                        for name in (("gate", "up") if cfg.gated else ("up",))]
            weights.append(Weight("ffn_down_exps.bias", (e, d), "routed_experts", "replicated"))
        if self.shared is not None:
            weights += self.shared.weights()
            if cfg.shared_expert_gate:
                weights.append(Weight("ffn_gate_inp_shexp.weight", (1, d), "shared_experts", "replicated",
                                      "shared_gate"))
        return weights

    @property
    def routed_active_params(self) -> int:
        return self.top_k * self.expert.total_params

    @property
    def buffers(self) -> int:
        return self.cfg.n_experts if self.cfg.router_score_correction else 0

    def forward_flops(self, tokens: int) -> dict[str, int]:
        cfg, d, m = self.cfg, self.cfg.d_model, self.expert.matrices
        return {"router": 2 * tokens * d * cfg.n_experts,
                "routed_experts": 2 * tokens * self.top_k * d * cfg.ff_expert * m,
                "shared_experts": 2 * tokens * d * (cfg.ff_shared * m + cfg.shared_expert_gate)}

    def workspace_bytes(self, *, tokens: int, act_bytes: int, tp: int) -> int:
        """The routed copies (tokens x top_k, gathered whole) with their hiddens, the shared experts'
        hiddens, and the router's fp32 logits."""
        cfg, routed = self.cfg, tokens * self.top_k
        experts = routed * (cfg.d_model + self.expert.live_hiddens * cfg.ff_expert // tp) * act_bytes
        shared = 0 if self.shared is None else self.shared.workspace_bytes(tokens=tokens, act_bytes=act_bytes,
                                                                            tp=tp)
        return experts + shared + tokens * cfg.n_experts * FP32

    def experts_read(self, tokens: int) -> float:
        """Expected routed experts one layer reads for `tokens` tokens when each picks top_k of
        n_experts uniformly and independently: n (1 - (1 - k/n)^tokens). Decode reads only these
        experts' weights, which is why small decode batches read far less than the total."""
        n, k = self.cfg.n_experts, self.top_k
        return n * (1 - (1 - k / n) ** tokens)

    def saved(self, *, act_bytes: int, residual_bytes: int) -> list[Item]:
        """Routing is dropless: however tokens spread over experts their copies sum to s*b*top_k,
        so the bytes do not depend on the spread (it is assumed even). Under tensor parallelism the
        router runs replicated on its tokens; experts' matrices split like an MLP's, so their
        hiddens divide by t, while the tokens gathered for them are whole on every rank."""
        cfg, h, e, k = self.cfg, self.cfg.d_model, self.cfg.n_experts, self.top_k
        items = [
            Item("moe/norm_input", h, 0, residual_bytes, False),
            # the normalised tokens, read by the router and the shared experts
            Item("moe/router_input", h, 0, act_bytes, False),
            Item("moe/router_probs_fp32", e, 0, FP32, False),  # softmax's output
            # the top_k probabilities and their sum, which the renormalisation divides by
            Item("moe/top_k_probs_fp32", k + 1, 0, FP32, False),
            # the top_k expert ids (top-k's backward) and the permutation sorting copies by expert
            Item("moe/routing_indices", 2 * k, 0, INDEX_BYTES, False),
            Item("moe/expert_inputs", k * h, 0, act_bytes, False, True),
            *self.expert.hidden("moe/expert_", k * cfg.ff_expert, act_bytes),
            # the combine: each copy's output times its routing weight
            Item("moe/expert_outputs", k * h, 0, act_bytes, False),
            Item("moe/combine_weights", k, 0, act_bytes, False),
        ]
        if self.shared is not None:
            items += self.shared.hidden("moe/shared_", cfg.ff_shared, act_bytes)
        if cfg.shared_expert_gate:  # sigmoid(x w_gate) * shared output (Qwen2-MoE)
            items += [Item("moe/shared_expert_output", h, 0, act_bytes, False),
                      Item("moe/shared_expert_gate_sigmoid", 1, 0, act_bytes, False)]
        if cfg.dropout:
            items.append(Item("moe/dropout_mask", h, 0, 1, False))
        return items
