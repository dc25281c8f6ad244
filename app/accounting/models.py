"""Named transformer presets, and the config and counts every calculator reads.

TransformerConfig lives in config.py and the parameter counts in params.py; both
are re-exported here, the name callers have always imported them by.
"""

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from app.accounting import names
from app.accounting.config import TransformerConfig, check_bounds
from app.accounting.errors import InvalidInput
from app.accounting.params import (
    ParamCount,
    attention_params,
    count_params,
    layer_params,
    mlp_params,
    norm_params,
)
from app.accounting.records import RECORD

__all__ = ["TransformerConfig", "check_bounds", "ParamCount", "attention_params", "count_params",
           "layer_params", "mlp_params", "norm_params", "Preset", "PresetSummary", "presets", "find",
           "preset", "summarize"]


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    description: str
    source: str
    config: TransformerConfig


@dataclass(frozen=True, slots=True)
class PresetSummary:
    """A named model with its resolved config and parameter count."""

    name: str
    description: str
    source: str
    config: TransformerConfig
    params: ParamCount

    __pydantic_config__ = RECORD


def summarize(p: Preset) -> PresetSummary:
    return PresetSummary(p.name, p.description, p.source, p.config.resolved(), count_params(p.config))


@cache
def presets() -> dict[str, Preset]:
    """Named models from data/models.toml, in file order."""
    raw = tomllib.loads(resources.files("app.accounting").joinpath("data/models.toml").read_text())
    table = {}
    for entry in raw["model"]:
        entry = dict(entry)
        name, description, source = entry.pop("name"), entry.pop("description"), entry.pop("source")
        table[name] = Preset(name, description, source, TransformerConfig(**entry))
    return table


MODELS_LISTING = "GET /api/v1/models"


def find(name: str, *, field: str = "model") -> Preset:
    """The preset called `name`; a near miss is refused with the closest names."""
    try:
        return presets()[name]
    except KeyError:
        raise InvalidInput(field, names.unknown("preset", name, presets(), MODELS_LISTING)) from None


def preset(name: str, *, field: str = "model") -> TransformerConfig:
    return find(name, field=field).config
