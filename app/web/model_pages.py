"""The model pages: /models lists the presets by family; /models/<name> shows one preset's
parameters by component, total against active, with the conventions its counts rest on
and its config; /models/custom?config=... the same for a pasted config (app/web/picker.py).

Every figure is GET /api/v1/models/{name}'s (or the import's), as the API sends it: the
page only arranges the ParamCount's components."""

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.web import picker
from app.web.templating import templates

router = APIRouter(include_in_schema=False)


def _embeddings(params: dict) -> int:
    return params["token_embedding"] + params["position_embedding"]


# (label, total, active per token) of each component; together they are params.total.
# Routed experts are the one component a token reads only part of: top_k of n_experts.
COMPONENTS = (
    ("embeddings", _embeddings, _embeddings),
    ("attention", lambda p: p["attention"], lambda p: p["attention"]),
    ("router", lambda p: p["router"], lambda p: p["router"]),
    ("routed experts", lambda p: p["routed_experts"], lambda p: p["routed_experts_active"]),
    ("shared experts", lambda p: p["shared_experts"], lambda p: p["shared_experts"]),
    ("dense MLP", lambda p: p["mlp"], lambda p: p["mlp"]),
    ("norms", lambda p: p["norms"], lambda p: p["norms"]),
    ("head", lambda p: p["lm_head"], lambda p: p["lm_head"]),
)


def components(params: dict) -> list[dict]:
    """The non-zero components of a ParamCount (as JSON), in the order a token meets them:
    [{label, total, active}]; their totals sum to params.total and their actives to
    params.active. A dense model's MLP is plain "MLP"."""
    rows = [{"label": label, "total": total(params), "active": active(params)}
            for label, total, active in COMPONENTS if total(params)]
    if not params["routed_experts"]:
        for row in rows:
            row["label"] = "MLP" if row["label"] == "dense MLP" else row["label"]
    return rows


def chart(name: str, rows: list[dict]) -> dict:
    """Two stacked bars, all parameters and those one token reads, one segment per component."""
    return {"type": "param_parts", "bars": ["all parameters", "active per token"], "model": name,
            "parts": [{"label": r["label"], "values": [r["total"], r["active"]]} for r in rows]}


@router.get("/models", response_class=HTMLResponse)
def model_list(request: Request) -> HTMLResponse:
    """The presets by family, each with its total and active parameters."""
    from app.accounting import models

    summaries = {name: models.summarize(p) for name, p in models.presets().items()}
    by_family: dict[str, list] = {}
    for s in summaries.values():
        by_family.setdefault(s.family, []).append(s)
    return templates.TemplateResponse(request, "models.html", {"families": by_family})


@router.get("/models/{name}", response_class=HTMLResponse)
def model_page(request: Request, name: str, config: str = "") -> HTMLResponse:
    """A preset, or with name "custom" the pasted `config`: a refusal is the API's message,
    naming the key, on the page (422; an unknown preset 404)."""
    custom = name == picker.CUSTOM
    described, refused = picker.describe(name, config)
    context = {"name": name, "custom": custom, "config_text": config}
    if refused is not None:
        message = picker.config_errors(refused["detail"]) if custom else refused["detail"][0]["msg"]
        return templates.TemplateResponse(request, "model.html", context | {"message": message},
                                          status_code=422 if custom else 404)
    rows = components(described.params)
    query = {"model": name} | ({picker.CONFIG: config} if custom else {})
    context |= {"model": described, "rows": rows, "chart": chart(name, rows), "query": urlencode(query)}
    return templates.TemplateResponse(request, "model.html", context)
