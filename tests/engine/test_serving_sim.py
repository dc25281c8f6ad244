"""The serving simulator's self-checks: queueing sanity (Little's law on its own output, one prefill at
vanishing load, an unbounded queue past saturation), vLLM V1's scheduling rules at their edges
(chunking, preemption, prefix hits, drafts), and determinism by seed."""

import math

import pytest

from app.accounting import hardware
from app.accounting.inference import latency
from app.accounting.serving import catalogue, traffic
from app.accounting.serving.engine import Engine, Req
from app.api.services.inference import InferenceTimeRequest, timing
from app.api.services.simulate import SimulateRequest, engine_config, requests_of, served, simulate
from app.inputs.schemas import engine_model

H100_8B = {"model": "llama3-8b", "gpu": "h100-sxm"}
VARIED = {
    "prompt_tokens": {"distribution": "lognormal", "mean": 300, "spread": 0.8, "maximum": 2048},
    "output_tokens": {"distribution": "lognormal", "mean": 200, "spread": 0.8, "maximum": 1024},
}


def run(**fields):
    body = SimulateRequest.model_validate(H100_8B | fields)
    return body, simulate(body)


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    _, a = run(rate_per_s=8, requests=300, seed=3, **VARIED)
    _, b = run(rate_per_s=8, requests=300, seed=3, **VARIED)
    _, c = run(rate_per_s=8, requests=300, seed=4, **VARIED)
    assert a == b
    assert a.end_to_end != c.end_to_end


def test_at_vanishing_load_the_first_token_takes_one_prefill_and_each_next_one_decode_step():
    """Requests a minute apart never meet: TTFT is the prompt's prefill pass alone and TPOT the mean of
    one sequence's decode steps over its growing context, as latency.py times each pass."""
    body, answer = run(rate_per_s=1 / 60, requests=5, prompt_tokens=700, output_tokens=40)
    setup = body.setup()
    on = timing(body, setup, None, None, "continuous").on
    prefill = latency.prefill_kernels(setup, on, prompt=700).seconds
    steps = [
        latency.decode_kernels(setup, on, latency._per_sequence(setup, c), 1).seconds
        for c in range(700, 700 + 39)
    ]
    assert answer.time_to_first_token.p50 == pytest.approx(prefill, rel=1e-9)
    assert answer.time_to_first_token.max == pytest.approx(prefill, rel=1e-9)
    assert answer.time_per_output_token.mean == pytest.approx(sum(steps) / 39, rel=1e-9)
    assert answer.preemptions == 0 and not answer.saturated


def test_littles_law_holds_on_the_simulated_queue():
    """The queue the steps record (waiting and running, time-averaged) equals the arrival rate times the
    mean time in the system, both over the run."""
    _, answer = run(rate_per_s=20, requests=2000, **VARIED)
    assert not answer.saturated
    assert answer.mean_requests_in_system == pytest.approx(answer.little_law_requests, rel=0.02)


def test_past_saturation_the_queue_grows_without_bound_and_the_answer_says_so():
    _, over = run(rate_per_s=200, requests=3000, **VARIED)
    assert over.saturated
    assert any("Saturated" in note for note in over.notes)
    assert over.requests_per_sec < 0.5 * over.offered_rate_per_s
    _, under = run(rate_per_s=5, requests=1000, **VARIED)
    assert not under.saturated and not under.notes


def test_a_long_prompt_is_chunked_by_the_token_budget():
    """max_num_batched_tokens 256: a 1000-token prompt takes ceil(1000/256) = 4 steps to its first token,
    then one step a token."""
    _, answer = run(
        rate_per_s=1 / 60, requests=1, prompt_tokens=1000, output_tokens=10, max_num_batched_tokens=256
    )
    assert answer.pools[0].steps == 4 + 9
    body, whole = run(rate_per_s=1 / 60, requests=1, prompt_tokens=1000, output_tokens=10)
    assert answer.time_to_first_token.p50 > whole.time_to_first_token.p50


def test_when_blocks_run_out_the_last_running_request_is_preempted_and_recomputed():
    """A cache of few blocks (gpu_memory_utilization low) and many long requests at once: requests are
    preempted, every one still finishes with all its tokens, and recomputation shows in the prefill."""
    body, answer = run(
        rate_per_s=1000, requests=120, prompt_tokens=900, output_tokens=600, gpu_memory_utilization=0.25
    )
    blocks = engine_config(body, body.setup()).num_blocks
    assert blocks * 16 < 120 * 1500  # the whole load cannot be held at once
    assert answer.preemptions > 0 and answer.preempted_requests > 0
    assert answer.prefill_tokens_computed > answer.prompt_tokens
    assert answer.pools[0].peak_kv_cache_used <= 1.0
    assert answer.requests == 120 and answer.output_tokens_per_sec * answer.duration_s == pytest.approx(
        120 * 600
    )


def test_running_never_exceeds_max_num_seqs():
    _, answer = run(rate_per_s=400, requests=800, prompt_tokens=64, output_tokens=200, max_num_seqs=32)
    assert max(p.running for p in answer.pools[0].points) <= 32
    assert max(p.waiting for p in answer.pools[0].points) > 0


def test_a_shared_prefix_is_computed_once_then_hit_in_whole_blocks():
    """One system prompt of 500 tokens before 60-token questions, a request a minute: the first computes
    560 tokens; each later one finds floor(500 / 16) = 31 blocks (496 tokens) cached."""
    _, answer = run(
        rate_per_s=1 / 60, requests=10, prompt_tokens=60, output_tokens=5, prefix_tokens=500, prefix_groups=1
    )
    assert answer.prompt_tokens == 10 * 560
    assert answer.prefill_tokens_computed == 560 + 9 * (560 - 496)
    _, off = run(
        rate_per_s=1 / 60,
        requests=10,
        prompt_tokens=60,
        output_tokens=5,
        prefix_tokens=500,
        prefix_groups=1,
        enable_prefix_caching=False,
    )
    assert off.prefill_tokens_computed == 10 * 560
    assert answer.time_to_first_token.p50 < off.time_to_first_token.p50


def test_a_hit_rate_skips_that_share_of_each_prompt_in_whole_blocks():
    _, answer = run(rate_per_s=2, requests=50, prompt_tokens=1000, output_tokens=8, prefix_hit_rate=0.5)
    assert answer.prefill_tokens_computed == 50 * (1000 - 500 // 16 * 16)


@pytest.mark.parametrize(("k", "alpha"), [(1, 0.8), (3, 0.6)])
def test_drafts_are_accepted_at_the_given_rate(k, alpha):
    """Each draft accepted with chance alpha once the ones before were: vLLM's acceptance rate is
    sum(alpha^i, i = 1..k) / k and its mean acceptance length 1 + sum(alpha^i)."""
    _, answer = run(
        rate_per_s=5,
        requests=400,
        prompt_tokens=128,
        output_tokens=200,
        speculative={"method": "mtp", "num_speculative_tokens": k, "acceptance_rate": alpha},
    )
    expected = sum(alpha**i for i in range(1, k + 1))
    assert answer.draft_acceptance_rate == pytest.approx(expected / k, abs=0.02)
    assert answer.mean_acceptance_length == pytest.approx(1 + expected, abs=0.05)
    _, plain = run(rate_per_s=5, requests=400, prompt_tokens=128, output_tokens=200)
    assert answer.time_per_output_token.p50 < plain.time_per_output_token.p50


def test_disaggregated_prefill_sends_each_prompts_cache_over_the_link():
    """At vanishing load a prompt's transfer takes its bytes over the link: 2 x 32 layers x 8 KV heads x
    128 x 2 bytes = 131,072 bytes a token for Llama-3-8B in bf16."""
    link = 50e9
    _, answer = run(
        rate_per_s=1 / 60,
        requests=4,
        prompt_tokens=1000,
        output_tokens=20,
        disaggregated={"prefill_gpus": 1, "kv_transfer_bytes_per_sec": link},
    )
    assert answer.kv_transfer.p50 == pytest.approx(1000 * 131_072 / link)
    _, together = run(rate_per_s=1 / 60, requests=4, prompt_tokens=1000, output_tokens=20)
    assert answer.time_to_first_token.p50 > together.time_to_first_token.p50 + answer.kv_transfer.p50
    assert [p.pool for p in answer.pools] == ["prefill", "decode"]
    assert answer.gpu_hours == pytest.approx(2 * answer.duration_s / 3600)


def test_replicas_share_the_traffic_round_robin():
    body, two = run(rate_per_s=30, requests=600, num_gpus=2, tensor_parallel=1, **VARIED)
    assert two.pools[0].replicas == 2
    _, one = run(rate_per_s=15, requests=300, **VARIED)
    assert two.time_per_output_token.p50 == pytest.approx(one.time_per_output_token.p50, rel=0.15)


def test_lengths_draw_as_vllms_random_dataset():
    rng_lengths = traffic.Lengths("uniform", 1024, 0.25)
    reqs = traffic.generate(
        rate_per_s=1, count=4000, prompt=rng_lengths, output=traffic.Lengths("fixed", 128)
    )
    assert min(reqs.prompt_tokens) == 768 and max(reqs.prompt_tokens) == 1280
    gaps = [b - a for a, b in zip(reqs.arrival_s, reqs.arrival_s[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(1.0, rel=0.05)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    assert cv == pytest.approx(1.0, rel=0.06)  # exponential gaps: a Poisson process


@pytest.mark.parametrize("extra", [
    {},
    {"speculative": {"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": 0.7}},
    {"prefix_tokens": 256, "prefix_groups": 3, "gpu_memory_utilization": 0.3},
], ids=["plain", "drafts", "prefixes-tight-cache"])
def test_decode_steps_run_together_give_what_scheduling_each_alone_gives(extra):
    """The engine runs decode steps alike together (runs.py); scheduling every step alone instead
    gives the same first-token and finish times and the same tokens."""
    body = SimulateRequest.model_validate(H100_8B | VARIED | {"rate_per_s": 12, "requests": 300} | extra)
    deployment = served(body)
    reqs = requests_of(body)
    times = []
    for batch in (True, False):
        wanted = [Req(i, reqs.arrival_s[i], reqs.prompt_tokens[i], reqs.output_tokens[i],
                      reqs.prefix_group[i]) for i in range(len(reqs))]
        pool = deployment.pool
        engine = Engine(pool.config, pool.step, drafter=pool.drafter, batch_runs=batch)
        series = engine.run(wanted, reqs.prefix_tokens)
        times.append(([r.first for r in wanted], [r.finish for r in wanted], series.decode_tokens,
                      series.accepted))
    (first, finish, decoded, accepted), (first_alone, finish_alone, decoded_alone, accepted_alone) = times
    assert first == pytest.approx(first_alone, rel=1e-12) and finish == pytest.approx(finish_alone, rel=1e-12)
    assert (decoded, accepted) == (decoded_alone, accepted_alone)


@pytest.mark.parametrize("launch", ["eager", "graph"])
def test_the_serve_probes_catalogue_step_is_the_time_calculators_pass(launch):
    """On a catalogue GPU the serve probe also simulates with Tally's own step (serving/catalogue.py): a
    700-token prefill and a decode step at context 900 take what POST /api/v1/inference/time's passes
    take for the same model, GPU and launch (unpaged, the defaults' efficiencies)."""
    body = InferenceTimeRequest.model_validate({"model": "llama3-8b", "gpu": "h100-sxm", "launch": launch,
                                                "block_size": None})
    setup = body.setup()
    on = timing(body, setup, None, None).on
    cfg, h100 = engine_model("llama3-8b"), hardware.gpu("h100-sxm")
    step = catalogue.step_model(cfg, h100, "bfloat16", launch=launch)
    prefill = step.seconds(tokens=700, sequences=1, read_bytes=0, attention=step.chunk(0, 700))
    decode = step.seconds(tokens=1, sequences=1, read_bytes=step.read(900), attention=0.0)
    assert prefill == pytest.approx(latency.prefill_kernels(setup, on, prompt=700).seconds, rel=1e-12)
    assert decode == pytest.approx(
        latency.decode_kernels(setup, on, latency._per_sequence(setup, 900), 1).seconds, rel=1e-12)
