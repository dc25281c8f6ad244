"""The CLI's speed targets: `tally --help` in at most 0.3 s of CPU, and `tally calc <anything>`
(its help, a group's help, any calculator) in at most 0.5 s. CPU, not wall time: this machine's
two cores are shared, and a command waiting for one spends no CPU.

Each command runs several times, each in a fresh interpreter (`python -m app.cli`, this checkout
first on PYTHONPATH), and its CPU is the child's user + system seconds (os.wait4). Prints the
median and the worst against the target, as ratios (at most 1 meets it). The children run as an
installed tally does, its modules' bytecode cached: PYTHONDONTWRITEBYTECODE (set on some boxes)
is dropped for them, and each command's first, unmeasured call writes what is missing. (With it
set, every call compiles Tally's ~80 modules from source again: 0.2-0.3 s more.)

    .venv/bin/python bench/cli_speed.py [--runs 5] [--only calc]
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELP_S, CALC_S = 0.3, 0.5
SMALL = '{"n_layers": 2, "d_model": 256, "n_heads": 4, "vocab_size": 100}'
# Every group at least once, its help and its calculators; the ones that import the most first.
COMMANDS = [
    (HELP_S, "--help"),
    (CALC_S, "calc --help"),
    (CALC_S, "calc flops --help"),
    (CALC_S, "calc inference time --help"),
    (CALC_S, "calc fit --help"),
    (CALC_S, "calc flops matmul --m 1024 --k 256 --n 64"),
    (CALC_S, "calc flops transformer --model llama3-8b --seq-len 8192 --causal halved"),
    (CALC_S, "calc flops mlp --batch 1024 --dims 256,256,64"),
    (CALC_S, "calc memory training --model llama2-7b --seq-len 4096 --recompute selective --gpu h100-sxm"),
    (CALC_S, "calc memory max-model --gpu h100-sxm --num-gpus 8 --precision fp32 --optimizer adamw"),
    (CALC_S, "calc fit --model llama3-8b --gpu rtx-4090 --seq-len 2048"),
    (CALC_S, "calc finetune --model llama3-8b --mode qlora --gpu rtx-4090 --seq-len 2048 --recompute full"),
    (CALC_S, "calc inference time --model llama3.1-70b --weight-format fp8_e4m3 --gpu h100-sxm "
             "--num-gpus 2 --tensor-parallel 2"),
    (CALC_S, "calc inference capacity --model llama3.1-8b --gpu l4 --context 8k --concurrency 4"),
    (CALC_S, f"calc plan training --model '{SMALL}' --gpu h100-sxm --num-gpus 8 --seq-len 256 "
             "--global-batch-sequences 64"),
    (CALC_S, "calc comm collective --collective all_reduce --bytes 1GB --ranks 16 --gpu h100-sxm"),
    (CALC_S, "calc time training --params 70e9 --tokens 15e12 --gpu h100-sxm --num-gpus 1024 --mfu 0.5"),
    (CALC_S, "calc energy --gpu-hours 184320 --gpu a100-80gb --pue 1.1 --region us-average"),
    (CALC_S, "calc data dataset --tokens 1.4T --vocab-size 32000 --shard-bytes 1GB"),
    (CALC_S, "calc checkpoint --model llama3-8b --write-bytes-per-s 2GB --read-bytes-per-s 2GB "
             "--every-n-steps 1000 --step-seconds 1.5"),
    (CALC_S, "calc tensors layout --shape 3,2 --stride 1,3"),
    (CALC_S, "calc dtypes encode --value 0.15625 --dtype float32"),
    (CALC_S, "calc dtypes list"),
    (CALC_S, "calc models list"),
    (CALC_S, "calc models get llama3-8b"),
    (CALC_S, "calc hardware get h100-sxm"),
    (CALC_S, "calc quantization list"),
    (CALC_S, "calc flops matmul --m 0"),  # a refusal: the API's 422, exit 2
]


def cpu_seconds(argv: list[str]) -> tuple[float, int]:
    """The child's user + system CPU seconds, and its exit status."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    child = subprocess.Popen([sys.executable, "-m", "app.cli", *argv], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, child.returncode


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--runs", type=int, default=5, help="fresh processes per command")
    cli.add_argument("--only", default="", help="only the commands that contain this text")
    args = cli.parse_args()
    print(f"CPU seconds per call, {args.runs} fresh processes each ({sys.executable} -m app.cli)")
    print(f"{'median':>7} {'worst':>7} {'target':>7} {'med/t':>6} {'worst/t':>7} {'exit':>4}  tally ...")
    worst_ratio, medians = 0.0, []
    for target, command in COMMANDS:
        if args.only not in command:
            continue
        cpu_seconds(shlex.split(command))  # unmeasured: writes the bytecode this command's imports lack
        runs = [cpu_seconds(shlex.split(command)) for _ in range(args.runs)]
        times = [t for t, _ in runs]
        median, worst = statistics.median(times), max(times)
        medians.append(median / target)
        worst_ratio = max(worst_ratio, worst / target)
        statuses = ",".join(sorted({str(s) for _, s in runs}))
        print(f"{median:7.3f} {worst:7.3f} {target:7.1f} {median / target:6.2f} {worst / target:7.2f} "
              f"{statuses:>4}  {command}")
    print(f"largest median/target {max(medians):.2f}; largest worst/target {worst_ratio:.2f} "
          f"(at most 1.00 meets the targets)")


if __name__ == "__main__":
    main()
