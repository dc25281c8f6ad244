"""Benchmark pages: launch a probe, follow it, read and compare results. Everything
goes through the JSON API (app/web/bridge.py); charts get their figures from it."""

from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.web import bridge
from app.web.calculators import PRESETS
from app.web.templating import templates

router = APIRouter(include_in_schema=False)
PROBES = ("matmul", "bandwidth", "transfer", "train_step")
MATMUL_DTYPES = ("float32", "tfloat32", "bfloat16", "float16", "float8_e4m3fn")


def params_from(form: dict[str, str]) -> dict[str, Any]:
    """The launch form's fields as the API's {probe, params}."""
    probe = form.get("probe", "matmul")
    p: dict[str, Any] = {"device": form.get("device", "auto")}
    if probe == "matmul":
        p["sweep"] = form.get("sweep", "squares")
        dtypes = [d for d in MATMUL_DTYPES if form.get(f"dtype_{d}")]
        if dtypes:
            p["dtypes"] = dtypes
        if p["sweep"] == "custom":
            mkn = bridge.body({"shape": form.get("shape", "")}, ["shape"], {"shape"}).get("shape", [])
            p["shapes"] = [dict(zip("mkn", mkn, strict=False))]
    elif probe == "train_step":
        model = form.get("model", "cruncher")
        cruncher = {"kind": "cruncher", "dim": bridge.number(form.get("dim", "1024")),
                    "num_layers": bridge.number(form.get("num_layers", "4"))}
        p["model"] = cruncher if model == "cruncher" else model
        for name in ("batch_size", "seq_len", "steps"):
            if form.get(name, "").strip():
                p[name] = bridge.number(form[name].strip())
        p["optimizer"] = form.get("optimizer", "adamw")
        p["precision"] = form.get("precision", "fp32")
    gpu = form.get("gpu", "").strip()
    return {"probe": probe, "params": p} | ({"gpu": bridge.number(gpu)} if gpu else {})


@router.get("/benchmarks", response_class=HTMLResponse)
async def benchmarks(request: Request) -> HTMLResponse:
    device = await bridge.get(request, "/api/v1/device")
    devices = await bridge.get(request, "/api/v1/devices")
    history = await bridge.get(request, "/api/v1/jobs?limit=25")
    return templates.TemplateResponse(request, "benchmarks.html", {
        "device": device, "devices": devices, "history": history["data"], "presets": PRESETS,
        "probes": PROBES, "token_needed": request.app.state.settings.api_token is not None})


@router.post("/ui/benchmarks/launch", response_class=HTMLResponse)
async def launch(request: Request) -> HTMLResponse:
    # htmx posts the form urlencoded; parsed here rather than through python-multipart.
    form = dict(parse_qsl((await request.body()).decode(errors="replace"), keep_blank_values=True))
    headers = {"Authorization": f"Bearer {form['token']}"} if form.get("token") else {}
    status, answer = await bridge.call(request, "/api/v1/jobs", params_from(form), headers=headers)
    if status != 202:
        errors = bridge.field_errors(answer)
        return templates.TemplateResponse(request, "partials/launch_error.html", {
            "message": answer.get("message", ""), "errors": errors})
    return templates.TemplateResponse(request, "partials/job_status.html", {"job": answer})


@router.get("/ui/benchmarks/jobs/{job_id}", response_class=HTMLResponse)
async def job_status(request: Request, job_id: int) -> HTMLResponse:
    job = await bridge.get(request, f"/api/v1/jobs/{job_id}")
    return templates.TemplateResponse(request, "partials/job_status.html", {
        "job": job, "charts": await charts(request, job) if job.get("status") == "succeeded" else {}})


@router.get("/benchmarks/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: int) -> HTMLResponse:
    job = await bridge.get(request, f"/api/v1/jobs/{job_id}")
    return templates.TemplateResponse(request, "job.html", {
        "job": job, "charts": await charts(request, job) if job.get("status") == "succeeded" else {}})


@router.get("/benchmarks/compare", response_class=HTMLResponse)
async def compare(request: Request, a: int, b: int) -> HTMLResponse:
    jobs = [await bridge.get(request, f"/api/v1/jobs/{i}") for i in (a, b)]
    return templates.TemplateResponse(request, "compare.html", {"jobs": jobs})


async def charts(request: Request, job: dict) -> dict:
    """Chart specs for a succeeded job; figures that need a formula come from the API."""
    r = job["result"]
    if job["probe"] == "matmul":
        series: dict[str, list] = {}
        peaks = {}
        for p in r["points"]:
            series.setdefault(p["dtype"], []).append({"x": p["m"], "y": p["flop_per_sec"] / 1e12})
            peaks[p["dtype"]] = None if p["peak_flop_per_sec"] is None else p["peak_flop_per_sec"] / 1e12
        return {"sizes": {"type": "matmul_sizes", "series": series, "peaks": peaks},
                "roofline": await roofline(request, r)}
    if job["probe"] == "transfer":
        series = {}
        for p in r["points"]:
            mode = ", non_blocking" if p["non_blocking"] else ""
            key = f"{p['direction'].replace('_', ' ')}, {p['host_memory']}{mode}"
            series.setdefault(key, []).append({"x": p["size_bytes"], "y": p["gb_per_sec"]})
        return {"transfer": {"type": "transfer_sizes", "series": series}}
    if job["probe"] == "train_step":
        return {"memory": memory_chart(r["memory"])}
    return {}


PHASES = ("start_of_backward", "lm_head_weight_gradient", "end_of_backward", "optimizer_step")
STATES = ("parameters", "gradients", "optimizer_state", "master_weights")


def memory_chart(memory: dict) -> dict:
    """The predicted peak as model states plus the rest of its phase, beside the measured peak."""
    pred = memory["predicted"]
    phase = max((p for p in PHASES if p in pred), key=lambda p: pred[p])
    scale, unit = (1e9, "GB") if pred["total"] >= 1e9 else (1e6, "MB")
    parts = {k.replace("_", " "): pred[k] / scale for k in STATES if pred.get(k)}
    parts[f"rest of the peak ({phase.replace('_', ' ')})"] = (
        pred["total"] - sum(pred.get(k, 0) for k in STATES)) / scale
    return {"type": "memory_compare", "unit": unit, "parts": parts,
            "measured": memory["measured_peak_allocated"] / scale}


async def roofline(request: Request, result: dict) -> dict:
    """Measured points at their arithmetic intensity (from /api/v1/flops/matmul), under the
    measured ceilings: this device's latest bandwidth run and its best matmul."""
    calib = await bridge.get(request, "/api/v1/calibration")
    bandwidth = await bridge.get(request, "/api/v1/jobs?probe=bandwidth&status=succeeded&limit=1")
    gbs = None
    for summary in bandwidth["data"]:  # summaries carry no result; the job itself does
        job = await bridge.get(request, f"/api/v1/jobs/{summary['id']}")
        if job["result"]["environment"]["device_name"] == result["environment"]["device_name"]:
            gbs = job["result"]["gb_per_sec"]
    points = []
    for p in result["points"]:
        dtype = "float32" if p["dtype"] == "tfloat32" else p["dtype"]  # TF32 stores float32
        _, f = await bridge.call(request, "/api/v1/flops/matmul", {"m": p["m"], "k": p["k"], "n": p["n"],
                                                                   "dtype": dtype})
        points.append({"x": f["arithmetic_intensity"], "y": p["flop_per_sec"] / 1e12, "dtype": p["dtype"]})
    compute = max((m["flop_per_sec"] for m in calib["matmul"].values()), default=None)
    return {"type": "roofline", "points": points, "bandwidth_gb_per_sec": gbs,
            "compute_tflop_per_sec": None if compute is None else compute / 1e12}
