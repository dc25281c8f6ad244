"""A calculator page's spec: a form over one request model and its service function
(app/api/services). Each input opens on the request model's own default, and its choice list
comes from the field's type, so a page never holds a value or a list the API would not use."""

import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel

from app.accounting import dtypes, models
from app.accounting.models import count_params
from app.api.compute import Narrow
from app.api.responses import defaults_applied, jsonable
from app.inputs.fields import members
from app.inputs.schemas import TransformerConfigIn
from app.jobs.store import Store
from app.web import custom_gpu, forms, picker

Compute = Callable[[Any, Store], Any]
"""(validated request, job store) -> the engine's result; only a measured MFU reads the store."""


@dataclass(frozen=True)
class Input:
    name: str
    label: str
    default: str | None = None
    """None: the request model's own default (the one source: a page never opens on a value
    the API would not use). Given only where the model has none: a required field's example
    (params, m), or an optional field's (stride, gpu), which the API computes without."""
    hint: str = ""
    choices: tuple[str, ...] = ()
    """Filled from the request model's type: its Literal values, true/false, or a small int range;
    led by "" (none) where the field is optional."""
    is_list: bool = False
    """Comma-separated integers, sent as a JSON list."""
    typed: bool = False
    """A text box even where the type lists values beside a number (mfu: 0.5 or "measured")."""
    text: bool = False
    """Sent as a JSON string, never as a number: the model reads a string exactly (value: "0.1")."""
    more: bool = False
    """A setting most answers leave at its default: listed under "More settings", closed."""


def _text(value: Any) -> str:
    """A model default as a form field holds it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    return str(value)


def _with_default(model: type[BaseModel], field: Input) -> Input:
    info = model.model_fields[field.name]
    own = None if info.is_required() else info.default
    if own is not None:
        if field.default is not None:
            raise ValueError(f"{model.__name__}.{field.name} has a default ({own!r}): the page takes it")
        return replace(field, default=_text(own))
    if field.default is None and info.is_required():
        raise ValueError(f"{model.__name__}.{field.name} is required: give the page an example")
    return field if field.default is not None else replace(field, default="")


def _offered(value: Any, listed: list[Any]) -> bool:
    """A format's alias (bf16, fp32) is not offered beside its name; a name that is only a
    dtype's alias elsewhere (fp8_e4m3, a weight format) is offered where it is no alias."""
    if not isinstance(value, str) or value not in dtypes.accepted_names():
        return True
    name = dtypes.lookup(value).name
    return name == value or name not in listed


def choices(model: type[BaseModel], name: str) -> tuple[str, ...]:
    info = model.model_fields[name]
    kinds = members(info.annotation)
    values = [v for m in kinds if typing.get_origin(m) is Literal for v in typing.get_args(m)]
    if values:
        return tuple(str(v) for v in values if _offered(v, values))
    if kinds == [bool]:
        return ("false", "true")
    lo = next((m.ge for m in info.metadata if isinstance(m, Ge)), None)
    hi = next((m.le for m in info.metadata if isinstance(m, Le)), None)
    if kinds == [int] and lo is not None and hi is not None and hi - lo < 8:
        return tuple(str(v) for v in range(lo, hi + 1))
    return ()


Charts = Callable[[Any, dict, Store], dict]
"""(validated request, the answer as the API's JSON, job store) -> chart specs."""


@dataclass(frozen=True)
class Calculator:
    slug: str
    title: str
    lead: str
    request: type[BaseModel]
    compute_with: Compute
    inputs: tuple[Input, ...]
    charts: Charts | None = None
    takes_model: Literal["model", "params"] | None = None
    heavy: Narrow | None = None
    """Set where a form can ask for seconds of work (a search, a sweep, a huge pasted model): the
    page computes in the server's worker processes (app/api/compute.py), within their budget,
    and this says what to narrow when it runs out."""
    """The page's model picker (app/web/picker.py), with its box for a pasted config. "model":
    the input named model is the picker, sent as the request's `model` (a preset name, or the
    config inline). "params": the request takes a parameter count, and the picker (a field of
    the page only, "" for none) sends the picked model's active parameters as `params`."""

    def __post_init__(self) -> None:
        filled = []
        for i in self.inputs:
            i = _with_default(self.request, i)
            if not (i.choices or i.typed):
                listed = choices(self.request, i.name)
                optional = listed and self.request.model_fields[i.name].default is None \
                    and not self.request.model_fields[i.name].is_required()
                i = replace(i, choices=("", *listed) if optional else listed)
            if i.name == "gpu" and self.takes_gpu:
                i = replace(i, choices=(*i.choices, custom_gpu.CHOICE))
            filled.append(i)
        object.__setattr__(self, "inputs", tuple(filled))

    @property
    def names(self) -> set[str]:
        return {i.name for i in self.inputs} | set(self.page_fields)

    @property
    def takes_gpu(self) -> bool:
        """The request's gpu may be a custom GPU: the page offers its boxes (app/web/custom_gpu.py)."""
        return custom_gpu.takes(self.request)

    @property
    def page_fields(self) -> tuple[str, ...]:
        """Fields of the page that are no field of the request: the pasted config, the picker
        itself where the request takes a parameter count, and a custom GPU's boxes."""
        model = {"model": (picker.CONFIG,), "params": ("model", picker.CONFIG), None: ()}[self.takes_model]
        return model + (custom_gpu.NAMES if self.takes_gpu else ())

    def form(self, query: dict[str, str], *, defaults: bool) -> dict[str, str]:
        names = [i.name for i in self.inputs] + list(self.page_fields)
        given = {name: query[name] for name in names if name in query}
        if self.takes_model and query.get(picker.CONFIG, "").strip() and "model" not in query:
            given["model"] = picker.CUSTOM  # /flops?config=...: a shared config needs no more
        base = {i.name: i.default for i in self.inputs} | {name: "" for name in self.page_fields}
        return (base if defaults else {}) | given

    def compute(self, jobs: Store, form: dict[str, str]) -> dict[str, Any]:
        """The fragment's context. Blocking (a measured MFU reads the database): run it off the loop."""
        payload = forms.body(form, [i.name for i in self.inputs],
                             lists={i.name for i in self.inputs if i.is_list},
                             texts={i.name for i in self.inputs if i.text})
        custom_gpu.send(form, payload)
        picked = None
        if self.takes_model:
            picked = picker.pick(form.get("model", ""), form.get(picker.CONFIG, ""))
            refused = picked.refused or self._send_model(picked, payload)
            if refused is not None:
                return self._refusal(refused, form, all_config=True)
        outcome, refused = forms.run(self.request, payload,
                                     lambda body: (body, self.compute_with(body, jobs)))
        if refused is not None:
            return self._refusal(refused, form)
        body, result = outcome
        # Fields the page has no input for, or left empty, and what the answer took for them.
        answer = jsonable(result) | {"defaults_applied": defaults_applied(body)}
        charts = self.charts(body, answer, jobs) if self.charts else {}
        return {"answer": answer, "errors": {}, "charts": charts, "picked": picked}

    def _send_model(self, picked: picker.Picked, payload: dict[str, Any]) -> dict | None:
        """Put the picked model into the request body: as `model`, or as its active parameters
        (`params`: 6 x N x D reads N as the FLOPs page's 6ND does). The refusal of a model that
        does not count, else None."""
        if picked.model is None:
            return None
        if self.takes_model == "model":
            payload["model"] = picked.model
            return None
        if isinstance(picked.model, str):
            cfg, refused = forms.run(picker.NAME, picked.model, models.preset)
        else:
            cfg, refused = forms.run(TransformerConfigIn, picked.model, lambda c: c.to_engine())
        if refused is None:
            picked.params = payload["params"] = count_params(cfg).active
        return refused

    def _refusal(self, refused: dict, form: dict[str, str], all_config: bool = False) -> dict[str, Any]:
        """The context of a refused form: each message beside its input, and those of fields
        the page has no input for above the result (a refusal never leaves a blank result).
        A pasted config's messages (all of the import's, or the request's model.*) go beside
        its box, each naming its key."""
        detail, config = refused["detail"], []
        if form.get("model") == picker.CUSTOM:
            config = detail if all_config else [i for i in detail if i["field"].split(".")[0] == "model"]
            detail = [i for i in detail if i not in config]
        boxed = {i["field"]: i for i in detail if custom_gpu.box_of(i["field"])}
        detail = [i for i in detail if i["field"] not in boxed]
        errors = forms.field_errors({"detail": detail})
        for field, item in boxed.items():
            errors.setdefault(custom_gpu.box_of(field), item["msg"])
        if config:
            errors[picker.CONFIG] = picker.config_errors(config)
        unplaced = [f"{i['field']}: {i['msg']}" for i in detail if i["field"].split(".")[0] not in self.names]
        return {"errors": errors, "message": refused["message"], "unplaced": unplaced,
                "launch": refused.get("launch")}
