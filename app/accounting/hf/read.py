"""Read a config.json with its family's reader, then refuse what the family ignores."""

from dataclasses import dataclass
from typing import Any

from app.accounting.conventions import conventions
from app.accounting.errors import InvalidInput
from app.accounting.hf import gemma, gpt, hybrid, keys, llama, llama4, mamba2, moe
from app.accounting.hf.family import Family
from app.accounting.models import ParamCount, TransformerConfig, count_params
from app.accounting.records import RECORD

FAMILIES: dict[str, Family] = {f.model_type: f for f in (*llama.FAMILIES, *gpt.FAMILIES, *gemma.FAMILIES,
                                                              *moe.FAMILIES, *llama4.FAMILIES,
                                                              *hybrid.FAMILIES, *mamba2.FAMILIES)}
SUPPORTED = tuple(FAMILIES)


@dataclass(slots=True)
class ImportedModel:
    """A Hugging Face config read as a TransformerConfig."""

    model_type: str
    config: TransformerConfig
    params: ParamCount
    warnings: list[str]
    """What the import approximated, ignored or chose by convention."""

    __pydantic_config__ = RECORD


def _read(raw: dict[str, Any], family: Family, warnings: list[str]) -> TransformerConfig:
    fields = family.read(raw, warnings)
    try:
        cfg = TransformerConfig(**fields)
    except InvalidInput as e:
        raise InvalidInput(family.key_names.get(e.field, e.field), e.message) from None
    keys.check(raw, family, cfg, warnings)
    return cfg


# transformers' class for each supported model_type, as config.json's `architectures` names it.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox", "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss", "Glm4MoeForCausalLM": "glm4_moe", "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4", "Qwen3NextForCausalLM": "qwen3_next",
    "BambaForCausalLM": "bamba", "JambaForCausalLM": "jamba",
    "NemotronHForCausalLM": "nemotron_h", "FalconH1ForCausalLM": "falcon_h1",
    "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3", "Phi3ForCausalLM": "phi3", "OlmoForCausalLM": "olmo",
    "Olmo2ForCausalLM": "olmo2", "FalconForCausalLM": "falcon", "Starcoder2ForCausalLM": "starcoder2",
}


def _architecture_family(raw: dict[str, Any]) -> str | None:
    """The supported model_type whose transformers class `architectures` names, if any."""
    archs = raw.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        return None
    other = ARCHITECTURES.get(archs[0])
    return other if other in FAMILIES else None


def _check_architecture(raw: dict[str, Any], name: str, cfg: TransformerConfig, warnings: list[str]) -> None:
    """A config relabelled to another model_type (Qwen3's as llama) is read by both; when
    the class `architectures` names builds a different count, refuse naming it."""
    other = _architecture_family(raw)
    if other is None or other == name:
        return
    try:
        theirs = _read(raw | {"model_type": other}, FAMILIES[other], [])
    except InvalidInput:
        theirs = None
    if theirs is not None and count_params(theirs).total == count_params(cfg).total:
        warnings.append(f"architectures names {raw['architectures'][0]!r}; read as model_type {name!r}, "
                        "which builds the same parameters from these keys")
        return
    raise InvalidInput("architectures", f"{raw['architectures'][0]!r} is a {other} model, which builds "
                                        f"different weights from these keys than model_type {name!r}; "
                                        f"send model_type {other!r} (or drop architectures)")


def import_config(raw: dict[str, Any]) -> ImportedModel:
    """Read a config.json body. Errors name the config.json key at fault."""
    name = raw.get("model_type")
    if not isinstance(name, str) or name not in FAMILIES:
        raise InvalidInput("model_type", f"{str(name)[:40]!r} is not one of {', '.join(SUPPORTED)}")
    warnings: list[str] = []
    cfg = _read(raw, FAMILIES[name], warnings)
    _check_architecture(raw, name, cfg, warnings)
    warnings.extend(conventions(cfg))
    return ImportedModel(model_type=name, config=cfg.resolved(), params=count_params(cfg), warnings=warnings)
