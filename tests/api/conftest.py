"""The API's surface: every refusal a 4xx naming its field, the OpenAPI document and its examples,
field names other tools call, and `tally calc` answering as the API does. Part of `make test-fast`,
but for what is marked slow (`tally probe` running real probes). Schemathesis over every
operation is in tests/fuzz/."""
