"""Property-based tests of the whole OpenAPI document, in-process, all checks on.

One setting differs from schemathesis's defaults, on purpose: positive_data_acceptance
also expects 422. Some rules span fields (view_shape must hold as many elements as
shape; tensor_parallel must divide n_heads) and a JSON schema cannot state them, so
schema-valid data can still break them. To keep the check honest, a second check
requires that such a 422 comes only from those engine rules (type "invalid_input"),
never from a per-field check the schema should have stated.
"""

import os
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr

from app.config import get_settings
from app.main import create_app

TOKEN = "fuzz-token"
# A heavy calculation (a fit of a 27B model) runs in the server's worker pool, whose first use
# starts a process: seconds on a loaded two-core box, past schemathesis's 10 s default. The
# server's own budget (TALLY_COMPUTE_BUDGET_S) is what bounds a request; this only waits for it.
CHECKS = """
request-timeout = 60
[checks]
positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429"]
"""
AUTH = f"""
[auth.openapi.HTTPBearer]
bearer = "{TOKEN}"
"""


def _schema(token: str | None) -> schemathesis.BaseSchema:
    config = schemathesis.config.SchemathesisConfig.from_str(CHECKS + (AUTH if token else ""))
    # schemathesis's in-process client asks for Host testserver, which a loopback server
    # answers only when allowed. No embedded worker: the contract is the API's answers, and a
    # fuzzed job that ran would spend the suite's CPU on probes (and a data_loader's disk on its
    # file) while the cases go on.
    # A database of its own: the fuzzed campaigns and jobs it queues (a calibration campaign queues
    # ten) must not fill the queue of the test process's shared one (TALLY_QUEUE_LIMIT).
    own = Path(tempfile.mkdtemp(prefix="tally-fuzz-")) / "fuzz.db"
    app = create_app(get_settings().model_copy(update={"api_token": SecretStr(token) if token else None,
                                                       "allowed_hosts": ["testserver"],
                                                       "embedded_worker": False, "database_path": own,
                                                       "database_url": None}))
    # /readyz answers 503 without a dispatcher, as it should; tests/ops/test_ops.py checks both of
    # its answers, and it takes no input to fuzz.
    return schemathesis.openapi.from_asgi("/openapi.json", app, config=config).exclude(path="/readyz")


# Both ways a server runs. With a token, as a shared server would run: the auth checks then
# test that submitting and cancelling refuse requests without it. Without one, the document
# must not claim an authentication the server does not ask for (ST201, ST203, ST401).
with_token = _schema(TOKEN)
anonymous = _schema(None)


@schemathesis.check
def schema_valid_input_fails_only_engine_rules(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    # "too_many_errors" counts the problems past the first 20, each of which is listed kind or not.
    kinds = {item["type"] for item in response.json()["detail"]} - {"too_many_errors"}
    if kinds != {"invalid_input"}:
        raise AssertionError(f"schema-valid input refused by a per-field check: {response.text[:500]}")
    return None


# CI runs a fixed set of cases (derandomize), so a run fails only when the code changed;
# `make fuzz` explores fresh random cases, many more per operation.
EXAMPLES = int(os.environ.get("TALLY_FUZZ_EXAMPLES", "60"))
RANDOM = os.environ.get("TALLY_FUZZ_RANDOM") == "1"


FUZZ = settings(max_examples=EXAMPLES, derandomize=not RANDOM, deadline=None,
                suppress_health_check=list(HealthCheck))
# Without a token only the auth checks differ (the document must claim no authentication the
# server does not ask for); every handler already ran its EXAMPLES cases with one. A third of them
# keeps those checks on every operation at a third of the time.
FUZZ_ANONYMOUS = settings(FUZZ, max_examples=max(1, EXAMPLES // 3))


@with_token.parametrize()
@FUZZ
def test_openapi_contract_with_a_token(case):
    case.call_and_validate()


@anonymous.parametrize()
@FUZZ_ANONYMOUS
def test_openapi_contract_without_a_token(case):
    case.call_and_validate()
