"""A tokenized dataset on disk: its bytes, its shards, and the read bandwidth a run needs.

The course keeps the training tokens as one flat array of token ids, memory-mapped
(np.memmap) because it is never loaded whole: LLaMA's 1.4T tokens at 2 bytes each are
2.8e12 bytes (CS336 lecture 1, "LLaMA data is 2.8 TB"). Its bytes are tokens x itemsize;
the itemsize is the token dtype's, which must hold the largest id, vocab_size - 1.

get_batch (CS336 assignment 1) draws B random starts and reads seq_len + 1 consecutive ids
from each: inputs x = data[i : i + seq_len], targets y = data[i + 1 : i + seq_len + 1]. A
batch of B x seq_len training tokens therefore reads B x (seq_len + 1) ids, and a run that
trains on tokens_per_s tokens a second reads tokens_per_s x (seq_len + 1) / seq_len x itemsize
bytes a second from the file.

Storage serves whole pages. np.memmap reads through the page cache, in pages of PAGE_BYTES (the
base page of x86-64 and most arm64 Linux: `getconf PAGESIZE` prints 4096; mmap(2) maps whole
pages). A sequence of L = (seq_len + 1) x itemsize bytes from a random token-aligned start touches
ceil or ceil + 1 pages; averaged over the starts, 1 + seq_len x itemsize / page_bytes pages (each
of its seq_len inner token boundaries is a page boundary with chance itemsize / page_bytes). On a
cold read (a dataset larger than the page cache) the storage then serves page_bytes + seq_len x
itemsize bytes per sequence, not L: for short sequences of small ids, several times what is asked.
Readahead (Linux reads up to read_ahead_kb, 128 KiB by default, past a faulted page) may read more.
"""

import math
from dataclasses import dataclass
from typing import Literal

from app.accounting.errors import InvalidInput
from app.accounting.records import RECORD
from app.accounting.units import GB, GIB

TokenDtype = Literal["auto", "uint16", "uint32", "int32", "int64"]

# Bytes per element and the largest value each dtype holds (numpy's np.dtype(d).itemsize and
# np.iinfo(d).max; tests compare them with numpy's own).
ITEMSIZE_BYTES = {"uint16": 2, "uint32": 4, "int32": 4, "int64": 8}
MAX_ID = {"uint16": 2**16 - 1, "uint32": 2**32 - 1, "int32": 2**31 - 1, "int64": 2**63 - 1}
PAGE_BYTES = 4096  # Linux's base page on x86-64 (getconf PAGESIZE); the unit the page cache reads


def token_dtype(requested: TokenDtype, vocab_size: int | None) -> tuple[str, str]:
    """(dtype, why). "auto": uint16 when every id 0 .. vocab_size - 1 fits (vocab_size <= 65,536),
    else uint32. An explicit dtype too small for the vocabulary is refused, naming `dtype`."""
    if requested == "auto":
        if vocab_size is None:
            raise InvalidInput("vocab_size", 'dtype "auto" picks the smallest dtype for the vocabulary: give '
                                             "vocab_size or a catalogue model, or name a dtype")
        picked = "uint16" if vocab_size - 1 <= MAX_ID["uint16"] else "uint32"
        return picked, (f"auto: the smallest unsigned dtype whose maximum holds the largest id, "
                        f"{vocab_size - 1:,}")
    if vocab_size is not None and vocab_size - 1 > MAX_ID[requested]:
        raise InvalidInput("dtype", f"{requested} holds ids up to {MAX_ID[requested]:,}, but a vocabulary of "
                                    f"{vocab_size:,} has ids up to {vocab_size - 1:,}: choose a wider dtype "
                                    'or "auto"')
    return requested, "given"


@dataclass(slots=True)
class Shards:
    """The file cut into pieces of shard_bytes (the last one may be short)."""

    shard_bytes: int
    count: int
    """ceil(bytes / shard_bytes)."""
    full_shards: int
    """Shards of exactly shard_bytes."""
    last_shard_bytes: int
    """Bytes of the last shard: shard_bytes when it is full."""
    tokens_per_full_shard: int
    """shard_bytes // itemsize: whole tokens in a full shard (a shard size that is no multiple of
    the itemsize would split a token; see `aligned`)."""
    aligned: bool
    """Whether shard_bytes is a multiple of the itemsize, so no token straddles two shards."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Loader:
    """What keeping the GPUs fed asks of the storage, at the course's get_batch."""

    tokens_per_s: float
    """Training tokens consumed a second (inputs, not targets)."""
    seq_len: int
    ids_read_per_training_token: float
    """(seq_len + 1) / seq_len: each sequence reads one id more than it trains on (its last target)."""
    read_bytes_per_s: float
    """tokens_per_s x (seq_len + 1) / seq_len x itemsize: bytes/s the loader reads from the file."""
    epoch_seconds: float
    """tokens / tokens_per_s: how long one pass over the dataset takes at this rate, reading at
    read_bytes_per_s all the while."""
    epoch_hours: float
    page_bytes: int
    """The page the storage is read in."""
    pages_per_sequence: float
    """1 + seq_len x itemsize / page_bytes: pages one sequence touches, averaged over random starts."""
    page_read_bytes_per_s: float
    """tokens_per_s / seq_len sequences a second x pages_per_sequence x page_bytes: what the storage
    serves when no page is cached (a dataset larger than memory)."""
    storage_read_bytes_per_s: float | None
    """The storage's sustained read rate, as given; null when not given."""
    headroom: float | None
    """storage_read_bytes_per_s / page_read_bytes_per_s: above 1 the storage keeps up with cold
    reads with that margin; null without a storage rate."""
    loader_tokens_per_s: float | None
    """Tokens a second one loader process draws (get_batch and the copy to its GPU), as given or
    measured by this server's data_loader probe; null when not given."""
    loader_source: str | None
    """"given", or the data_loader job and copy mode it was measured by."""
    num_loaders: int
    """Loader processes feeding the run together: one per GPU (data-parallel rank)."""
    loader_headroom: float | None
    """loader_tokens_per_s x num_loaders / tokens_per_s: above 1 the loaders keep the GPUs fed with
    that margin; null without a loader rate."""

    __pydantic_config__ = RECORD


@dataclass(slots=True)
class Dataset:
    """A tokenized dataset as one flat memmapped array of token ids. Bytes unless named otherwise."""

    tokens: int
    vocab_size: int | None
    """The vocabulary, given or the model's; null when neither was given (an explicit dtype)."""
    dtype: str
    dtype_source: str
    """"given", or how "auto" chose."""
    itemsize: int
    """Bytes per token id."""
    max_id: int
    """The largest id the dtype holds."""
    bytes: int
    """tokens x itemsize: the file's size (np.memmap writes no header)."""
    gb: float
    """bytes / 10^9."""
    gib: float
    """bytes / 2^30."""
    shards: Shards | None
    """null without shard_bytes."""
    loader: Loader | None
    """null without tokens_per_s."""
    assumptions: list[str]

    __pydantic_config__ = RECORD


def shards(total_bytes: int, shard_bytes: int, itemsize: int) -> Shards:
    count = math.ceil(total_bytes / shard_bytes)
    full = total_bytes // shard_bytes
    return Shards(shard_bytes=shard_bytes, count=count, full_shards=full,
                  last_shard_bytes=total_bytes - (count - 1) * shard_bytes,
                  tokens_per_full_shard=shard_bytes // itemsize, aligned=shard_bytes % itemsize == 0)


def loader(*, tokens: int, itemsize: int, tokens_per_s: float, seq_len: int, page_bytes: int = PAGE_BYTES,
           storage_read_bytes_per_s: float | None, loader_tokens_per_s: float | None = None,
           loader_source: str | None = None, num_loaders: int = 1) -> Loader:
    if page_bytes % itemsize:  # the page-count average needs every page boundary on a token boundary
        raise InvalidInput("page_bytes", f"must be a multiple of the token's {itemsize} bytes")
    ratio = (seq_len + 1) / seq_len
    needed = tokens_per_s * ratio * itemsize
    pages = 1 + seq_len * itemsize / page_bytes
    cold = tokens_per_s / seq_len * pages * page_bytes
    epoch = tokens / tokens_per_s
    return Loader(tokens_per_s=tokens_per_s, seq_len=seq_len, ids_read_per_training_token=ratio,
                  read_bytes_per_s=needed, epoch_seconds=epoch, epoch_hours=epoch / 3600,
                  page_bytes=page_bytes, pages_per_sequence=pages, page_read_bytes_per_s=cold,
                  storage_read_bytes_per_s=storage_read_bytes_per_s,
                  headroom=None if storage_read_bytes_per_s is None else storage_read_bytes_per_s / cold,
                  loader_tokens_per_s=loader_tokens_per_s, loader_source=loader_source,
                  num_loaders=num_loaders,
                  loader_headroom=None if loader_tokens_per_s is None
                  else loader_tokens_per_s * num_loaders / tokens_per_s)


def dataset(*, tokens: int, dtype: TokenDtype = "auto", vocab_size: int | None = None,
            shard_bytes: int | None = None, tokens_per_s: float | None = None, seq_len: int | None = None,
            page_bytes: int = PAGE_BYTES, storage_read_bytes_per_s: float | None = None,
            loader_tokens_per_s: float | None = None, loader_source: str | None = None,
            num_loaders: int = 1) -> Dataset:
    """Bytes of `tokens` ids in `dtype`, cut into shards of `shard_bytes`, read at `tokens_per_s`."""
    chosen, why = token_dtype(dtype, vocab_size)
    itemsize = ITEMSIZE_BYTES[chosen]
    total = tokens * itemsize
    assumptions = ["one flat array of token ids with no header, as np.memmap writes it: bytes = tokens x "
                   f"{itemsize} ({chosen})"]
    if chosen == "int32":
        assumptions.append("int32, what the course's example writes, takes twice uint16's bytes for a "
                           "vocabulary under 65,536")
    feed = None
    if tokens_per_s is not None:
        if seq_len is None:
            raise InvalidInput("seq_len", "give seq_len with tokens_per_s: get_batch reads seq_len + 1 ids "
                                          "per sequence of seq_len training tokens")
        feed = loader(tokens=tokens, itemsize=itemsize, tokens_per_s=tokens_per_s, seq_len=seq_len,
                      page_bytes=page_bytes, storage_read_bytes_per_s=storage_read_bytes_per_s,
                      loader_tokens_per_s=loader_tokens_per_s, loader_source=loader_source,
                      num_loaders=num_loaders)
        assumptions.append("get_batch reads seq_len + 1 consecutive ids per sequence (inputs and the shifted "
                           "targets), from a random start: read_bytes_per_s counts the bytes asked for")
        assumptions.append(f"the storage serves whole {page_bytes}-byte pages: page_read_bytes_per_s is what "
                           "a cold read (nothing cached) costs, before readahead; the headroom is against it")
        if loader_tokens_per_s is not None:
            assumptions.append(f"{num_loaders} loader process(es), one per GPU, each drawing "
                               "loader_tokens_per_s: the loaders' headroom is their sum over tokens_per_s")
    elif storage_read_bytes_per_s is not None or loader_tokens_per_s is not None:
        field = "storage_read_bytes_per_s" if storage_read_bytes_per_s is not None else "loader_tokens_per_s"
        raise InvalidInput("tokens_per_s", f"give tokens_per_s (and seq_len) for the headroom against "
                                           f"{field}")
    elif seq_len is not None:
        raise InvalidInput("tokens_per_s", "seq_len is used only with tokens_per_s: give both")
    return Dataset(tokens=tokens, vocab_size=vocab_size, dtype=chosen, dtype_source=why, itemsize=itemsize,
                   max_id=MAX_ID[chosen], bytes=total, gb=total / GB, gib=total / GIB,
                   shards=None if shard_bytes is None else shards(total, shard_bytes, itemsize),
                   loader=feed, assumptions=assumptions)
