"""The "Will it run on my GPU?" page: POST /api/v1/fit's request as a form, and its answer
(app/api/services/fit.py, the same function the route calls) as two rows of options, serving
and fine-tuning, each with a chart of its bytes per GPU stacked by kind against the GPU's
memory. The charts are the answer's own bytes in GB; nothing here computes a figure."""

from urllib.parse import urlencode

from app.accounting.units import GB
from app.api.compute import Narrow
from app.api.services import fit as service
from app.api.services.fit import FitRequest
from app.jobs.store import Store
from app.web.spec import Calculator, Input

SECTIONS = {"inference": "Serving", "training": "Fine-tuning"}
"""FitOption.kind -> the heading of its row of options, in the answer's order."""


def sections(answer: dict) -> list[tuple[str, str, list[dict]]]:
    """(kind, heading, its options) for each kind the answer has, in the answer's order."""
    kinds = list(dict.fromkeys(o["kind"] for o in answer["options"]))
    return [(k, SECTIONS.get(k, k), [o for o in answer["options"] if o["kind"] == k]) for k in kinds]


def title(label: str) -> str:
    """An option's name under its section's heading, which says "Serving":
    'Inference, FP8 E4M3, per-tensor scale' -> 'FP8 E4M3, per-tensor scale'; 'QLoRA' as it is."""
    return label.removeprefix("Inference, ")


def short(label: str) -> str:
    """On its chart's axis, where the card below says the rest: 'FP8 E4M3'."""
    return title(label).split(",")[0]


def applied(body: FitRequest, change: dict | None) -> str | None:
    """The page asked with the advice's change made: a link a press of which follows the advice.
    None where there is no change to the request (another option fits instead) or the model was
    pasted (its config does not travel in a link)."""
    if not change or "option" in change or not isinstance(body.model, str):
        return None
    asked = body.model_dump(mode="json", include={i.name for i in PAGE.inputs}, exclude_none=True)
    # a check box's value as the form sends it, not Python's True
    asked = {k: str(v).lower() if isinstance(v, bool) else v for k, v in asked.items()}
    return "/fit?" + urlencode(asked | change)


def _bars(heading: str, options: list[dict], memory_bytes: int, gpu: str, body: FitRequest) -> dict:
    """One horizontal bar per option, GB per GPU stacked by kind (bytes_by_kind, in the order
    the answer lists them; kinds that are 0 in every option left out), each with the usable
    memory it is held against (inference: the engine's share), and the GPU's memory."""
    kinds = [k for k in dict.fromkeys(k for o in options for k in o["bytes_by_kind"])
             if any(o["bytes_by_kind"].get(k) for o in options)]
    rows = [{"label": o["label"], "title": title(o["label"]), "short": short(o["label"]),
             "option": o["option"], "fits": o["fits"], "total": o["total_bytes"] / GB,
             "usable": o["usable_bytes"] / GB, "apply": applied(body, o.get("advice_change")),
             **{k: o["bytes_by_kind"].get(k, 0) / GB for k in kinds}}
            for o in options]
    return {"type": "fit_bars", "heading": heading, "rows": rows, "kinds": kinds,
            "memory_gb": memory_bytes / GB, "memory_label": f"{gpu} memory"}


def _charts(body: FitRequest, answer: dict, jobs: Store) -> dict:
    return {kind: _bars(heading, options, answer["gpu_memory_bytes"], answer["gpu"], body)
            for kind, heading, options in sections(answer)}


PAGE = Calculator(
    "fit", "Will it run on my GPU?",
    "One model on one kind of GPU, every way to run it side by side: served in bf16, FP8 (where the GPU "
    "has it), INT8 or AWQ 4-bit, and fine-tuned with LoRA, QLoRA or in full. Whether each fits, its bytes "
    "per GPU against the GPU's memory, the largest batch and context, its speed, and for what does not "
    "fit, the smallest change that would. The answer of POST /api/v1/fit.",
    FitRequest, lambda body, jobs: service.answer(body),
    (Input("model", "Model", "llama3-8b"),
     Input("gpu", "GPU", "rtx-4090"),
     Input("num_gpus", "GPUs", hint="serving: tensor parallel; full fine-tuning: ZeRO 3 over them"),
     Input("seq_len", "Sequence length", hint="tokens: the served context, or the training sequence"),
     Input("batch_size", "Batch", hint="sequences served at once, or the micro-batch per GPU"),
     Input("recompute", "Recompute", hint="training: full is gradient checkpointing"),
     Input("lora_rank", "LoRA rank", hint="LoRA and QLoRA, on peft's default targets", more=True),
     Input("mfu", "MFU", hint="training: share of the dense bf16 peak, 0 to 1", more=True),
     Input("optimizer", "Optimizer", hint="training: AdamW's states in fp32, or 8-bit", more=True),
     Input("stack", "Stack", hint="training: whose conventions for the logits and checkpoints: Tally's, "
                                  "Hugging Face's, Unsloth's or torchtune's", more=True),
     Input("loss_chunks", "Loss chunks", hint="training: chunks of tokens the loss runs in; empty: the "
                                              "stack's rule", more=True),
     Input("torch_compile", "Compiled loss", hint="training: the loss keeps 16-bit logits", more=True),
     Input("activation_offload", "Offload checkpoints",
           hint="training, recompute full: layer inputs in host memory", more=True),
     Input("optimizer_in_backward", "Optimizer in backward",
           hint="training: each parameter steps as its gradient lands", more=True)),
    _charts, takes_model="model", heavy=Narrow("model", "a smaller model (fewer layers)"))
