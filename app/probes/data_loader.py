"""The data_loader probe: random batches drawn from a memory-mapped token file as the
course's get_batch draws them, copied to the device, set beside the train step they would feed.

The child writes `file_bytes` of random token ids (numpy, `token_dtype`) into a fresh
tempfile.TemporaryDirectory under the server's temporary directory (a job cannot name a path),
np.memmap's it, and times get_batch per copy mode. The train step's tokens/s comes from
params.train_tokens_per_s, or the child times the train_step probe's own step for the same
model, precision, optimizer, batch_size and seq_len. Its torch side is app/bench/data_loader.py;
its page's figures and its table are its faces below. GB = 10^9 bytes.
"""

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from app import numbers
from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.inputs.fields import byte_count, count, number
from app.probes import energy, train_step
from app.probes.base import Kind, Least, Need, Probe, timer_least
from app.probes.faces import Faces, Fieldset, Input, Metric, Row, Table, flatten, where
from app.probes.params import MIB, flush_bytes
from app.probes.past import Past
from app.probes.results import Environment, Skipped, Stats
from app.probes.train_step.faces import FIELDS as TRAIN_STEP_FIELDS
from app.probes.train_step.params import TrainStepFields, TrainStepParams

TokenDtype = Literal["uint16", "uint32", "int32"]
TOKEN_BYTES = {"uint16": 2, "uint32": 4, "int32": 4}
ID_BYTES = 8
"""get_batch hands the model int64 ids (torch.from_numpy of .astype(np.int64)): nn.Embedding's index."""
# Bytes of the token file by device kind: 256 MiB on a GPU, 64 MiB on a CPU (seconds to write on
# two cores); at most 64 GiB, and admission checks the scratch disk (app/probes/scratch.py).
DATA_LOADER_FILE_BYTES = {"cuda": 256 * MIB, "cpu": 64 * MIB}
MAX_FILE_BYTES = 64 * 2**30


class DataLoaderParams(TrainStepFields):
    """model, precision, optimizer, batch_size and seq_len: the train step the loader must keep up
    with, as the train_step probe takes them (mode full); get_batch draws batch_size x (seq_len + 1)
    tokens."""

    file_bytes: byte_count(MIB, MAX_FILE_BYTES) | None = Field(
        None, description="Bytes of the token file written and memory-mapped. Default 256 MiB on a GPU, "
        "64 MiB on a CPU; at most 64 GiB. Must hold more than seq_len + 1 tokens.")
    token_dtype: TokenDtype = Field(
        "uint16", description="How the file stores a token id: uint16 (a vocabulary up to 65,536, as GPT-2's "
        "50,257), uint32 or int32.")
    train_tokens_per_s: number(gt=0, le=1e12) | None = Field(
        None, description="The train step's tokens/s to compare with. Default: at submission, the best of "
        "this server's last 5 succeeded train_step runs on the job's device with this model, precision, "
        "optimizer, batch_size and seq_len (train_job_id names it); without one, the child times the "
        "train_step probe's step itself.")
    train_job_id: count(1, 2**53 - 1) | None = Field(
        None, description="The train_step job train_tokens_per_s comes from: filled in at submission, or "
        "given (instead of train_tokens_per_s) to compare with that run; it must be a succeeded train_step "
        "of the same model, precision, optimizer, batch_size and seq_len on the job's device.")


def file_bytes(p: DataLoaderParams, kind: str) -> int:
    """The token file's size on a device of `kind`, whole tokens; InvalidInput naming
    params.file_bytes when it holds no batch row of seq_len + 1 tokens."""
    size = p.file_bytes or DATA_LOADER_FILE_BYTES[kind]
    width = TOKEN_BYTES[p.token_dtype]
    if size // width <= p.seq_len + 1:
        raise InvalidInput("params.file_bytes", f"{size} bytes hold {size // width} {p.token_dtype} tokens, "
                                                f"not more than seq_len + 1 ({p.seq_len + 1})")
    return size // width * width


def train_params(p: DataLoaderParams) -> TrainStepParams:
    """The train step compared with: the train_step probe's parameters, timing fields shared."""
    if p.mode != "full":
        raise InvalidInput("params.mode", "the data_loader probe compares with a whole model's train step "
                                          "(mode full)")
    own = {"file_bytes", "token_dtype", "train_tokens_per_s", "train_job_id"}
    return TrainStepParams.model_validate(p.model_dump(mode="json", exclude=own))


def batch_bytes(p: DataLoaderParams) -> int:
    """Device bytes of one batch: x and y, each (batch_size, seq_len) int64."""
    return 2 * p.batch_size * p.seq_len * ID_BYTES


@dataclass(slots=True)
class LoaderMode:
    """get_batch with one kind of host-to-device copy."""

    mode: Literal["pageable", "pinned"]
    """pageable: x.to(device); pinned: x.pin_memory().to(device, non_blocking=True)."""
    time: Stats
    """Seconds per batch: host wall-clock around get_batch, a synchronize included (the copy done)."""
    batches_per_sec: float
    """1 / median seconds per batch."""
    tokens_per_sec: float
    """batch_size x seq_len (the tokens a step trains on) / median seconds per batch."""
    bytes_per_sec: float
    """Device bytes of a batch (x and y, int64) / median seconds per batch."""
    headroom: float
    """tokens_per_sec / the train step's tokens/s: above 1 the loader keeps up."""
    keeps_up: bool
    """headroom >= 1."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class DataLoaderResult:
    probe: Literal["data_loader"]
    environment: Environment
    file_bytes: int
    tokens_in_file: int
    token_dtype: str
    batch_size: int
    seq_len: int
    tokens_per_batch: int
    """batch_size x seq_len: the tokens one train step trains on (x; y is x shifted by one)."""
    batch_bytes: int
    """x and y on the device, int64: 2 x 8 x batch_size x seq_len."""
    write_s: float
    """Seconds to write the token file (numpy tofile, then flush and os.fsync)."""
    modes: list[LoaderMode]
    train_model: str
    """The model of the train step compared with: "cruncher", a preset's name, or "custom"."""
    train_precision: str
    train_optimizer: str
    train_tokens_per_s: float
    train_source: str
    """params: given in params.train_tokens_per_s; calibration: the train_step run train_job_id on this
    device (filled in at submission, or named); measured: the train_step probe's step timed in this
    job (its median step)."""
    train_job_id: int | None = None
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    __pydantic_config__ = RECORD


def need(params: DataLoaderParams, kind: Kind) -> Need:
    # A batch per mode (x, y int64) while the loader runs; then, without train_tokens_per_s, the train step,
    # whose own timer holds a second flush buffer beside the loader's (admission counts one).
    batches = 2 * batch_bytes(params)
    step = train_step.need(train_params(params), kind)[0]  # checks the model the child builds
    if params.train_tokens_per_s is not None:
        return batches, "params.batch_size"
    step += flush_bytes(kind, None)
    return max(batches, step), "params.batch_size"


def scratch(params: DataLoaderParams, kind: Kind) -> Need:
    return file_bytes(params, kind), "params.file_bytes"


def least_seconds(params: DataLoaderParams, kind: Kind) -> Least:
    return timer_least(params, 2 if kind == "cuda" else 1)  # pageable, and pinned on CUDA


def prepare(params: DataLoaderParams, device: Any, past: Past) -> DataLoaderParams:
    """The train step to compare with, from this server's own runs on `device` (app/measured/
    train_rate.py): the run params.train_job_id names, else the best recent matching one, which
    train_job_id then names; unchanged when train_tokens_per_s was given or no run matches."""
    if params.train_tokens_per_s is not None:
        if params.train_job_id is not None:
            raise InvalidInput("params.train_job_id", "give train_tokens_per_s or train_job_id, not both")
        return params
    found = past.train_step_rate(train_params(params), device, params.train_job_id)
    if found is None:
        if params.train_job_id is not None:
            raise InvalidInput("params.train_job_id", f"job {params.train_job_id} is not a succeeded "
                               f"train_step run on {device.name} of this model, precision, optimizer, "
                               "batch_size and seq_len (mode full)")
        return params
    rate, job_id = found
    return params.model_copy(update={"train_tokens_per_s": rate, "train_job_id": job_id})


# --- faces ----------------------------------------------------------------------------------------

def headline(r: DataLoaderResult) -> list[Metric]:
    out = []
    for m in r.modes:
        out += [Metric(f"{m.mode}/tokens", f"get_batch {m.mode}, tokens/s (median batch)", m.tokens_per_sec,
                       "tokens_per_sec"),
                Metric(f"{m.mode}/headroom", f"headroom over the train step, {m.mode}", m.headroom, "ratio")]
    given = "given" if r.train_source == "params" else "measured"
    return [*out, Metric("train", f"train step tokens/s, {given}", r.train_tokens_per_s, "tokens_per_sec",
                         r.train_model)]


def tables(r: DataLoaderResult) -> list:
    joules = energy.shown(m.time for m in r.modes)
    sig, ms = numbers.sig, numbers.ms
    said = (f"{where(r)}: {numbers.short(r.file_bytes / 2**20)} MiB of {r.token_dtype} tokens "
            f"({r.tokens_in_file:,}), batch {r.batch_size} x seq {r.seq_len} ({r.tokens_per_batch:,} "
            f"tokens, {r.batch_bytes:,} bytes on the device); file written in {ms(r.write_s)} ms")
    rows = [[m.mode, ms(m.time.median), ms(m.time.p20), ms(m.time.p80), sig(m.batches_per_sec),
             sig(m.tokens_per_sec), numbers.per(m.bytes_per_sec, 1e9), sig(m.headroom),
             "yes" if m.keeps_up else "NO", *(energy.cells(m.time, per_token=True) if joules else [])]
            for m in r.modes]
    rows.append([f"train step ({r.train_source})", "", "", "", "", sig(r.train_tokens_per_s), "", "", "",
                 *(["", ""] if joules else [])])
    headers = ["get_batch", "median ms", "p20 ms", "p80 ms", "batches/s", "tokens/s", "GB/s", "headroom",
               "keeps up", *(energy.headers("token") if joules else [])]
    train = f"train step: {r.train_model}, {r.train_precision}, {r.train_optimizer}"
    return [said, Table(headers, rows), train, *(f"skipped {s.what}: {s.reason}" for s in r.skipped),
            *r.notes, *energy.note(r)]


def loader_chart(r: DataLoaderResult) -> dict:
    """get_batch's tokens/s per copy mode beside the train step's, on a log axis when they are
    more than two decades apart."""
    labels = [f"get_batch, {m.mode}" for m in r.modes] + [f"train step ({r.train_source})"]
    loader = [m.tokens_per_sec for m in r.modes] + [None]
    train = [None] * len(r.modes) + [r.train_tokens_per_s]
    values = [v for v in loader + train if v]
    headroom = ", ".join(f"{m.mode} {numbers.sig(m.headroom)}×" for m in r.modes)
    return {"type": "bars", "labels": labels, "y": "tokens/s", "stacked": False,
            "log": max(values) / min(values) > 100,
            "sets": [{"label": "get_batch (median batch)", "data": loader},
                     {"label": "train step", "data": train}],
            "caption": f"Tokens per second: the loader's (batch_size × seq_len over the median batch's "
                       f"seconds) per copy mode, beside the train step's ({r.train_model}, "
                       f"{r.train_precision}, {r.train_optimizer}). Headroom, the loader's over the train "
                       f"step's: {headroom}."}


def charts(r: DataLoaderResult, past: Past) -> dict[str, dict]:
    return {"tokens": loader_chart(r)}


def csv_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per copy mode, the run's figures beside each."""
    run = flatten({k: v for k, v in result.items() if k != "modes"})
    return [run | flatten(mode) for mode in result["modes"]]


FIELDS = Fieldset("data_loader", (
    Row("Token file size, token dtype", (
        Input("file_bytes", kind="number", placeholder="default (256MiB GPU, 64MiB CPU)"),
        Input("token_dtype", "Token dtype", "select", options=("uint16", "uint32", "int32"),
              value="uint16"))),
))

PROBE = Probe(
    "data_loader", "random batches from a memory-mapped token file as the course's get_batch draws them, "
    "copied pageable and pinned: batches/s and tokens/s beside a train step's, and the headroom",
    DataLoaderParams, DataLoaderResult, "app.bench.data_loader:run", need, least_seconds, scratch=scratch,
    prepare=prepare,
    faces=Faces(headline=headline, tables=tables, charts=charts, page="probes/data_loader.html",
                form=(TRAIN_STEP_FIELDS, FIELDS), csv_rows=csv_rows,
                compared=("token_dtype", "batch_size", "seq_len", "train_model")))
