"""Read a config.json with its family's reader, then refuse what the family ignores."""

from dataclasses import dataclass
from typing import Any

from app.accounting.errors import InvalidInput
from app.accounting.hf import classic, dense, keys, moe
from app.accounting.hf.family import Family
from app.accounting.models import ParamCount, TransformerConfig, count_params
from app.accounting.records import RECORD

FAMILIES: dict[str, Family] = {f.model_type: f for f in (*classic.FAMILIES, *dense.FAMILIES, *moe.FAMILIES)}
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


def import_config(raw: dict[str, Any]) -> ImportedModel:
    """Read a config.json body. Errors name the config.json key at fault."""
    name = raw.get("model_type")
    if not isinstance(name, str) or name not in FAMILIES:
        raise InvalidInput("model_type", f"{str(name)[:40]!r} is not one of {', '.join(SUPPORTED)}")
    family = FAMILIES[name]
    warnings: list[str] = []
    fields = family.read(raw, warnings)
    try:
        cfg = TransformerConfig(**fields)
    except InvalidInput as e:
        raise InvalidInput(family.key_names.get(e.field, e.field), e.message) from None
    keys.check(raw, family, cfg, warnings)
    return ImportedModel(model_type=name, config=cfg.resolved(), params=count_params(cfg), warnings=warnings)
