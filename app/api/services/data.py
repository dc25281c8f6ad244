"""A tokenized dataset's bytes, shards and loader bandwidth."""

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from app import device
from app.accounting import dataset, models
from app.accounting.errors import InvalidInput
from app.inputs.calibration import CALIBRATION_HELP, CalibrationRef
from app.inputs.fields import Input, byte_count, count, number, sequence_length
from app.inputs.schemas import Preset
from app.measured import calibration, profile

if TYPE_CHECKING:  # SQLAlchemy and the probes, imported only by a calculator that reads the store
    from app.jobs.store import Store

# Bytes and bytes/s as the other calculators take them: 2.8e12, "2.8TB", "512MiB".
Bytes = byte_count(1, 10**18)
Rate = byte_count(1, 10**15)


class DatasetRequest(Input):
    tokens: count(1, 10**16) = Field(description="Token ids in the dataset (LLaMA: 1.4e12, or \"1.4T\").")
    dtype: dataset.TokenDtype = Field(
        "auto", description='The token ids\' dtype. "auto": uint16 when every id fits (vocab_size <= '
                            "65,536), else uint32. int32 is what the course's example writes. A dtype too "
                            "small for the vocabulary is refused.")
    vocab_size: count(1, 10_000_000) | None = Field(
        None, description="Token ids run 0 .. vocab_size - 1; or give a catalogue model.")
    model: Preset | None = Field(
        None, description="A catalogue model (GET /api/v1/models) whose vocabulary the ids come from.")
    shard_bytes: Bytes | None = Field(
        None, description='Cut the file into shards of this many bytes ("1GB", "512MiB"); null: one file.')
    tokens_per_s: number(ge=1e-3, le=1e13) | None = Field(  # >= 1e-3 keeps epoch_seconds finite
        None, description="Training tokens the run consumes a second (all GPUs), for the read bandwidth it "
                          "needs; with seq_len.")
    seq_len: sequence_length(1, 10_000_000) | None = Field(
        None, description="Tokens per training sequence: get_batch reads seq_len + 1 ids for each.")
    page_bytes: byte_count(1, 2**30) = Field(
        dataset.PAGE_BYTES, description="The page storage is read in (np.memmap reads through the page "
                                        "cache): Linux's base page on x86-64, 4096 bytes (getconf PAGESIZE).")
    storage_read_bytes_per_s: Rate | None = Field(
        None, description='The storage\'s sustained read rate in bytes/s ("2GB" is 2e9 bytes/s), for the '
                          "loader's headroom; with tokens_per_s.")
    loader_tokens_per_s: number(gt=0, le=1e13) | Literal["measured"] | None = Field(
        None, description="Tokens a second one loader process draws with get_batch and copies to its "
                          "GPU, for the loaders' headroom over tokens_per_s; \"measured\": this server's "
                          "data_loader probe (the best of its recent runs, fastest copy mode).")
    calibration: CalibrationRef | None = Field(
        None, description=CALIBRATION_HELP + " Here: loader_tokens_per_s left out is the profile's "
        "data_loader rate.")
    num_loaders: count(1, 10_000_000) = Field(
        1, description="Loader processes feeding the run together, one per GPU (data-parallel rank).")


def vocabulary(body: DatasetRequest) -> int | None:
    if body.model is not None:
        if body.vocab_size is not None:
            raise InvalidInput("vocab_size", "give vocab_size or a model, not both")
        return models.preset(body.model).vocab_size
    return body.vocab_size


def reads_store(body: DatasetRequest) -> bool:
    """Whether `answer` reads the job database (keep it off an event loop then)."""
    return body.loader_tokens_per_s == "measured" or body.calibration is not None


def _loader_rate(body: DatasetRequest, store: "Store | None") -> tuple[float | None, str | None]:
    if body.calibration is not None and body.loader_tokens_per_s is None:
        assert store is not None, "reads_store(body): the caller passes the store"
        found = profile.stored(store, body.calibration)
        fig = found.loader_tokens_per_s
        if fig is None:
            raise InvalidInput("calibration", f"{found.label} has no data_loader runs: run the data_loader "
                                              "probe on that device, or give loader_tokens_per_s")
        return fig.value, (f"calibrated: {found.label}'s data_loader jobs {', '.join(map(str, fig.jobs))}"
                           + "".join(f"; flag: {line}" for line in found.flags))
    if body.loader_tokens_per_s != "measured":
        return body.loader_tokens_per_s, None if body.loader_tokens_per_s is None else "given"
    best = None if store is None else calibration.data_loader(store, device.describe())
    if best is None:
        raise InvalidInput("loader_tokens_per_s", "no data_loader probe has run on this server's device "
                                                  "yet: run one (POST /api/v1/jobs with probe data_loader), "
                                                  "or give a number")
    return best.tokens_per_s, (f"measured: data_loader job {best.job_id} ({best.mode} copies) at "
                               f"{best.measured_at.isoformat()}")


def answer(body: DatasetRequest, *, store: "Store | None" = None) -> dataset.Dataset:
    """`store` is read only for a measured loader rate."""
    rate, source = _loader_rate(body, store)
    return dataset.dataset(
        tokens=body.tokens, dtype=body.dtype, vocab_size=vocabulary(body), shard_bytes=body.shard_bytes,
        tokens_per_s=body.tokens_per_s, seq_len=body.seq_len, page_bytes=body.page_bytes,
        storage_read_bytes_per_s=body.storage_read_bytes_per_s, loader_tokens_per_s=rate,
        loader_source=source, num_loaders=body.num_loaders)
