"""The data and checkpoint calculators against figures they did not make: the course's LLaMA
bytes, numpy's dtypes and a real memmapped file, shards and shares worked by hand, and a real
torch.save of a model and AdamW's state."""

import io
import json
import os

import numpy as np
import pytest

from app.accounting import dataset
from tests.support.api import assert_names_field

DATA = "/api/v1/data/dataset"
CHECKPOINT = "/api/v1/checkpoint"


def test_llama_data_is_2_8_tb(api):
    """CS336 lecture 1: LLaMA's 1.4 trillion tokens at 2 bytes each are 2.8e12 bytes. LLaMA's
    vocabulary is 32,000 (Touvron et al. 2023), so "auto" stores it in uint16."""
    answer = api.ok(DATA, {"tokens": "1.4T", "vocab_size": 32000})
    assert answer["bytes"] == 2_800_000_000_000 and answer["gb"] == 2800.0
    assert (answer["dtype"], answer["itemsize"]) == ("uint16", np.dtype(np.uint16).itemsize)
    assert answer["gib"] == pytest.approx(2.8e12 / 2**30)


def test_the_uint16_boundary_is_numpys():
    top = int(np.iinfo(np.uint16).max)  # 65,535: the largest id uint16 holds
    assert dataset.token_dtype("auto", top + 1)[0] == "uint16"  # ids 0 .. 65,535
    assert dataset.token_dtype("auto", top + 2)[0] == "uint32"  # id 65,536 does not fit
    for name in ("uint16", "uint32", "int32", "int64"):
        assert dataset.ITEMSIZE_BYTES[name] == np.dtype(name).itemsize
        assert dataset.MAX_ID[name] == np.iinfo(name).max


def test_a_dtype_too_small_for_the_vocabulary_is_refused_by_name(api):
    top = int(np.iinfo(np.uint16).max)
    assert api.ok(DATA, {"tokens": 10, "dtype": "uint16", "vocab_size": top + 1})["dtype"] == "uint16"
    too_many = {"tokens": 10, "dtype": "uint16", "vocab_size": top + 2}
    body = assert_names_field(api.post(DATA, too_many), "dtype")
    assert "65,535" in body["message"]
    # Llama 3's 128,256-token vocabulary (its model card): uint16 cannot hold it, "auto" takes uint32.
    assert_names_field(api.post(DATA, {"tokens": 10, "dtype": "uint16", "model": "llama3-8b"}), "dtype")
    assert api.ok(DATA, {"tokens": 10, "model": "llama3-8b"})["dtype"] == "uint32"


@pytest.mark.parametrize("dtype,vocab", [("uint16", 50257), ("int32", 50257), ("uint32", 128256),
                                         ("int64", 1000)])
def test_bytes_are_a_real_memmaps_size(api, tmp_path, dtype, vocab):
    tokens = 12_345
    path = tmp_path / "tokens.bin"
    ids = np.random.default_rng(0).integers(0, vocab, size=tokens)
    out = np.memmap(path, dtype=dtype, mode="w+", shape=(tokens,))  # as the course writes its data
    out[:] = ids
    out.flush()
    del out
    answer = api.ok(DATA, {"tokens": tokens, "dtype": dtype, "vocab_size": vocab})
    assert answer["bytes"] == os.path.getsize(path)
    back = np.memmap(path, dtype=dtype, mode="r")
    assert back.shape == (tokens,) and int(back.max()) <= answer["max_id"]


def test_shards_by_hand(api, tmp_path):
    # 1,500 uint16 ids = 3,000 bytes: 1KiB shards are 1,024 + 1,024 + 952 bytes.
    answer = api.ok(DATA, {"tokens": 1500, "dtype": "uint16", "shard_bytes": "1KiB"})["shards"]
    assert answer == {"shard_bytes": 1024, "count": 3, "full_shards": 2, "last_shard_bytes": 952,
                      "tokens_per_full_shard": 512, "aligned": True}
    # 1kB shards divide 3,000 bytes exactly: three full ones.
    exact = api.ok(DATA, {"tokens": 1500, "dtype": "uint16", "shard_bytes": "1kB"})["shards"]
    assert (exact["count"], exact["full_shards"], exact["last_shard_bytes"]) == (3, 3, 1000)
    # And a real file cut in pieces: 1,001 int32 ids (4,004 bytes) in 1,000-byte shards.
    path = tmp_path / "ids.bin"
    np.arange(1001, dtype=np.int32).tofile(path)
    with open(path, "rb") as f:
        pieces = [len(chunk) for chunk in iter(lambda: f.read(1000), b"")]
    cut = api.ok(DATA, {"tokens": 1001, "dtype": "int32", "shard_bytes": 1000})["shards"]
    assert cut["count"] == len(pieces) == 5 and cut["last_shard_bytes"] == pieces[-1] == 4
    assert cut["full_shards"] == pieces.count(1000) == 4
    # 1,001-byte shards split an int32 id across two files.
    assert api.ok(DATA, {"tokens": 1001, "dtype": "int32", "shard_bytes": 1001})["shards"]["aligned"] is False


def _get_batch(data: np.ndarray, batch: int, seq_len: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """CS336 assignment 1's get_batch: random starts, x and the targets shifted by one."""
    starts = rng.integers(0, len(data) - seq_len, size=batch)
    x = np.stack([data[i:i + seq_len] for i in starts])
    y = np.stack([data[i + 1:i + seq_len + 1] for i in starts])
    return x, y


def test_the_loader_reads_seq_len_plus_one_ids_per_sequence(api):
    batch, seq_len = 4, 1024
    data = np.arange(100_000, dtype=np.uint16)
    x, y = _get_batch(data, batch, seq_len, np.random.default_rng(1))
    # The ids a batch touches: x's and the one more id y reaches, per sequence.
    ids_read = sum(len(set(a.tolist()) | set(b.tolist())) for a, b in zip(x, y, strict=True))
    assert ids_read == batch * (seq_len + 1)
    answer = api.ok(DATA, {"tokens": 1e12, "vocab_size": 50257, "tokens_per_s": 1e6, "seq_len": seq_len,
                           "storage_read_bytes_per_s": "2GB"})
    loader = answer["loader"]
    needed = 1e6 * ids_read / x.size * 2  # training tokens/s x ids read per training token x 2 bytes
    assert loader["read_bytes_per_s"] == pytest.approx(needed) == 2_001_953.125
    assert loader["epoch_seconds"] == 1e6  # 1e12 tokens at 1e6 a second
    # Cold reads come in 4 KiB pages: a 2,050-byte sequence touches 1.5 pages on average (below).
    assert loader["page_read_bytes_per_s"] == pytest.approx(1e6 / seq_len * 1.5 * 4096) == 6e6
    assert loader["headroom"] == pytest.approx(2e9 / 6e6)


@pytest.mark.parametrize("dtype,seq_len", [("uint16", 1024), ("uint16", 100), ("uint32", 8192), ("int64", 3)])
def test_pages_per_sequence_is_the_average_over_every_start(api, dtype, seq_len):
    """Every token-aligned start within a 4,096-byte page, enumerated: the pages that seq_len + 1
    ids from there touch, averaged (a dataset far longer than a page makes each start as likely)."""
    page, size = 4096, np.dtype(dtype).itemsize
    starts = np.arange(0, page, size)
    last = starts + (seq_len + 1) * size - 1  # the last byte read
    touched = last // page - starts // page + 1
    answer = api.ok(DATA, {"tokens": 1e9, "dtype": dtype, "tokens_per_s": 1e5, "seq_len": seq_len})["loader"]
    assert answer["page_bytes"] == os.sysconf("SC_PAGE_SIZE") == page  # this box's page, the default
    assert answer["pages_per_sequence"] == pytest.approx(touched.mean())
    assert answer["page_read_bytes_per_s"] == pytest.approx(1e5 / seq_len * touched.mean() * page)


@pytest.mark.parametrize("body,field", [
    ({"tokens": 0}, "tokens"),
    ({"tokens": ""}, "tokens"),
    ({"tokens": 10, "vocab_size": 3, "shard_bytes": 0}, "shard_bytes"),
    ({"tokens": 10, "vocab_size": 3, "shard_bytes": ""}, "shard_bytes"),
    ({"tokens": 10, "vocab_size": 3, "shard_bytes": "80G"}, "shard_bytes"),  # GB or GiB?
    ({"tokens": 10, "vocab_size": 3, "tokens_per_s": 0, "seq_len": 8}, "tokens_per_s"),
    ({"tokens": 10, "vocab_size": 3, "tokens_per_s": -1, "seq_len": 8}, "tokens_per_s"),
    ({"tokens": 10, "vocab_size": 3, "tokens_per_s": 10}, "seq_len"),
    ({"tokens": 10, "vocab_size": 3, "tokens_per_s": 10, "seq_len": 8, "storage_read_bytes_per_s": 0},
     "storage_read_bytes_per_s"),
    ({"tokens": 10, "vocab_size": 3, "storage_read_bytes_per_s": "1GB"}, "tokens_per_s"),
    ({"tokens": 10, "dtype": "uint32", "tokens_per_s": 10, "seq_len": 8, "page_bytes": 4098}, "page_bytes"),
    ({"tokens": 10, "vocab_size": 3, "page_bytes": 0}, "page_bytes"),
    ({"tokens": 10}, "vocab_size"),  # "auto" needs a vocabulary
    ({"tokens": 10, "vocab_size": 3, "model": "gpt2"}, "vocab_size"),
    ({"tokens": 10, "model": "gpt-9"}, "model"),
])
def test_bad_dataset_input_is_a_422_naming_the_field(api, body, field):
    assert_names_field(api.post(DATA, body), field)


ADAMW_FP32 = 4 + 4 + 4  # bytes per parameter: the fp32 weight, exp_avg and exp_avg_sq (torch.optim.AdamW)


def test_checkpoint_times_and_share_by_hand(api):
    body = {"model": 1e9, "precision": "fp32", "optimizer": "adamw", "write_bytes_per_s": "1GB",
            "read_bytes_per_s": 3e9, "keep_last": 3, "every_n_steps": 100, "step_seconds": 0.88,
            "total_steps": 1000}
    answer = api.ok(CHECKPOINT, body)
    assert answer["checkpoint_bytes"] == 1e9 * ADAMW_FP32 == 12e9
    assert answer["write_seconds"] == 12.0 and answer["read_seconds"] == 4.0
    assert answer["storage_bytes"] == 36e9
    plan = answer["schedule"]
    # 100 steps of 0.88 s (88 s) then 12 s of saving: 12 of every 100 seconds.
    assert plan["share_of_run"] == pytest.approx(0.12)
    assert plan["checkpoints"] == 10 and plan["write_seconds_total"] == 120.0
    assert plan["run_seconds"] == pytest.approx(880 + 120)


def test_mixed_precision_checkpoints_hold_14_bytes_a_parameter(api):
    """ZeRO (Rajbhandari et al. 2020): mixed-precision Adam keeps 2 + 2 + 12 bytes a parameter;
    a checkpoint drops the 2 bytes of 16-bit gradients."""
    answer = api.ok(CHECKPOINT, {"model": 7e9, "write_bytes_per_s": 1e9, "read_bytes_per_s": 1e9})
    assert answer["checkpoint_bytes"] == 14 * 7e9 and answer["defaults_applied"]["precision"] == "bf16_mixed"
    # The memory calculator's checkpoint_bytes is the same figure for the same inputs.
    for model in ("llama3-8b", "gpt2"):
        memory = api.ok("/api/v1/memory/training", {"model": model, "precision": "fp32", "optimizer": "sgd"})
        ours = api.ok(CHECKPOINT, {"model": model, "precision": "fp32", "optimizer": "sgd",
                                   "write_bytes_per_s": 1e9, "read_bytes_per_s": 1e9})
        assert ours["checkpoint_bytes"] == memory["checkpoint_bytes"] == 4 * memory["params"]


def test_checkpoint_bytes_match_a_real_torch_save(api):
    """A small fp32 model and AdamW after one step, saved together as a training loop saves them."""
    import torch  # the tests' oracle (the server never imports it)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 64))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 256)).sum().backward()
    optimizer.step()
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    params = sum(p.numel() for p in model.parameters())
    answer = api.ok(CHECKPOINT, {"model": params, "precision": "fp32", "optimizer": "adamw",
                                 "write_bytes_per_s": 1e9, "read_bytes_per_s": 1e9})
    saved = buffer.getbuffer().nbytes
    # torch.save adds names, pickled structure and 64-byte alignment: a few kB over the tensors' bytes.
    assert answer["checkpoint_bytes"] == params * ADAMW_FP32
    assert 0 <= saved - answer["checkpoint_bytes"] < 0.02 * saved


@pytest.mark.parametrize("body,field", [
    ({"write_bytes_per_s": 0}, "write_bytes_per_s"),
    ({"write_bytes_per_s": -5}, "write_bytes_per_s"),
    ({"write_bytes_per_s": ""}, "write_bytes_per_s"),
    ({"read_bytes_per_s": 0}, "read_bytes_per_s"),
    ({"every_n_steps": 0, "step_seconds": 1}, "every_n_steps"),
    ({"every_n_steps": 10}, "step_seconds"),  # neither a step time nor a run length
    ({"step_seconds": 1}, "every_n_steps"),
    ({"every_n_steps": 10, "step_seconds": 0}, "step_seconds"),
    ({"keep_last": 0}, "keep_last"),
])
def test_bad_checkpoint_input_is_a_422_naming_the_field(api, body, field):
    base = {"model": "gpt2", "write_bytes_per_s": "1GB", "read_bytes_per_s": "1GB"}
    assert_names_field(api.post(CHECKPOINT, base | body), field)


def test_measured_disk_rates_need_a_checkpoint_probe_run(make_api):
    api = make_api()  # an empty job database: nothing has measured this server's disk
    for field in ("write_bytes_per_s", "read_bytes_per_s"):
        body = {"model": "gpt2", "write_bytes_per_s": "1GB", "read_bytes_per_s": "1GB", field: "measured"}
        refused = assert_names_field(api.post(CHECKPOINT, body), field)
        assert "checkpoint probe" in refused["message"]


def test_tally_calc_data_and_checkpoint(capsys):
    """`tally calc data dataset` and `tally calc checkpoint` come from the route table and print
    the API's answer, indented; a refusal exits 2 with the field named."""
    from app.cli import main

    assert main(["calc", "data", "dataset", "--tokens", "1.4T", "--vocab-size", "32000", "--shard-bytes",
                 "1GB"]) == 0
    out = capsys.readouterr().out
    answer = json.loads(out)
    assert answer["bytes"] == 2.8e12 and answer["shards"]["count"] == 2800  # 2.8e12 / 1e9
    assert '\n  "bytes": 2800000000000,\n' in out  # indented, one figure a line
    assert main(["calc", "checkpoint", "--model", "1e9", "--precision", "fp32", "--write-bytes-per-s", "1GB",
                 "--read-bytes-per-s", "1GB", "--every-n-steps", "100", "--step-seconds", "0.88"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["write_seconds"] == 12.0 and plan["schedule"]["share_of_run"] == pytest.approx(0.12)
    assert main(["calc", "checkpoint", "--model", "gpt2", "--write-bytes-per-s", "0",
                 "--read-bytes-per-s", "1GB"]) == 2
    assert "write_bytes_per_s" in json.loads(capsys.readouterr().err)["message"]


def test_the_loaders_headroom_is_their_summed_rate_over_the_runs(api):
    """8 loaders of 150,000 tokens/s each feed 1.2M tokens/s: against a run of 1M tokens/s a
    headroom of 1.2; 4 of them (600,000) leave the GPUs waiting, 0.6."""
    body = {"tokens": "1B", "vocab_size": 50257, "tokens_per_s": 1e6, "seq_len": 1024,
            "loader_tokens_per_s": 150000, "num_loaders": 8}
    loader = api.post("/api/v1/data/dataset", body).json()["loader"]
    assert loader["loader_headroom"] == pytest.approx(1.2) and loader["loader_source"] == "given"
    four = api.post("/api/v1/data/dataset", body | {"num_loaders": 4}).json()["loader"]
    assert four["loader_headroom"] == pytest.approx(0.6)
    assert_names_field(api.post("/api/v1/data/dataset", {"tokens": 10, "vocab_size": 10,
                                                         "loader_tokens_per_s": 5}), "tokens_per_s")
    zero = api.post("/api/v1/data/dataset", body | {"loader_tokens_per_s": 0})
    assert_names_field(zero, "loader_tokens_per_s")
    assert_names_field(api.post("/api/v1/data/dataset", body | {"num_loaders": 0}), "num_loaders")
