"""Benchmark pages: launch a probe, follow it, read and compare results. The launch form is
validated by the jobs API's request model and submitted by its service function; charts get
their figures from the same functions the API uses."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

from app import deps, device
from app.accounting.errors import InvalidInput
from app.api.responses import jsonable
from app.api.services import device as device_service
from app.api.services import flops
from app.api.services import jobs as service
from app.config import Settings
from app.deps import SettingsDep, StoreDep
from app.inputs.schemas import PresetName
from app.jobs.job import Job
from app.jobs.store import Store
from app.probes.parallel_results import CollectivesResult, DataParallelStepResult
from app.probes.params import MATMUL_DTYPES
from app.probes.registry import PROBES
from app.probes.results import MatmulResult, MemoryComparison, TrainStepResult, TransferResult
from app.web import forms, io_pages, measures, numbers
from app.web.templating import templates

router = APIRouter(include_in_schema=False)
JOB_REQUEST = TypeAdapter(service.JobRequest)
PRESETS = PresetName.__args__
GENERATE_LISTS = ("batch_sizes", "contexts", "prompt_lens")


def params_from(form: dict[str, str]) -> dict[str, Any]:
    """The launch form's fields as the API's {probe, params}."""
    probe = form["probe"]
    p: dict[str, Any] = {"device": form.get("device", "auto")}
    if probe == "matmul":
        p["sweep"] = form.get("sweep", "squares")
        dtypes = [d for d in MATMUL_DTYPES if form.get(f"dtype_{d}")]
        if dtypes:
            p["dtypes"] = dtypes
        if p["sweep"] == "custom":
            mkn = forms.body({"shape": form.get("shape", "")}, ["shape"], {"shape"}).get("shape", [])
            p["shapes"] = [dict(zip("mkn", mkn, strict=False))]
    elif probe in ("train_step", "data_loader", "checkpoint"):  # the train step's fields, shared
        model = form.get("model", "cruncher")
        cruncher = {"kind": "cruncher", "dim": forms.number(form.get("dim", "1024")),
                    "num_layers": forms.number(form.get("num_layers", "4"))}
        p["model"] = cruncher if model == "cruncher" else model
        for name in ("batch_size", "seq_len", "steps"):
            if form.get(name, "").strip():
                p[name] = forms.number(form[name].strip())
        p["optimizer"] = form.get("optimizer", "adamw")
        p["precision"] = form.get("precision", "fp32")
        if probe == "data_loader":
            if form.get("file_bytes", "").strip():
                p["file_bytes"] = forms.number(form["file_bytes"].strip())  # bytes, or text: "64MiB"
            p["token_dtype"] = form.get("token_dtype", "uint16")
    elif probe == "generate":  # gen_ names: every fieldset posts, hidden or not
        if form.get("gen_model"):
            p["model"] = form["gen_model"]
        p |= forms.body({name: form.get(f"gen_{name}", "") for name in GENERATE_LISTS}, list(GENERATE_LISTS),
                        set(GENERATE_LISTS))
    gpu = form.get("gpu", "").strip()
    return {"probe": probe, "params": p} | ({"gpu": forms.number(gpu)} if gpu else {})


def _shown(job: Job, jobs: Store, settings: Settings) -> dict[str, Any]:
    """What a job page shows: the job as GET /api/v1/jobs/{id} answers it, and its charts."""
    return {"job": jsonable(service.job_out(job)), "charts": charts(job.result, jobs) if job.result else {},
            "metrics": measures.headline(job.result) if job.result else [],
            "token_needed": settings.api_token is not None}


HISTORY_ROWS = 25


def _history(jobs: Store) -> list[dict]:
    return jsonable(service.page(jobs=jobs, limit=HISTORY_ROWS))["data"]


@router.get("/benchmarks", response_class=HTMLResponse)
def benchmarks(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "benchmarks.html", {
        "device": jsonable(device.describe()), "devices": jsonable(device_service.devices(settings)),
        "history": _history(jobs), "presets": PRESETS, "probes": tuple(PROBES),
        "matmul_dtypes": MATMUL_DTYPES, "token_needed": settings.api_token is not None})


@router.post("/ui/benchmarks/launch", response_class=HTMLResponse)
async def launch(request: Request, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    """422 for a body that is not the launch form (urlencoded, naming its probe)."""
    form = forms.posted(request.headers.get("content-type"), await request.body(), "probe")

    def submit(body: Any) -> dict:
        token = form.get("token") or None
        if token is not None and not (token.isascii() and token.isprintable()):
            raise InvalidInput("token", "may hold only printable ASCII characters (no NUL, no accents); "
                                        "paste the server's TALLY_API_TOKEN")
        deps.check_token(settings, token)
        return jsonable(service.job_out(service.submit(body, jobs=jobs, settings=settings)))

    job, refused = await run_in_threadpool(forms.run, JOB_REQUEST, params_from(form), submit)
    if refused is not None:
        return templates.TemplateResponse(request, "partials/launch_error.html", {
            "message": refused["message"], "errors": forms.field_errors(refused)})
    response = templates.TemplateResponse(request, "partials/job_status.html", {
        "job": job, "token_needed": settings.api_token is not None})
    response.headers["HX-Trigger"] = "job-launched"  # the history lists it at once
    return response


@router.get("/ui/benchmarks/jobs/{job_id}", response_class=HTMLResponse)
def job_status(request: Request, job_id: int, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    """404 with the API's message for an unknown job, as every job page. The poll that finds the
    job ended tells the page (history, a roofline waiting for its ceiling) to refresh."""
    job = service.get(job_id, jobs=jobs)
    response = templates.TemplateResponse(request, "partials/job_status.html", _shown(job, jobs, settings))
    if job.terminal:
        response.headers["HX-Trigger"] = "job-ended"
    return response


@router.get("/ui/benchmarks/history", response_class=HTMLResponse)
def history(request: Request, jobs: StoreDep) -> HTMLResponse:
    """The history table alone, refreshed when a job is launched or ends."""
    return templates.TemplateResponse(request, "partials/history.html", {"history": _history(jobs)})


@router.get("/benchmarks/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: int, jobs: StoreDep, settings: SettingsDep) -> HTMLResponse:
    job = service.get(job_id, jobs=jobs)
    return templates.TemplateResponse(request, "job.html", _shown(job, jobs, settings))


@router.get("/benchmarks/compare", response_class=HTMLResponse)
def compare(request: Request, a: int, b: int, jobs: StoreDep) -> HTMLResponse:
    runs = [service.get(i, jobs=jobs) for i in (a, b)]
    return templates.TemplateResponse(request, "compare.html", {
        "jobs": [jsonable(service.job_out(job)) for job in runs],
        "compared": measures.compare(*(job.result if job.status == "succeeded" else None for job in runs))})


def charts(result: Any, jobs: Store) -> dict:
    """Chart specs for a job's result; figures that need a formula come from the services."""
    if isinstance(result, MatmulResult):
        series: dict[str, list] = {}
        peaks = {}
        for p in result.points:
            series.setdefault(p.dtype, []).append({"x": p.m, "y": p.flop_per_sec / 1e12})
            peaks[p.dtype] = None if p.peak_flop_per_sec is None else p.peak_flop_per_sec / 1e12
        return {"sizes": {"type": "matmul_sizes", "series": series, "peaks": peaks,
                          "caption": _sizes_caption(peaks, result.environment.device_name)},
                "roofline": roofline(result, jobs)}
    if isinstance(result, TransferResult):
        series = {}
        for t in result.points:
            mode = ", non_blocking" if t.non_blocking else ""
            key = f"{t.direction.replace('_', ' ')}, {t.host_memory}{mode}"
            series.setdefault(key, []).append({"x": t.size_bytes, "y": t.gb_per_sec})
        dashed = "; dashed lines: pageable host memory" if any("pageable" in k for k in series) else ""
        return {"transfer": {"type": "transfer_sizes", "series": series, "caption":
                             f"GB/s (median) against bytes per copy, per direction and host memory{dashed}. "
                             f"{result.note}"}}
    if isinstance(result, TrainStepResult | DataParallelStepResult):
        return {"memory": memory_chart(result.memory)}
    if isinstance(result, CollectivesResult):
        return {"busbw": busbw_chart(result)}
    return io_pages.charts(result) or {}  # data_loader, checkpoint


def busbw_chart(result: CollectivesResult) -> dict:
    """busbw (GB/s, 10^9 bytes/s) against nccl-tests' size S per collective: the measured medians
    as points, the latency-bandwidth model fitted to them as a dashed line, and on a GPU the
    catalogue's link through the communication engine as a dotted one."""
    # A list, not a mapping keyed by collective: the template's tojson sorts keys, and the
    # collectives keep the run's order.
    series: list[dict] = []
    for p in result.points:
        if not series or series[-1]["collective"] != p.collective:
            series.append({"collective": p.collective, "measured": [], "fitted": [], "catalogue": []})
        for kind, busbw in (("measured", p.busbw_bytes_per_sec), ("fitted", p.fitted_busbw_bytes_per_sec),
                            ("catalogue", p.catalogue_busbw_bytes_per_sec)):
            if busbw is not None:
                series[-1][kind].append({"x": p.size_bytes, "y": busbw / 1e9})
    link = result.catalogue_link
    said = (f"busbw (GB/s, median run, slowest rank) against S in bytes, per collective, over {result.ranks} "
            f"{result.backend} ranks. Dashed: the latency-bandwidth model fitted to this run.")
    if link is not None:
        said += (" Dotted: the communication engine at the catalogue's link, "
                 f"{numbers.sig(link.bytes_per_sec / 1e9)} GB/s per GPU per direction ({link.source}).")
    else:
        said += f" No catalogue link for {result.environment.device_name}, so no engine line."
    return {"type": "collective_busbw", "series": series, "caption": said}


def _sizes_caption(peaks: dict[str, float | None], device_name: str) -> str:
    """Says what the chart draws: a dashed line only for a dtype the catalogue has a peak for."""
    drawn = [d for d, peak in peaks.items() if peak is not None]
    lacking = [d for d, peak in peaks.items() if peak is None]
    said = "TFLOP/s (median) against m, per dtype."
    if drawn:
        said += f" Dashed lines: the catalogue's dense peak for {', '.join(drawn)}."
    if lacking and not drawn:
        said += f" No catalogue peak for this device ({device_name}), so no peak line."
    elif lacking:
        said += f" No catalogue peak for {', '.join(lacking)}."
    return said


PHASES = ("start_of_backward", "lm_head_weight_gradient", "end_of_backward", "optimizer_step")
STATES = ("parameters", "gradients", "optimizer_state", "master_weights")


def memory_chart(memory: MemoryComparison) -> dict:
    """The predicted peak as model states plus the rest of its phase, beside the measured peak."""
    pred = memory.predicted
    # Results from the first release predate the per-phase peaks: their total is one sum.
    phases = [p for p in PHASES if p in pred]
    phase = f" ({max(phases, key=lambda p: pred[p]).replace('_', ' ')})" if phases else ""
    scale, unit = (1e9, "GB") if pred["total"] >= 1e9 else (1e6, "MB")
    # FSDP2's gathered blocks (data_parallel_step) are a part of their own, held in backward only.
    shown = (*STATES, "fsdp_unsharded")
    parts = {k.replace("_", " "): pred[k] / scale for k in shown if pred.get(k)}
    parts[f"rest of the peak{phase}"] = (pred["total"] - sum(pred.get(k, 0) for k in shown)) / scale
    return {"type": "memory_compare", "unit": unit, "parts": parts,
            "measured": memory.measured_peak_allocated / scale}


def roofline(result: MatmulResult, jobs: Store) -> dict:
    """Measured points at their arithmetic intensity (the matmul calculator's), under the
    measured ceilings: this device's latest bandwidth run and its calibrated matmul (the best
    dtype's), with a caption naming the ceilings drawn and those missing."""
    calib = device_service.calibration(jobs)
    gbs, bandwidth_job = None, None
    for latest in jobs.page(probe="bandwidth", status="succeeded", limit=1)[0]:
        if latest.result.environment.device_name == result.environment.device_name:
            gbs, bandwidth_job = latest.result.gb_per_sec, latest.id
    points = []
    for p in result.points:
        dtype = "float32" if p.dtype == "tfloat32" else p.dtype  # TF32 stores float32
        f = flops.matmul(flops.MatmulRequest(m=p.m, k=p.k, n=p.n, dtype=dtype))
        points.append({"x": f.arithmetic_intensity, "y": p.flop_per_sec / 1e12, "dtype": p.dtype})
    top = max(calib.matmul.values(), key=lambda m: m.flop_per_sec, default=None)
    compute = None if top is None else top.flop_per_sec
    where = {"device": result.environment.device}
    missing = []
    if gbs is None:
        missing.append({"probe": "bandwidth", "launch": {"probe": "bandwidth", **where}, "message":
                        "No bandwidth run on this device yet, so the roofline has no memory ceiling."})
    if compute is None:
        missing.append({"probe": "matmul", "launch": {"probe": "matmul", **where}, "message":
                        "No matmul measured on this device yet, so the roofline has no compute ceiling."})
    drawn = []
    if gbs is not None:
        drawn.append(f"the memory ceiling, {numbers.sig(gbs)} GB/s (bandwidth run #{bandwidth_job})")
    if top is not None:
        drawn.append(f"the compute ceiling, {numbers.tflops(top.flop_per_sec)} ({top.dtype}, median, "
                     f"best shape, run #{top.job_id})")
    caption = ("Roofline: TFLOP/s (median) of each shape against its arithmetic intensity (FLOPs per byte)"
               + (", under " + " and ".join(drawn) if drawn else "") + "."
               + (" Not drawn: " + "; ".join(
                   {"bandwidth": "the memory ceiling (no bandwidth run on this device)",
                    "matmul": "the compute ceiling (no matmul on this device)"}[m["probe"]] for m in missing)
                  + "." if missing else ""))
    return {"type": "roofline", "points": points, "bandwidth_gb_per_sec": gbs,
            "compute_tflop_per_sec": None if compute is None else compute / 1e12, "missing": missing,
            "caption": caption}
