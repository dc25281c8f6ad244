"""A multimodal config's text model (Gemma 3's and Llama 4's ...ForConditionalGeneration): its
text_config read by the text family's own reader and key check, a refusal naming the key under
text_config. The vision tower is not counted, and a warning says so."""

from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf import keys
from app.accounting.hf.family import Family
from app.accounting.models import TransformerConfig


def text_model(raw: dict, text_family: Family, warnings: list[str]) -> dict[str, Any]:
    """The TransformerConfig fields of raw["text_config"] (absent: the text config's defaults)."""
    text = raw.get("text_config") or {}
    name = text_family.model_type
    if not isinstance(text, dict):
        raise InvalidInput("text_config", f"must be an object (the keys of {name})")
    if text.get("model_type", name) != name:
        got = repr(text["model_type"])[:40]
        raise InvalidInput("text_config.model_type", f"must be {name!r}, got {got}")
    try:
        fields = text_family.read(text, warnings)
        keys.check(text, text_family, TransformerConfig(**fields), warnings)
    except InvalidInput as e:
        raise InvalidInput("text_config." + text_family.key_names.get(e.field, e.field), e.message) from None
    warnings.append("the text model only: the vision tower and multimodal projector (vision_config) are "
                    "not counted")
    return fields
