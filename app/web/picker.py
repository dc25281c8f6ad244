"""The model picker of every page that takes a model: the presets grouped by family, each
named with its total and active parameters, or a pasted config.

A pasted config is read as the API reads one: a Hugging Face config.json (it names its
model_type) through the import (`POST /api/v1/models/import`, app.accounting.hf), anything
else as an inline TransformerConfig, the `model` object every calculator takes. Either way a
refusal is the API's error body, naming the key at fault, and the page shows it; the page
then sends the imported config as an inline `model`, so one request model validates both.
"""

from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import quote, urlencode

from pydantic import TypeAdapter

from app import numbers
from app.accounting import hf, models
from app.accounting.conventions import conventions
from app.accounting.errors import InvalidInput
from app.api import errors
from app.api.errors import DuplicateKey, TooManyKeys
from app.api.responses import jsonable
from app.api.strict_json import loads
from app.inputs.schemas import TransformerConfigIn
from app.web import forms

CUSTOM = "custom"
"""The picker's value for "the pasted config", and the model page of one (/models/custom)."""
CONFIG = "config"
"""The page field (and query parameter) that holds a pasted config."""

_BODY = TypeAdapter(dict[str, Any])  # the import route's body: any JSON object
NAME = TypeAdapter(str)
"""A preset's name, for forms.run: models.find refuses an unknown one naming `model`."""


@dataclass(frozen=True)
class Option:
    value: str
    text: str


def option_text(name: str, params: models.ParamCount) -> str:
    """'mixtral-8x7b (46.7 B total, 12.9 B active)'; a dense model, whose every parameter is
    active, shows its one count: 'gpt2 (124.4 M params)'."""
    if params.active == params.total:
        return f"{name} ({numbers.amount(params.total)} params)"
    return f"{name} ({numbers.amount(params.total)} total, {numbers.amount(params.active)} active)"


@cache
def groups() -> tuple[tuple[str, tuple[Option, ...]], ...]:
    """(family, its presets) in data/models.toml's order: the picker's <optgroup>s."""
    by_family: dict[str, list[Option]] = {}
    for p in models.presets().values():
        text = option_text(p.name, models.count_params(p.config))
        by_family.setdefault(p.family, []).append(Option(p.name, text))
    return tuple((family, tuple(options)) for family, options in by_family.items())


@dataclass
class Picked:
    """What the page sends as `model`, and what it says about it."""

    model: str | dict | None = None
    """A preset name, a TransformerConfig as JSON, or None (nothing picked)."""
    source: str = ""
    """In words, for the result: 'mixtral-8x7b', 'the pasted config.json (mixtral)'."""
    warnings: list[str] = field(default_factory=list)
    """The import's warnings: keys it ignored, conventions it chose."""
    refused: dict | None = None
    """The API's error body for a config that cannot be read; its fields are the config's keys."""
    params: int | None = None
    """Its active parameters, where the page sends them as `params` (the time page)."""
    page: str = ""
    """Its model page: /models/<name>, or /models/custom?config=... (the config as pasted)."""


def _refused(e: InvalidInput) -> Picked:
    return Picked(refused=errors.error_body([errors.invalid_input_item(e)]))


def parse(text: str) -> Any:
    """The pasted text as JSON, refused as the API refuses a body: malformed JSON, a key named
    twice (naming it), an object too large. Raises InvalidInput."""
    try:
        return loads(text)
    except DuplicateKey as e:
        raise InvalidInput(e.key, str(e.detail)) from None
    except TooManyKeys as e:
        raise InvalidInput(CONFIG, str(e.detail)) from None
    except ValueError as e:  # json.JSONDecodeError: where it broke, as an editor counts
        raise InvalidInput(CONFIG, f"malformed JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None


def pick(model: str, config: str) -> Picked:
    """The model a page's picker and config box name. `model` is a preset name (validated
    later by the request model, which refuses a near miss with "did you mean"), "" for none,
    or CUSTOM for the pasted `config`."""
    if model != CUSTOM:
        return Picked(model or None, model, page=f"/models/{quote(model, safe='')}" if model else "")
    if not config.strip():
        return _refused(InvalidInput(CONFIG, "paste a config.json (with its model_type) or a "
                                             "TransformerConfig as JSON, or pick a preset"))
    try:
        raw = parse(config)
    except InvalidInput as e:
        return _refused(e)
    if not isinstance(raw, dict):
        return _refused(InvalidInput(CONFIG, "must be a JSON object: a config.json or a TransformerConfig"))
    page = f"/models/{CUSTOM}?" + urlencode({CONFIG: config})
    if "model_type" not in raw:
        return Picked(raw, "the pasted TransformerConfig", page=page)
    imported, refused = forms.run(_BODY, raw, hf.import_config)
    if refused is not None:
        return Picked(refused=refused)
    return Picked(jsonable(imported.config), f"the pasted config.json ({imported.model_type})",
                  list(imported.warnings), page=page)


@dataclass
class Described:
    """A model as its page shows it: the answer of GET /api/v1/models/{name} for a preset,
    the same fields for a pasted config."""

    name: str
    family: str
    description: str
    source: str
    config: dict
    params: dict
    warnings: list[str]


def describe(model: str, config: str = "") -> tuple[Described | None, dict | None]:
    """(the model, None), or (None, the API's error body). A preset is summarized as the API
    does; a pasted config is imported or validated as the calculators do."""
    if model != CUSTOM:
        try:
            summary = models.summarize(models.find(model, field="name"))
        except InvalidInput as e:
            return None, errors.error_body([errors.invalid_input_item(e)])
        s = jsonable(summary)
        return Described(s["name"], s["family"], s["description"], s["source"], s["config"], s["params"],
                         s["warnings"]), None
    picked = pick(CUSTOM, config)
    if picked.refused is not None:
        return None, picked.refused
    cfg, refused = forms.run(TransformerConfigIn, picked.model, lambda c: c.to_engine())
    if refused is not None:
        return None, refused
    said = [w for w in conventions(cfg) if w not in picked.warnings]
    return Described(CUSTOM, "", picked.source, "", jsonable(cfg.resolved()),
                     jsonable(models.count_params(cfg)), [*picked.warnings, *said]), None


def config_errors(items: list[dict]) -> str:
    """A pasted config's refusal as one line for beside its box, each message with the key it
    names as the API names it ('model.top_k: 5 exceeds n_experts (4)', 'kv_lora_rank: ...')."""
    return "; ".join(i["msg"] if i["field"] in (CONFIG, "body") else f"{i['field']}: {i['msg']}"
                     for i in items)
