"""How a train step's result is shown: its headline figures, `tally probe`'s tables, the
predicted-against-measured memory chart (data_parallel_step's too), the compare view, and the
launch form's train-step fields, which data_loader and checkpoint share. Seconds shown as ms."""

from typing import Any

from app import numbers
from app.accounting import models
from app.probes import energy, sustained
from app.probes.faces import Fieldset, Input, Metric, Row, Table, where
from app.probes.past import Past
from app.probes.results import MemoryComparison
from app.probes.train_step.result import TrainStepResult

PARTS = ("step", "forward", "backward", "optimizer_step")


def headline(r: TrainStepResult) -> list[Metric]:
    return [Metric("tokens", "tokens/s (median step)", r.tokens_per_sec, "tokens_per_sec"),
            Metric("achieved", "achieved, median step", r.achieved_flop_per_sec, "flop_per_sec"),
            Metric("mfu", "MFU (median step)", r.mfu, "fraction"),
            Metric("step", "step time, median", r.step.median, "seconds"),
            Metric("forward", "forward, median", r.forward.median, "seconds"),
            Metric("backward", "backward, median", r.backward.median, "seconds"),
            Metric("optimizer", "optimizer step, median", r.optimizer_step.median, "seconds"),
            Metric("memory", "peak memory, predicted vs measured", r.memory.relative_error,
                   "signed_fraction"),
            *sustained.metrics(r.sustained)]


def binary_unit(largest: int) -> tuple[str, int]:
    """The largest of GiB, MiB, KiB and bytes that `largest` reaches."""
    units = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 1024), ("bytes", 1))
    return next(((u, s) for u, s in units if largest >= s), ("bytes", 1))


def tables(r: TrainStepResult) -> list:
    said = (f"{where(r)}: {r.model} ({r.params:,} params), batch {r.batch_size} x seq {r.seq_len}, "
            f"{r.optimizer}, {r.precision}")
    if r.mode != "full":
        said += f", {r.mode} ({r.trainable_params:,} trainable params)"
    ms = numbers.ms
    phases = [[name.replace("_", " "), ms(t.median), ms(t.p20), ms(t.p80), ms(t.best), str(t.iterations)]
              for name, t in zip(PARTS, (r.step, r.forward, r.backward, r.optimizer_step), strict=True)]
    rates = [["tokens/s (median step)", numbers.sig(r.tokens_per_sec)],
             ["FLOPs/step (exact)", f"{r.flops_per_step:,}"],
             ["FLOPs/step (6ND)", f"{r.flops_per_step_6nd:,.0f}"],
             ["achieved TFLOP/s (median step)", numbers.per(r.achieved_flop_per_sec, 1e12)],
             ["peak TFLOP/s", numbers.per(r.peak_flop_per_sec, 1e12)],
             ["MFU (median step)", numbers.percent(r.mfu)],
             ["loss first -> last", f"{numbers.sig(r.loss_first, 4)} -> {numbers.sig(r.loss_last, 4)}"]]
    if r.step.energy is not None:
        joules, watts = energy.cells(r.step)
        rates += [["energy J/step (back to back)", joules], ["energy J/token", energy.cells(r.step, True)[0]],
                  ["average W", watts]]
    mem = r.memory
    unit, scale = binary_unit(max(mem.predicted["total"], mem.measured_peak_allocated))
    memory = [[name.replace("_", " "), numbers.per(n, scale), "", ""] for name, n in mem.predicted.items()
              if name != "total"]
    memory.append(["peak (total)", numbers.per(mem.predicted["total"], scale),
                   numbers.per(mem.measured_peak_allocated, scale),
                   numbers.percent(mem.relative_error, 1, True)])
    if mem.measured_reserved is not None:
        memory.append(["reserved by the allocator", "", numbers.per(mem.measured_reserved, scale), ""])
    return [said, Table(["phase", "median ms", "p20 ms", "p80 ms", "best iteration ms", "runs"], phases),
            "throughput", Table(["", "value"], rates),
            "peak memory", Table(["bytes", f"predicted {unit}", f"measured {unit}", "error"], memory),
            f"measured: {mem.method}; error = predicted / measured - 1",
            *(f"assumes {a}" for a in r.assumptions), *energy.note(r),
            *sustained.tables(r.sustained, "train step")]


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


def charts(r: Any, past: Past) -> dict[str, dict]:
    return {"memory": memory_chart(r.memory)}


COMPARED = ("model", "params", "batch_size", "seq_len", "optimizer", "precision")


def overlay(a: TrainStepResult, b: TrainStepResult) -> dict:
    return {"type": "compare_bars", "labels": [p.replace("_", " ") for p in PARTS], "y": "ms (median)",
            "sets": {run: [getattr(r, p).median * 1e3 for p in PARTS] for run, r in (("A", a), ("B", b))},
            "caption": "Median milliseconds per step and per part, run A beside run B."}


def _assemble(read: dict[str, Any]) -> dict[str, Any]:
    """The model picked: the cruncher with its width and layers, or a preset's name."""
    out = {k: v for k, v in read.items() if k not in ("model", "dim", "num_layers")}
    model = read.get("model", "cruncher")
    cruncher = {"kind": "cruncher", "dim": read.get("dim", 1024), "num_layers": read.get("num_layers", 4)}
    out["model"] = cruncher if model == "cruncher" else model
    return out


FIELDS = Fieldset("the train step", (
    Row("Model", (Input("model", kind="select", value="cruncher",
                        options=(("cruncher", "Cruncher (course)"), *models.presets())),)),
    Row("Cruncher width, layers", (Input("dim", "Cruncher width", "number", value="512"),
                                   Input("num_layers", "Cruncher layers", "number", value="4"))),
    Row("Batch, sequence length", (Input("batch_size", "Batch", "number", value="4"),
                                   Input("seq_len", "Sequence length", "number", value="128"))),
    Row("Optimizer, precision", (Input("optimizer", "Optimizer", "select",
                                       options=("adamw", "adam", "adagrad", "sgd"), value="adamw"),
                                 Input("precision", "Precision", "select", options=("fp32", "bf16_autocast"),
                                       value="fp32"))),
), _assemble)
"""The train step's fields: train_step's form, and the first fieldset of data_loader's and checkpoint's."""
