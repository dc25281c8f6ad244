"""The data_loader probe's contract: random batches drawn from a memory-mapped token file as the
course's get_batch draws them, copied to the device, set beside the train step they would feed.

The child writes `file_bytes` of random token ids (numpy, `token_dtype`) into a fresh
tempfile.TemporaryDirectory under the server's temporary directory (a job cannot name a path),
np.memmap's it, and times get_batch per copy mode. The train step's tokens/s comes from
params.train_tokens_per_s, or the child times the train_step probe's own step for the same
model, precision, optimizer, batch_size and seq_len. Torch-free.
"""

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.inputs.fields import byte_count, count, number
from app.probes.params import MIB, TrainStepFields, TrainStepParams
from app.probes.results import Environment, Skipped, Stats

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
