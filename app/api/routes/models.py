"""Model presets, and Hugging Face config.json import."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Response

from app.accounting import hf, models
from app.accounting.errors import InvalidInput
from app.api.errors import NOT_FOUND, REQUEST_ERRORS, NotFound
from app.api.openapi import examples
from app.api.responses import respond
from app.inputs.schemas import Page

# Fixed paths come before "/{...}" ones, so OPTIONS and 405 answer with the
# methods of the route the path names.
router = APIRouter(prefix="/models", tags=["models"])

# LLaMA-2-7B's config.json (the keys that matter).
IMPORT = examples(llama2_7b_config={
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096})
PresetParam = Annotated[str, Path(max_length=60, openapi_examples=examples(gpt2="gpt2"))]


@router.get("", response_model=Page[models.PresetSummary])
async def list_models() -> Response:
    """Every preset with its family and its total and active parameters.

    `params.total` counts all of a model's parameters; `params.active` those one token's
    forward pass reads: the dense parts, the routers, the shared experts and top_k of the
    routed experts (equal to total for a dense model). Each preset also gives its parameters
    by component, its resolved config, and `warnings`: the conventions the counts rest on."""
    data = [models.summarize(p) for p in models.presets().values()]
    return respond(Page(data=data, count=len(data)))


@router.post("/import", response_model=hf.ImportedModel, responses=REQUEST_ERRORS)
async def import_model(
    config: Annotated[dict[str, Any], Body(
        description=f"A Hugging Face config.json (model_type {', '.join(hf.SUPPORTED)}). Nothing is "
                    "fetched. A key that changes the count but that model_type does not read is "
                    "refused; unknown keys are listed in warnings.",
        openapi_examples=IMPORT)],
) -> Response:
    """Read a Hugging Face config.json into a TransformerConfig, with its parameters."""
    return respond(hf.import_config(config))


@router.get("/{name}", response_model=models.PresetSummary, responses=NOT_FOUND)
async def read_model(name: PresetParam) -> Response:
    """One preset by name, with its total and active parameters.

    As each entry of the listing: family, config, parameters by component and warnings."""
    try:
        return respond(models.summarize(models.find(name, field="name")))
    except InvalidInput as e:
        raise NotFound(e.field, e.message) from None
