"""A calibration campaign: the probe jobs a complete profile of a device needs
(app/measured/profile.py says what each contributes), and the held-out sweep that scores it.

The matmul sweep covers the GEMM sizes a train step of the campaign's scale runs (m: tokens of a
micro-batch; k, n: widths, and the vocabulary for the head), so the surface interpolates rather
than extrapolates. The train steps are three model shapes at two sizes each: the step fit's three
coefficients need runs that differ in depth (ops), tokens (activation bytes) and width (optimizer
bytes). The held-out sweep is six other shapes, each at three batch and sequence sizes, that no
campaign run trained. Sizes are per device kind: a CPU's are small enough for the test suite.
"""

from typing import Any, Literal

Kind = Literal["cpu", "cuda"]
TIMING = {"warmup_s": 0.05, "measure_s": 0.2, "min_iters": 5, "max_iters": 50}
"""The timer's settings for every campaign job: five timed iterations at least."""


def llama(d_model: int, n_layers: int, n_heads: int, vocab: int) -> dict[str, Any]:
    """A Llama-shaped inline config (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases)."""
    return {"vocab_size": vocab, "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads,
            "n_kv_heads": n_heads // 2, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False,
            "tied_embeddings": False}


MATMUL_SHAPES: dict[str, list[tuple[int, int, int]]] = {
    "cpu": [(m, k, n) for m in (64, 256, 1024) for k in (64, 256) for n in (64, 256, 1024, 4096)],
    "cuda": [(m, k, n) for m in (512, 2048, 8192) for k in (1024, 4096) for n in (1024, 4096, 16384, 65536)],
}
ATTENTION_SHAPES: dict[str, list[tuple[int, int, int, int]]] = {
    "cpu": [(4, 4, s, d) for s in (32, 64, 128, 256) for d in (16, 32)],
    "cuda": [(4, 16, s, d) for s in (512, 1024, 2048, 4096) for d in (64, 128)],
}
"""(batch, heads, seq_len, head_dim): the cores of the campaign's train steps, and past them."""
PRECISION = {"cpu": "fp32", "cuda": "bf16_autocast"}
MATMUL_DTYPE = {"cpu": "float32", "cuda": "bfloat16"}
STEPS: dict[str, list[tuple[dict, int, int]]] = {
    "cpu": [(llama(128, 2, 4, 1024), 2, 64), (llama(128, 2, 4, 1024), 8, 128),
            (llama(64, 5, 4, 512), 2, 64), (llama(64, 5, 4, 512), 4, 128),
            (llama(224, 2, 8, 768), 4, 64), (llama(224, 2, 8, 768), 8, 128)],
    "cuda": [(llama(1024, 4, 16, 32000), 2, 512), (llama(1024, 4, 16, 32000), 8, 1024),
             (llama(512, 12, 8, 32000), 4, 512), (llama(512, 12, 8, 32000), 8, 1024),
             (llama(2048, 2, 16, 50304), 2, 512), (llama(2048, 2, 16, 50304), 4, 1024)],
}
HELD_OUT_MODELS: dict[str, list[dict]] = {
    "cpu": [llama(64, 2, 4, 512), llama(96, 4, 4, 512), llama(192, 3, 6, 2048), llama(256, 2, 8, 1024),
            llama(64, 6, 4, 256), llama(160, 3, 4, 1024)],
    "cuda": [llama(768, 6, 12, 32000), llama(1536, 4, 12, 32000), llama(2560, 2, 20, 50304),
             llama(512, 16, 8, 32000), llama(1024, 8, 16, 128256), llama(3072, 2, 24, 32000)],
}
HELD_OUT_SIZES = {"cpu": [(2, 64), (4, 128), (8, 128)], "cuda": [(2, 512), (4, 1024), (8, 1024)]}


def step_params(kind: Kind, model: dict, batch_size: int, seq_len: int) -> dict[str, Any]:
    return TIMING | {"model": model, "batch_size": batch_size, "seq_len": seq_len, "steps": 5,
                     "warmup_steps": 2, "precision": PRECISION[kind], "optimizer": "adamw"}


def jobs(kind: Kind) -> list[dict[str, Any]]:
    """The campaign's job bodies ({probe, params}), in the order they should run."""
    shapes = [{"m": m, "k": k, "n": n} for m, k, n in MATMUL_SHAPES[kind]]
    out: list[dict[str, Any]] = [
        {"probe": "matmul",
         "params": TIMING | {"sweep": "custom", "shapes": shapes, "dtypes": [MATMUL_DTYPE[kind]]}},
        {"probe": "attention",
         "params": TIMING | {"dtypes": [MATMUL_DTYPE[kind]], "shapes": [
             {"batch": b, "heads": h, "seq_len": s, "head_dim": d}
             for b, h, s, d in ATTENTION_SHAPES[kind]]}},
        {"probe": "bandwidth", "params": TIMING},
        {"probe": "transfer", "params": TIMING},
        {"probe": "generate", "params": TIMING},
    ]
    return out + train_steps(kind)


def train_steps(kind: Kind) -> list[dict[str, Any]]:
    """The campaign's train_step job bodies: what its step fit is made from."""
    return [{"probe": "train_step", "params": step_params(kind, model, b, s)} for model, b, s in STEPS[kind]]


def held_out(kind: Kind) -> list[dict[str, Any]]:
    """The held-out train_step job bodies: HELD_OUT_MODELS x HELD_OUT_SIZES."""
    return [{"probe": "train_step", "params": step_params(kind, model, b, s)}
            for model in HELD_OUT_MODELS[kind] for b, s in HELD_OUT_SIZES[kind]]
