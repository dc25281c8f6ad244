"""The server process never imports torch (nor transformers, the tests' oracle, nor anything
that would make a CUDA context). It may use NVML (pynvml), which reads the driver without a
context."""

import subprocess
import sys
import textwrap

SERVE_EVERY_ROUTE = textwrap.dedent("""
    import asyncio, sys
    import httpx
    from app.main import create_app

    async def main():
        app = create_app()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            for path in ("/", "/docs", "/openapi.json", "/api/v1/dtypes", "/api/v1/models",
                         "/api/v1/hardware", "/api/v1/hardware/h100-sxm", "/api/v1/device",
                         "/api/v1/calibration", "/api/v1/jobs"):
                assert (await c.get(path)).status_code == 200, path
            calls = {
                "/api/v1/dtypes/encode": {"value": 0.1, "dtype": "bf16"},
                "/api/v1/tensors/memory": {"shape": [4, 4]},
                "/api/v1/tensors/layout": {"shape": [4, 4], "view_shape": [16]},
                "/api/v1/flops/matmul": {"m": 4, "k": 4, "n": 4},
                "/api/v1/flops/mlp": {"batch": 4, "dims": [4, 4]},
                "/api/v1/flops/transformer": {"model": "gpt2"},
                "/api/v1/models/import": {"model_type": "gpt2"},
                "/api/v1/memory/training": {"model": "gpt2", "gpu": "h100-sxm"},
                "/api/v1/memory/max-model": {"gpu": "h100-sxm"},
                "/api/v1/time/training": {"flops": 1e20, "gpu": "h100-sxm"},
                "/api/v1/time/mfu": {"flops": 1e15, "seconds": 1, "gpu": "h100-sxm"},
                "/api/v1/inference/memory": {"model": "mixtral-8x7b", "gpu": "h100-sxm", "num_gpus": 2,
                                             "tensor_parallel": 2, "weight_format": "gguf_q4_k_m"},
                "/api/v1/inference/capacity": {"model": "llama3-8b", "gpu": "h100-sxm",
                                               "weight_format": "nf4"},
                "/api/v1/inference/time": {"model": "deepseek-v2-lite", "gpu": "h100-sxm",
                                           "weight_format": "fp8_e4m3"},
                "/api/v1/data/dataset": {"tokens": 1000, "vocab_size": 50257, "tokens_per_s": 10,
                                         "seq_len": 8},
                "/api/v1/checkpoint": {"model": "gpt2", "write_bytes_per_s": "1GB",
                                       "read_bytes_per_s": "1GB"},
            }
            for path, body in calls.items():
                assert (await c.post(path, json=body)).status_code == 200, path
            # Admission sizes every probe with the calculators, not with torch.
            for probe in ("matmul", "bandwidth", "transfer", "train_step", "generate"):
                job = await c.post("/api/v1/jobs", json={"probe": probe})
                assert job.status_code == 202, job.text
                assert (await c.get(f"/api/v1/jobs/{job.json()['id']}")).status_code == 200
        assert app.openapi()["paths"], "no routes"

    asyncio.run(main())
    oracles = ("torch", "numpy", "transformers", "gguf", "bitsandbytes", "peft")
    banned = sorted(m for m in sys.modules if m.split(".")[0] in oracles)
    print(",".join(banned))
""")


def test_serving_every_route_never_imports_torch():
    result = subprocess.run([sys.executable, "-c", SERVE_EVERY_ROUTE], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"server imported: {result.stdout}"


def test_the_check_would_notice_torch():
    """The same probe reports torch when something does import it."""
    probe = SERVE_EVERY_ROUTE.replace("import asyncio, sys", "import asyncio, sys, torch")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "torch" in result.stdout.split(",")
