"""The deployment search: its answer is the cheapest of what it simulated that meets the SLOs, one fewer
replica would not, its frontier is undominated, and each figure is what a simulation of that deployment
gives on its own."""

import pytest

from app.accounting.serving import frontier
from app.api.services.deploy import DeploySearchRequest, search
from app.api.services.simulate import SimulateRequest, simulate

TRAFFIC = {
    "model": "llama3-8b",
    "rate_per_s": 25,
    "requests": 300,
    "prompt_tokens": {"distribution": "lognormal", "mean": 800, "spread": 0.7, "maximum": 4000},
    "output_tokens": {"distribution": "lognormal", "mean": 200, "spread": 0.7, "maximum": 1500},
    "slo": {"ttft_s": 0.3, "tpot_s": 0.02},
}


@pytest.fixture(scope="module")
def found():
    body = DeploySearchRequest.model_validate(
        TRAFFIC
        | {
            "prices": {"h100-sxm": 2.5, "a100-80gb": 1.6},
            "weight_formats": ["bfloat16", "fp8_e4m3"],
            "max_gpus": 4,
        }
    )
    return body, search(body)


def test_the_best_is_the_cheapest_deployment_meeting_the_slos(found):
    _, answer = found
    best = answer.best
    assert best is not None and best.slo_met and not best.saturated
    assert best.ttft_s <= 0.3 and best.tpot_s <= 0.02
    met = [c for c in answer.candidates if c.slo_met]
    assert all(best.cost_per_million_output_tokens <= c.cost_per_million_output_tokens for c in met)
    failing = [c for c in answer.candidates if not c.slo_met]
    assert failing, "the search should have tried something too small"


def test_one_replica_fewer_would_not_meet_them(found):
    _, answer = found
    best = answer.best
    if best.replicas > 1 and not best.disaggregated:
        fewer = [
            c
            for c in answer.candidates
            if (c.gpu, c.weight_format, c.tensor_parallel, c.replicas, c.prefill_replicas)
            == (best.gpu, best.weight_format, best.tensor_parallel, best.replicas - 1, 0)
        ]
        assert fewer and not fewer[0].slo_met


def test_the_frontier_is_undominated_and_cheapest_first(found):
    _, answer = found
    front = answer.frontier
    assert front
    key = lambda c: (frontier.cost(c, "per_million_tokens"), c.ttft_s, c.tpot_s)  # noqa: E731
    costs = [key(c)[0] for c in front]
    assert costs == sorted(costs)
    for c in front:
        for o in answer.candidates:
            if o.saturated or o.ttft_s is None:
                continue
            assert not (all(a <= b for a, b in zip(key(o), key(c), strict=True)) and key(o) != key(c))


def test_the_best_figures_are_a_simulation_of_that_deployment_alone(found):
    body, answer = found
    best = answer.best
    fields = TRAFFIC | {
        "gpu": best.gpu,
        "weight_format": best.weight_format,
        "tensor_parallel": best.tensor_parallel,
        "num_gpus": best.replicas * best.tensor_parallel,
    }
    if best.disaggregated:
        fields["disaggregated"] = {"prefill_gpus": best.prefill_replicas * best.tensor_parallel}
    alone = simulate(SimulateRequest.model_validate(fields))
    assert alone.slo_met
    assert alone.time_to_first_token.p99 == pytest.approx(best.ttft_s)
    assert alone.time_per_output_token.p99 == pytest.approx(best.tpot_s)


def test_a_sweep_runs_the_same_traffic_at_each_rate():
    body = SimulateRequest.model_validate(TRAFFIC | {"gpu": "h100-sxm", "sweep_rates": [5, 25, 400]})
    answer = simulate(body)
    rates = [p.rate_per_s for p in answer.by_rate]
    assert rates == [5, 25, 400]
    low, same, high = answer.by_rate
    assert same.ttft_p99 == pytest.approx(answer.time_to_first_token.p99)
    assert low.tpot_p50 < same.tpot_p50
    assert high.saturated and high.slo_met is False


def test_engine_settings_are_searched_too():
    """max_num_seqs 1 serves one request at a time: at 25 requests/s its queue outgrows the SLO on any
    count the search allows, so every deployment that meets it runs the default's many."""
    body = DeploySearchRequest.model_validate(TRAFFIC | {"prices": {"h100-sxm": 2.5}, "max_gpus": 2,
                                                         "max_num_seqs_options": [1, 256],
                                                         "search_disaggregated": False})
    answer = search(body)
    assert {c.max_num_seqs for c in answer.candidates} == {1, 256}
    assert answer.best is not None and answer.best.max_num_seqs == 256
    assert not any(c.slo_met for c in answer.candidates if c.max_num_seqs == 1)
