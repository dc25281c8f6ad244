"""A tokenized dataset's bytes, shards and loader bandwidth."""

from pydantic import Field

from app.accounting import dataset, models
from app.accounting.errors import InvalidInput
from app.contract.fields import Input, byte_count, count, number, sequence_length
from app.contract.schemas import Preset

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


def vocabulary(body: DatasetRequest) -> int | None:
    if body.model is not None:
        if body.vocab_size is not None:
            raise InvalidInput("vocab_size", "give vocab_size or a model, not both")
        return models.preset(body.model).vocab_size
    return body.vocab_size


def answer(body: DatasetRequest) -> dataset.Dataset:
    return dataset.dataset(
        tokens=body.tokens, dtype=body.dtype, vocab_size=vocabulary(body), shard_bytes=body.shard_bytes,
        tokens_per_s=body.tokens_per_s, seq_len=body.seq_len, page_bytes=body.page_bytes,
        storage_read_bytes_per_s=body.storage_read_bytes_per_s)
