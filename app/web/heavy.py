"""A heavy calculator page's computation in a compute worker (app/api/compute.py): the page's whole
context (its answer, charts and refusals), computed there as the page would compute it here.
Imported by the pool's fork server, with the pages' calculators."""

from typing import Any

from app.api.compute_tasks import StoreRef, guarded, store_of
from app.web.calculators import CALCULATORS


@guarded
def page(slug: str, form: dict[str, str], store: StoreRef) -> dict[str, Any]:
    """CALCULATORS[slug].compute(store, form), on the worker's own connection to the store."""
    return CALCULATORS[slug].compute(store_of(store), form)
