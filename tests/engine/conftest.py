"""The engine: the calculators (app/accounting) against figures they did not make: the course's
worked examples, papers' formulas and tables, model cards and datasheets, torch's own casts and
strides. Mostly through the API in-process (`api`), each refusal naming its field. Part of
`make test-fast`."""
