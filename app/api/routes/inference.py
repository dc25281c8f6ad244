"""Serving: memory per GPU, capacity, prefill and decode time; the weight formats."""

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from starlette.concurrency import run_in_threadpool

from app.accounting.inference import capacity, formats, latency, quant
from app.accounting.serving.frontier import DeploymentSearch
from app.accounting.serving.report import Simulation
from app.api.compute import HeavyDep, Narrow
from app.api.errors import HEAVY, REQUEST_ERRORS
from app.api.openapi import examples
from app.api.responses import answer, respond
from app.api.services import calibration, deploy, simulate
from app.api.services import inference as service
from app.api.services.inference import InferenceMemoryRequest, InferenceTimeRequest
from app.deps import store_of
from app.inputs.schemas import Page
from app.measured.here import read

router = APIRouter(tags=["inference"])

MEMORY = examples(
    llama3_70b_fp8_on_two_h100s_8k_16_users={
        "model": "llama3.1-70b", "weight_format": "fp8_e4m3", "gpu": "h100-sxm", "num_gpus": 2,
        "tensor_parallel": 2, "context": "8k", "concurrency": 16},
    llama2_7b_one_a100={"model": "llama2-7b", "gpu": "a100-80gb", "context": 4096, "concurrency": 8})
TIME = examples(
    llama3_70b_fp8_on_two_h100s={
        "model": "llama3.1-70b", "weight_format": "fp8_e4m3", "gpu": "h100-sxm", "num_gpus": 2,
        "tensor_parallel": 2, "prompt_tokens": 2048, "output_tokens": 256, "concurrency": 16,
        "price_per_gpu_hour": 2.5},
    llama2_7b_one_a100={"model": "llama2-7b", "gpu": "a100-80gb", "prompt_tokens": 512, "output_tokens": 32})
SIMULATE = examples(
    llama3_8b_on_one_h100_at_10_per_s={
        "model": "llama3-8b", "gpu": "h100-sxm", "rate_per_s": 10, "requests": 2000,
        "prompt_tokens": {"distribution": "lognormal", "mean": 512, "spread": 0.8, "maximum": 4096},
        "output_tokens": {"distribution": "lognormal", "mean": 256, "spread": 0.8, "maximum": 2048},
        "slo": {"ttft_s": 0.5, "tpot_s": 0.05}, "price_per_gpu_hour": 2.5},
    llama3_70b_fp8_disaggregated={
        "model": "llama3.1-70b", "weight_format": "fp8_e4m3", "gpu": "h100-sxm", "num_gpus": 2,
        "tensor_parallel": 2, "rate_per_s": 2, "requests": 500, "prompt_tokens": 2048, "output_tokens": 256,
        "disaggregated": {"prefill_gpus": 2}, "slo": {"ttft_s": 1.0, "tpot_s": 0.05}})
SEARCH = examples(
    llama3_70b_at_5_per_s_under_500ms_ttft={
        "model": "llama3.1-70b", "rate_per_s": 5, "requests": 300, "prices": {"h100-sxm": 2.5, "h200": 3.2},
        "weight_formats": ["fp8_e4m3"], "max_gpus": 4,
        "prompt_tokens": {"distribution": "lognormal", "mean": 1000, "spread": 0.8, "maximum": 6000},
        "output_tokens": {"distribution": "lognormal", "mean": 250, "spread": 0.8, "maximum": 2000},
        "slo": {"ttft_s": 0.5, "tpot_s": 0.05}})
MemoryBody = Annotated[InferenceMemoryRequest, Body(openapi_examples=MEMORY)]
# Routes are tried in the order written (app/api/router.py): the question asked most, first.


NARROW_TIME = Narrow("model", "a smaller model (fewer layers), or fewer prompt_tokens and output_tokens")


@router.post("/inference/time", response_model=answer(latency.InferenceTime),
             responses=REQUEST_ERRORS | HEAVY)
async def inference_time(body: Annotated[InferenceTimeRequest, Body(openapi_examples=TIME)],
                         request: Request, heavy: HeavyDep) -> Response:
    """Time to first token, inter-token latency, tokens/s, requests/s and cost: a pass kernel by kernel
    (launches, waves, the batching mix), with the roofline beside it."""
    # What is measured here (for measured efficiencies), read off the event loop, then the worker computes.
    needed = service.reads_store(body)
    here = await run_in_threadpool(read, store_of(request)) if needed else None
    profile = None if body.calibration is None else await run_in_threadpool(
        calibration.resolve, body.calibration, store_of(request))
    return await heavy.respond(service.serving_time, body, NARROW_TIME, here, profile)


NARROW_SIMULATE = Narrow("requests", "fewer requests (or a trace of fewer rows)")


@router.post("/inference/simulate", response_model=answer(Simulation), responses=REQUEST_ERRORS | HEAVY)
async def inference_simulate(body: Annotated[simulate.SimulateRequest, Body(openapi_examples=SIMULATE)],
                             request: Request, heavy: HeavyDep) -> Response:
    """A traffic of requests served step by step as vLLM V1 schedules them: TTFT, TPOT and end-to-end
    percentiles, throughput, goodput under SLOs, the queue and KV cache over time, preemptions."""
    needed = service.reads_store(body)
    here = await run_in_threadpool(read, store_of(request)) if needed else None
    profile = None if body.calibration is None else await run_in_threadpool(
        calibration.resolve, body.calibration, store_of(request))
    return await heavy.respond(simulate.simulate, body, NARROW_SIMULATE, here, profile)


NARROW_SEARCH = Narrow("prices", "fewer GPUs or weight_formats, a lower max_gpus, or fewer requests")


@router.post("/inference/search", response_model=answer(DeploymentSearch), responses=REQUEST_ERRORS | HEAVY)
async def inference_search(body: Annotated[deploy.DeploySearchRequest, Body(openapi_examples=SEARCH)],
                           heavy: HeavyDep) -> Response:
    """The cheapest deployment (GPU, count, tensor parallel, weight format, aggregated or disaggregated)
    that meets the SLOs at the rate, each candidate simulated; with the frontier of cost against latency."""
    return await heavy.respond(deploy.search, body, NARROW_SEARCH)


@router.post("/inference/memory", response_model=answer(capacity.InferenceMemory), responses=REQUEST_ERRORS)
async def inference_memory(body: MemoryBody) -> Response:
    """Bytes per GPU of weights, KV cache, workspace and overhead, against the GPU's memory."""
    return respond(service.memory(body), body)


@router.post("/inference/capacity", response_model=answer(capacity.ServingCapacity), responses=REQUEST_ERRORS)
async def inference_capacity(body: MemoryBody) -> Response:
    """The most sequences at a context, and the longest context at a concurrency, that fit."""
    return respond(service.serving_capacity(body), body)


@router.get("/quantization", response_model=Page[formats.WeightFormat])
async def list_weight_formats() -> Response:
    """Every weight format: bits per weight, block layout, what stays unquantized, a source."""
    data = quant.list_formats()
    return respond(Page(data=data, count=len(data)))
