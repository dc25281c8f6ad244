"""Energy on the job pages and in the CLI's probe tables, from stored GPU-shaped results (no GPU
here): the figures of the H200 burn-in (docs/measurements/README.md), worked by hand. A bf16
matmul 1024 x 4096 x 4096 is 2 x 1024 x 4096 x 4096 = 34,359,738,368 FLOPs; at 0.0363 J an
iteration that is 947 GFLOP/J (the README's 947 GFLOP/s per W). A gpt2 step of 8 x 1024 tokens
at 21.9 J is 21.9 / 8192 = 2.67 mJ a token. A CPU result names why it has no energy instead."""

import io

from app.bench import energy
from app.cli.probe import printed
from app.probes.energy import Energy
from app.probes.results import Environment, MemoryComparison, Stats
from tests.support import FIXTURES
from tests.support.bench_jobs import finished, here, matmul, matmul_point
from tests.support.html import element, text
from tests.support.results import minimal, result_for

NOTE = "Energy per measurement: its work run back to back for at least 0.5 s (a test's note)."


def gpu_environment() -> Environment:
    return minimal(Environment, device="cuda", device_name="NVIDIA H200", catalogue_id="h200",
                   torch_version="2.x", seed=0, energy_note=NOTE)


def measured(per_iteration_j: float, watts: float) -> Energy:
    runs = 20
    return Energy(joules=per_iteration_j * runs, seconds=per_iteration_j * runs / watts, watts=watts,
                  method="energy_counter", samples=60, counter_updates=6, iterations=runs,
                  seconds_per_iteration=per_iteration_j / watts, joules_per_iteration=per_iteration_j)


def h200_matmul():
    point = matmul_point(1024, 4096, 4096, "bfloat16", 5.26e-5, 5.0e-5)
    point.time.energy = energy.per_unit(measured(0.0363, 690.0), flops=point.flops)
    return matmul([point], gpu_environment())


def console_text(parts) -> str:
    from rich.console import Console

    console = Console(width=300, record=True, file=io.StringIO())
    for part in parts:
        console.print(part)
    return console.export_text()


def test_a_gpu_matmul_page_shows_joules_watts_and_flop_per_joule_beside_the_rates(make_api):
    api = make_api()
    job = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, h200_matmul())}").text
    assert element(job, "energy-note") == NOTE
    assert ">energy<" in job and ">GFLOP/J<" in job
    body = text(job)
    assert "36.3 mJ/iter · 690 W" in body
    assert "947" in body.split("36.3 mJ/iter · 690 W", 1)[1][:20]


def test_the_cli_matmul_table_has_the_same_energy_columns():
    out = console_text(printed(h200_matmul()))
    for header in ("J/iter", "W", "GFLOP/J"):
        assert header in out
    line = next(line for line in out.splitlines() if "1024x4096x4096" in line)
    assert "0.0363" in line and "690" in line and "947" in line  # 34,359,738,368 / 0.0363 / 1e9 = 946.5
    assert f"energy: {NOTE}" in out


def test_a_train_step_shows_joules_per_step_and_per_token(make_api):
    step = minimal(Stats, median=0.05, p20=0.05, p80=0.05, mean=0.05, best=0.05, iterations=5,
                   energy=energy.per_unit(measured(21.9, 525.0), tokens=8 * 1024))
    memory = minimal(MemoryComparison, predicted={"total": 1}, measured_peak_allocated=1)
    result = result_for("train_step", environment=gpu_environment(), step=step, batch_size=8, seq_len=1024,
                        tokens_per_step=8192, memory=memory)
    api = make_api()
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, result)}").text
    assert element(page, "energy") == "21.9 J/step · 525 W"
    assert "2.67 mJ/token" in text(page)
    out = console_text(printed(result))
    # 21.9 J over 8192 tokens = 0.002673 J a token
    assert "energy J/step (back to back)" in out and "21.9" in out and "0.00267" in out


def test_a_cpu_result_says_why_there_is_no_energy_and_shows_no_column(make_api):
    note = "No energy recorded: this ran on a CPU, which NVML does not read, so every energy field is null."
    cpu = here()
    cpu.energy_note = note
    result = matmul([matmul_point(256, 256, 256, "float32", 3e-4, 3e-4)], cpu)
    api = make_api()
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, result)}").text
    assert element(page, "energy-note") == note
    assert ">energy<" not in page and "J/iter" not in page
    out = console_text(printed(result))
    assert "J/iter" not in out and note in out


def _stored(probe: str, **changes):
    """The v7 fixture's CPU result of `probe`, on an H200's environment, with `changes`."""
    import json

    from pydantic import TypeAdapter

    from app.probes.registry import PROBES

    raw = json.loads(next((FIXTURES / "results").glob("v7-*.json")).read_text())[probe]
    result = TypeAdapter(PROBES[probe].result).validate_python(raw)
    result.environment = gpu_environment()
    for name, value in changes.items():
        setattr(result, name, value)
    return result


def test_the_loader_shows_the_gpus_joules_per_token_while_it_waits_for_batches(make_api):
    """A gpt2 batch of 8 x 1024 tokens gathered in 0.072 ms (this CPU's figure) while an idle H200
    draws 75 W: 75 x 0.072e-3 = 5.4 mJ a batch, 5.4e-3 / 8192 = 0.659 µJ a token."""
    result = _stored("data_loader")
    mode = result.modes[0]
    mode.time.energy = energy.per_unit(measured(75 * 0.072e-3, 75.0), tokens=8 * 1024)
    api = make_api()
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, result)}").text
    assert ">GPU energy<" in page
    body = text(page)
    assert "0.659 µJ/token · 75.0 W" in body, body[body.find("keeps up"):][:300]
    out = console_text(printed(result))
    assert "J/token" in out and "6.59 × 10⁻⁷" in out and f"energy: {NOTE}" in out


def test_a_checkpoint_shows_the_gpus_joules_per_save_and_load(make_api):
    """A save of 1.49 GB at 0.32 GB/s takes 4.67 s; at an idle H200's 75 W that is 350 J."""
    result = _stored("checkpoint")
    result.write_s.energy = energy.per_unit(measured(350.0, 75.0), bytes_moved=1.49e9)
    result.read_warm_s.energy = energy.per_unit(measured(84.7, 75.0), bytes_moved=1.49e9)
    api = make_api()
    page = api.get(f"/benchmarks/jobs/{finished(api.app.state.store, result)}").text
    said = element(page, "checkpoint-energy")
    assert said.startswith("The GPU's energy while it waits: 350 J/save · 75.0 W"), said
    out = console_text(printed(result))
    line = next(line for line in out.splitlines() if "write (torch.save" in line)
    assert "350" in line and "75" in line and "0.00426" in line  # 1.49e9 / 350 / 1e9 = 0.004257 GB/J
