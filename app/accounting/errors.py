"""The one error the engine raises for input it cannot honour."""


class InvalidInput(ValueError):
    """Input that passes per-field checks but not the engine's own rules.

    `field` is the request field to blame (dotted for nested fields, e.g.
    "model.n_kv_heads"), so the API can answer 422 naming it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple:
        # Rebuilt from (field, message), not from Exception's args (the joined text): a worker
        # process raises it, the server answers it (app/api/compute.py).
        return type(self), (self.field, self.message)
