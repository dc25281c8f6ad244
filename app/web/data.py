"""The Data page: POST /api/v1/data/dataset's request as a form (a tokenized dataset's bytes, its
shards, and how fast the loader must read to keep the GPUs fed), and /data/checkpoint: POST
/api/v1/checkpoint's (a checkpoint's size, its write and read time, and the share of a run spent
saving it). Each page validates with the route's request model and computes with its service
function; nothing here computes a figure."""

from app.api.services import checkpoint, data
from app.web.spec import Calculator, Input

PAGE = Calculator(
    "data", "Data",
    "A training set kept as one flat array of token ids, memory-mapped because it is never loaded "
    "whole: its bytes (tokens × the token dtype's size), its shards, and the bandwidth the loader must "
    "read at to keep the GPUs fed. The course's example is filled in: LLaMA's 1.4T tokens at 2 bytes each "
    "are 2.8 TB. The answer of POST /api/v1/data/dataset.",
    data.DatasetRequest, lambda body, jobs: data.answer(body, store=jobs),
    (Input("tokens", "Tokens", "1.4e12", "token ids in the dataset, e.g. 1.4e12 or 1.4T"),
     Input("dtype", "Token dtype", hint="auto: uint16 when every id fits (vocabulary up to 65,536), "
           "else uint32"),
     Input("vocab_size", "Vocabulary", "32000", "ids run 0 to vocabulary - 1; or pick a model"),
     Input("model", "Model", hint="its vocabulary, in place of the number above"),
     Input("shard_bytes", "Shard size", "1GB", "bytes per file: 1GB, 512MiB; empty for one file"),
     Input("tokens_per_s", "Training tokens/s", "1e6", "all GPUs together; empty to skip the loader"),
     Input("seq_len", "Sequence length", "1024", "tokens per sequence: get_batch reads one more"),
     Input("page_bytes", "Page size", hint="bytes storage serves per read (Linux: 4096)", more=True),
     Input("storage_read_bytes_per_s", "Storage read rate", "2GB", "bytes/s the storage sustains: 2GB is 2e9 "
           "bytes/s"),
     Input("loader_tokens_per_s", "Loader rate", hint='tokens/s one loader process draws, or "measured" by '
           "this server's data_loader probe", typed=True),
     Input("num_loaders", "Loaders", hint="loader processes, one per GPU")))

CHECKPOINT = Calculator(
    "data/checkpoint", "Checkpoints",
    "What saving the model and its optimizer state costs: one checkpoint's bytes (as the memory "
    "calculator counts them: parameters, master weights and optimizer state), the seconds to write it "
    "and to read it back at your disk's rate, and the share of a run a blocking save takes every N steps. "
    "The answer of POST /api/v1/checkpoint.",
    checkpoint.CheckpointRequest, lambda body, jobs: checkpoint.answer(body, store=jobs),
    (Input("model", "Model", "llama3-8b"),
     Input("precision", "Precision"),
     Input("optimizer", "Optimizer"),
     Input("write_bytes_per_s", "Disk write rate", "2GB", 'bytes/s (2GB is 2e9), or "measured" by this '
           "server's checkpoint probe", typed=True),
     Input("read_bytes_per_s", "Disk read rate", "2GB", 'bytes/s, or "measured"', typed=True),
     Input("every_n_steps", "Save every", "1000", "steps"),
     Input("step_seconds", "Step time", "1.5", "seconds per training step"),
     Input("total_steps", "Run length", "100000", "steps, for how many checkpoints"),
     Input("keep_last", "Checkpoints kept", hint="on disk at once")),
    takes_model="model")
