"""POST /api/v1/inference/simulate: answers, and refusals that name the field (a trace's row and column)."""

import pytest

from tests.support.api import Api, assert_names_field

BASE = {"model": "llama3-8b", "gpu": "h100-sxm"}


@pytest.fixture(scope="module")
def api():
    client = Api()
    yield client
    client.close()


def test_a_trace_is_simulated_in_its_own_order(api):
    trace = "arrival_s,prompt_tokens,output_tokens\n0.5,200,20\n0.0,100,10\n\n1.0,300,30\n"
    answer = api.ok("/api/v1/inference/simulate", BASE | {"trace": trace})
    assert answer["requests"] == 3
    assert answer["prompt_tokens"] == 600
    assert answer["output_tokens_per_sec"] * answer["duration_s"] == pytest.approx(60)


def test_a_jsonl_trace_is_read_too(api):
    trace = ('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 4}\n'
             '{"arrival_s": 2, "prompt_tokens": 12, "output_tokens": 4}\n')
    assert api.ok("/api/v1/inference/simulate", BASE | {"trace": trace})["requests"] == 2


@pytest.mark.parametrize(
    ("trace", "where"),
    [
        ("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,12.5,10\n", "row 3, column prompt_tokens"),
        ("arrival_s,prompt_tokens,output_tokens\n0,100,10\n-1,100,10\n", "row 3, column arrival_s"),
        ("arrival_s,prompt_tokens,output_tokens\nsoon,100,10\n", "row 2, column arrival_s"),
        ("arrival_s,prompt_tokens\n0,100\n", "row 1 (the header) lacks the column 'output_tokens'"),
        (
            '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n'
            '{"arrival_s": 1, "prompt_tokens": 3}\n',
            "row 2, column output_tokens: missing",
        ),
        (
            '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\nnot json\n',
            "row 2 is not a JSON object",
        ),
    ],
)
def test_a_bad_trace_is_refused_at_its_first_bad_value(api, trace, where):
    body = assert_names_field(api.post("/api/v1/inference/simulate", BASE | {"trace": trace}), "trace")
    assert where in body["message"]


def test_refusals_name_the_field(api):
    post = lambda extra: api.post("/api/v1/inference/simulate", BASE | extra)  # noqa: E731
    assert_names_field(post({}), "rate_per_s")
    assert_names_field(post({"rate_per_s": 1, "engine": "sglang"}), "engine")
    assert_names_field(post({"rate_per_s": 1, "prompt_tokens": 8000, "output_tokens": 1000}), "output_tokens")
    assert_names_field(
        post({"rate_per_s": 1, "trace": "arrival_s,prompt_tokens,output_tokens\n0,1,1\n"}), "trace"
    )
    assert_names_field(
        post({"rate_per_s": 1, "prompt_tokens": {"distribution": "uniform", "mean": 100, "spread": 1.5}}),
        "prompt_tokens.spread",
    )
    assert_names_field(
        post({"rate_per_s": 1, "speculative": {"method": "draft_model", "acceptance_rate": 0.5}}),
        "speculative.draft_model",
    )
    assert_names_field(post({"rate_per_s": 1, "requests": 10**6}), "requests")


SEARCH = {"model": "llama3-8b", "rate_per_s": 5, "requests": 100, "prompt_tokens": 500, "output_tokens": 100,
          "prices": {"h100-sxm": 2.5}, "max_gpus": 2, "slo": {"ttft_s": 0.5, "tpot_s": 0.05}}


def test_the_search_answers_over_the_route(api):
    answer = api.ok("/api/v1/inference/search", SEARCH)
    assert answer["best"]["gpu"] == "h100-sxm" and answer["best"]["slo_met"]
    assert answer["candidates"][0]["num_gpus"] == 1


def test_search_refusals_name_the_field(api):
    post = lambda extra: api.post("/api/v1/inference/search", SEARCH | extra)  # noqa: E731
    assert_names_field(post({"slo": None}), "slo")
    assert_names_field(post({"prices": {}}), "prices")
    assert_names_field(post({"prices": {"no-such-gpu": 1.0}}), "prices.no-such-gpu.[key]")
    assert_names_field(post({"flops_efficiency": "measured"}), "flops_efficiency")
    assert_names_field(post({"prompt_tokens": 9000}), "output_tokens")
