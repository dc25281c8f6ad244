"""The request vocabulary, pydantic only (no fastapi, no torch): field types with their bounds
(fields.py), quantities written as people write them (quantities.py: "70B", "80GB", "4k"), and
model and GPU specs (schemas.py). Every request model, the API's and the probes', is built from
these."""

from app.inputs import docstrings as _docstrings

_docstrings.install()  # before any model is built: each source file parsed once for its docstrings
