"""How result dataclasses describe themselves to pydantic, without importing it.

pydantic reads `__pydantic_config__` from plain dataclasses: field docstrings
become OpenAPI descriptions, and a non-finite float is written as a bare
Infinity/NaN token (invalid JSON a client cannot miss) instead of pydantic's
default silent null. Request bounds keep every result finite; tests check it.
"""

RECORD = {"use_attribute_docstrings": True, "ser_json_inf_nan": "constants"}
