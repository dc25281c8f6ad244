"""Named transformer presets, and the config and counts every calculator reads.

TransformerConfig lives in transformer.py and the parameter counts in params.py; both
are re-exported here, the name callers have always imported them by.
"""

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from app.accounting import names
from app.accounting.conventions import conventions
from app.accounting.errors import InvalidInput
from app.accounting.params import ParamCount, count_params, layer_params, norm_params
from app.accounting.records import RECORD
from app.accounting.transformer import TransformerConfig, check_bounds

__all__ = ["TransformerConfig", "check_bounds", "ParamCount", "count_params", "layer_params", "norm_params",
           "Preset", "PresetSummary", "presets", "find", "preset", "summarize"]


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    family: str
    description: str
    source: str
    config: TransformerConfig
    notes: tuple[str, ...] = ()
    """What this model's counts leave out or assume beyond its config (data/models.toml)."""
    published_format: str | None = None
    """The weight format its published checkpoint stores (inference/formats.py: mxfp4 for gpt-oss,
    fp8_e4m3_block128 for DeepSeek-V3); null where it is the model's own 16-bit dtype."""


@dataclass(frozen=True, slots=True)
class PresetSummary:
    """A named model with its resolved config and parameter count."""

    name: str
    family: str
    """The model family the dashboard groups presets by (Llama, Mixtral, DeepSeek...)."""
    description: str
    source: str
    config: TransformerConfig
    params: ParamCount
    warnings: list[str]
    """The conventions the counts rest on, and what they leave out."""
    published_format: str | None = None
    """The weight format its published checkpoint stores (GET /api/v1/quantization); null: 16-bit."""

    __pydantic_config__ = RECORD


def summarize(p: Preset) -> PresetSummary:
    return PresetSummary(p.name, p.family, p.description, p.source, p.config.resolved(),
                         count_params(p.config), [*p.notes, *conventions(p.config)], p.published_format)


@cache
def presets() -> dict[str, Preset]:
    """Named models from data/models.toml, in file order."""
    raw = tomllib.loads(resources.files("app.accounting").joinpath("data/models.toml").read_text())
    table = {}
    for entry in raw["model"]:
        entry = dict(entry)
        name, family = entry.pop("name"), entry.pop("family")
        description, source = entry.pop("description"), entry.pop("source")
        notes = tuple(entry.pop("notes", ()))
        published = entry.pop("published_format", None)
        # TOML arrays; the config holds tuples
        for field in ("mlp_only_layers", "layer_mixers", "mlp_free_layers"):
            if field in entry:
                entry[field] = tuple(entry[field])
        table[name] = Preset(name, family, description, source, TransformerConfig(**entry), notes, published)
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
