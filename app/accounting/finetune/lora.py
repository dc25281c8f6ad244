"""LoRA adapters: which matrices they wrap and how many parameters they add.

peft's LoRA (peft/tuners/lora/layer.py, Linear.update_layer) puts two matrices beside a
frozen nn.Linear of (in_features, out_features): A, r x in_features, and B, out_features x r,
with no bias by default (LoraConfig.bias="none"). A target is a module name, matched in every
layer that has it, so:
- attention targets (q, k, v, o) wrap every layer's projections (q: d_model -> n_heads x
  head_dim; k, v: d_model -> n_kv_heads x head_dim; o: n_heads x head_dim -> d_model);
- MLP targets (gate, up, down) wrap the MLPs that are nn.Linear modules of those names: every
  dense layer's MLP and the shared experts of a mixture-of-experts layer. transformers 5.x
  stores routed experts as fused 3-D parameters, which a target name does not match;
- expert targets (experts_gate_up, experts_down) are those 3-D parameters, as peft's
  target_parameters wraps them (ParamWrapper): experts.gate_up_proj (E, 2 d_ff_expert, d_model)
  and experts.down_proj (E, d_model, d_ff_expert), each with A: in x (r E) and B: (r E) x out,
  r (in + out) per expert.
- where a family fuses projections into one nn.Linear (config.fused_qkv, fused_gate_up), that
  module is the target: qkv (GPT-2's c_attn, GPT-NeoX's and Falcon's query_key_value, Phi-3's
  qkv_proj, d_model -> (n_heads + 2 n_kv_heads) x head_dim) and gate_up (Phi-3's gate_up_proj).
- where peft maps MLP names onto the routed experts (experts_take_mlp_names: Qwen3-MoE), gate and
  up together wrap the experts' gate_up_proj at rank 2r and down their down_proj, and no dense MLP.
The defaults are peft's (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): q_proj and v_proj
for the llama-like families, the fused qkv projection where there is one (GPT-2, GPT-NeoX,
Falcon; peft has no default for Phi-3, which gets its qkv_proj likewise).
A target is spelled as TARGETS names it or as peft does (HF_NAMES: q_proj, experts.down_proj...).
"""

from dataclasses import dataclass
from typing import Literal

from app.accounting import blocks, names
from app.accounting.errors import InvalidInput
from app.accounting.params import count_params
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig

Target = Literal["q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up", "experts_gate_up",
                 "experts_down"]
TARGETS: tuple[Target, ...] = ("q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up", "experts_gate_up",
                               "experts_down")
EXPERT_TARGETS = ("experts_gate_up", "experts_down")
DEFAULT_TARGETS: tuple[Target, ...] = ("q", "v")
FUSED_DEFAULT_TARGETS: tuple[Target, ...] = ("qkv",)
HF_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
            "up": "up_proj", "down": "down_proj", "experts_gate_up": "experts.gate_up_proj",
            "experts_down": "experts.down_proj"}
"""The module names peft's target_modules match in transformers' llama-family models (the expert
targets: the parameter names its target_parameters match)."""
PEFT_SPELLINGS = {hf: short for short, hf in HF_NAMES.items()}
"""peft's name for a target -> the target: q_proj and q wrap the same module."""
EXPERT_MLP_NAMES = {"gate": "experts_gate_up", "up": "experts_gate_up", "down": "experts_down"}
"""Where experts_take_mlp_names: the routed experts' 3-D parameter each MLP name wraps."""


@dataclass(slots=True)
class LoraCount:
    """Parameters a LoRA fine-tune trains and keeps frozen."""

    rank: int
    targets: list[str]
    """The targets wrapped, in TARGETS order (on Qwen3-MoE, gate, up and down as the expert targets
    peft maps them to)."""
    matrices: int
    """Wrapped nn.Linear modules and 3-D expert parameters, over all layers."""
    adapter_params: int
    """r x (in + out) per wrapped matrix, summed."""
    by_target: dict[str, int]
    """Adapter parameters by target, in TARGETS order."""
    saved_params: dict[str, int]
    """Modules trained whole beside the adapters (peft's modules_to_save: the token embedding,
    the LM head), each a trainable copy of vocab_size x d_model next to the frozen original,
    tied or not (peft copies the module; a tied pair is untied)."""
    base_params: int
    """The model's own parameters (count_params().total), all frozen."""
    trainable_params: int
    """The adapters and the saved copies (peft's print_trainable_parameters: "trainable params")."""
    total_params: int
    """base + adapters + saved copies (peft's "all params")."""

    __pydantic_config__ = RECORD


def _shapes(cfg: TransformerConfig) -> dict[str, list[tuple[int, int, int, int]]]:
    """target -> [(in_features, out_features, how many layers hold it, adapters per matrix)]: one
    adapter per nn.Linear, one per expert in a 3-D expert parameter; read from each layer's blocks
    (their modules: app/accounting/blocks/)."""
    shapes: dict[str, list[tuple[int, int, int, int]]] = {t: [] for t in TARGETS}
    for layer, count in blocks.distinct(cfg):
        for m in layer.linears():
            if m.module in shapes:
                shapes[m.module].append((m.fan_in, m.fan_out, count, m.experts))
    return shapes


def target(name: str) -> str:
    """The target `name` spells: itself, or the one peft's module name stands for (q_proj: q)."""
    if name in TARGETS:
        return name
    if name in PEFT_SPELLINGS:
        return PEFT_SPELLINGS[name]
    close = names.near_misses(name, (*TARGETS, *PEFT_SPELLINGS))
    hint = (f"did you mean {' or '.join(close)}?" if close else f"name one of {', '.join(TARGETS)} "
            f"(or peft's module name for it: {', '.join(HF_NAMES.values())})")
    raise InvalidInput("lora_targets", f"unknown LoRA target {name!r}: {hint}")


def experts_take_mlp_names(cfg: TransformerConfig) -> bool:
    """Whether peft 0.21 maps the MLP targets onto the routed experts. Before wrapping, it rewrites
    target_modules for the model types transformers 5 converts from Qwen2-MoE's checkpoint layout
    (peft/utils/transformers_weight_conversion.py, _convert_peft_config_moe over transformers'
    _MODEL_TO_CONVERSION_PATTERN): gate_proj and up_proj, the v4 experts' modules, become
    target_parameters gate_up_proj, the 3-D (E, 2 f, d) parameter they were fused into, with
    rank_pattern 2r (both v4 adapters stacked; one of the two alone is a ValueError there);
    down_proj becomes the experts' down_proj, at r. No module name is left to match a dense MLP
    (mlp_only_layers, decoder_sparse_step), nor a shared expert, so none is wrapped. Among the
    families Tally imports that is qwen3_moe, qwen3_next and glm4_moe (DeepSeek too, whose latent
    attention fine-tuning refuses): qwen2_moe is that pattern itself, not one converted to it, so its
    names wrap its shared expert and dense MLPs; Mixtral's v4 names were w1, w3 and w2. A
    TransformerConfig has no model_type: qwen3_moe is the mixture of experts without a shared expert
    whose q and k are normed per head, qwen3_next the one with gated attention (attn_output_gate),
    glm4_moe the gated experts behind a score-corrected sigmoid router (Nemotron-H's router is too,
    but its experts are not gated, and peft does not convert it)."""
    if blocks.routed(cfg) is None:
        return False
    glm = cfg.router_score_correction and cfg.gated and not cfg.mla  # GLM-4.5's sigmoid router, gated experts
    return glm or (cfg.qk_norm == "head" and (not cfg.ff_shared or cfg.attn_output_gate))


def wrapped(cfg: TransformerConfig, targets: tuple[str, ...]) -> dict[str, int]:
    """target -> its adapters' rank in units of lora_rank, for each module `targets` wrap (TARGETS
    order): what peft wraps for these names on this model. Refuses a name that wraps nothing,
    naming its place in lora_targets."""
    return _wrapped(cfg, targets, _shapes(cfg))


def _wrapped(cfg: TransformerConfig, targets: tuple[str, ...],
             shapes: dict[str, list[tuple[int, int, int, int]]]) -> dict[str, int]:
    experts = experts_take_mlp_names(cfg)
    ranks: dict[str, int] = {}
    for i, name in enumerate(targets):
        if name not in shapes:
            raise InvalidInput(f"lora_targets.{i}", f"{name!r} is not one of {', '.join(TARGETS)}")
        module, times = name, 1
        if experts and name in EXPERT_MLP_NAMES:
            if name in ("gate", "up") and not {"gate", "up"} <= set(targets):
                raise InvalidInput(f"lora_targets.{i}", f"{name}: peft fuses this model's gate_proj and "
                                   "up_proj into the routed experts' gate_up_proj; target both gate and up "
                                   "(rank 2r there), or experts_gate_up (rank r)")
            module, times = EXPERT_MLP_NAMES[name], 2 if name in ("gate", "up") else 1
        if not shapes[module]:
            raise InvalidInput(f"lora_targets.{i}", _missing(cfg, name))
        ranks[module] = max(ranks.get(module, 1), times)  # gate + up's 2r wins over experts_gate_up's r
    return {t: ranks[t] for t in TARGETS if t in ranks}


def default_targets(cfg: TransformerConfig) -> tuple[Target, ...]:
    """peft's default target_modules for the model's family."""
    return FUSED_DEFAULT_TARGETS if cfg.fused_qkv else DEFAULT_TARGETS


def _missing(cfg: TransformerConfig, target: str) -> str:
    if target in ("q", "k", "v") and cfg.fused_qkv:
        return f"{target}: this model fuses q, k and v into one projection; target qkv"
    if target in ("gate", "up") and cfg.fused_gate_up:
        return f"{target}: this model fuses gate and up into one projection; target gate_up"
    if target == "qkv":
        return "qkv: this model projects q, k and v apart; target q, k or v"
    if target == "gate_up":
        return "gate_up: this model has no fused gate and up projection; target gate or up"
    if target in ("q", "k", "v"):
        return (f"{target}: latent attention has no {HF_NAMES[target]} (its projections go through "
                "q_a/q_b and kv_a/kv_b)")
    if target in EXPERT_TARGETS:
        return f"{target}: this model has no routed experts"
    if target == "gate" and not cfg.gated:
        return f"gate: a {cfg.mlp} MLP has no gate projection"
    return f"{target}: every MLP of this model is a routed expert, which a target name does not match"


def lora_params(cfg: TransformerConfig, *, rank: int, targets: tuple[str, ...] | None = None,
                train_embeddings: bool = False, train_head: bool = False) -> LoraCount:
    """targets None: default_targets(cfg)."""
    targets = default_targets(cfg) if targets is None else targets
    if rank < 1:
        raise InvalidInput("lora_rank", f"must be at least 1, got {rank}")
    if not targets:
        raise InvalidInput("lora_targets", "name at least one matrix to adapt (q, k, v, o, gate, up, down)")
    shapes = _shapes(cfg)
    ranks = _wrapped(cfg, targets, shapes)
    # r' (in + out) per wrapped matrix (per expert of a 3-D one), r' = rank x its multiple
    ordered = {t: sum(rank * times * (fan_in + fan_out) * n * e for fan_in, fan_out, n, e in shapes[t])
               for t, times in ranks.items()}
    matrices = sum(count for t in ranks for _, _, count, _ in shapes[t])
    adapters = sum(ordered.values())
    table = cfg.vocab_size * cfg.d_model
    saved = {name: table for name, on in (("embeddings", train_embeddings), ("lm_head", train_head)) if on}
    trainable = adapters + sum(saved.values())
    base = count_params(cfg).total
    return LoraCount(rank=rank, targets=list(ordered), matrices=matrices, adapter_params=adapters,
                     by_target=ordered, saved_params=saved, base_params=base, trainable_params=trainable,
                     total_params=base + trainable)
