"""A throw-away Slurm cluster for tests: Debian's slurm-wlm daemons (`make slurm`, a prerequisite
of `make test`, installs them where missing), started in a temporary directory with everything of
their own there: a munged (its key, socket, pid, seed and log files), a slurm.conf, free TCP ports,
state, spool, pid and log files. One slurmctld and one slurmd per node name, all on this machine:
Debian builds Slurm with multiple-slurmd support (`scontrol show config` says MULTIPLE_SLURMD =
Yes), so `slurmd -N <name>` runs the node of that name, each on its own port.

Clients reach the cluster through `Cluster.env` (SLURM_CONF names its config, and no SLURM_*
variable of the caller's leaks in), never through the system's /etc/slurm. Readiness is observed
(munge answers, `scontrol ping` says UP, `sinfo` shows every node idle) within a deadline; at the
end every daemon, step daemon and job task is killed and the directory deleted.

As root (CI, containers) the daemons and jobs run as root (SlurmUser=SlurmdUser=root). Otherwise
they run as the current user, which Slurm allows for a cluster whose every job is that user's own."""

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.waiting import wait_for

NODES = ("tally-n1", "tally-n2")
PARTITION = "tally"
STARTUP_S = 90  # a cluster comes up in about a second here; a loaded CI box may be far slower
STOP_S = 15
# Every state `scontrol show job` reports for a job that will not run again.
FINAL_STATES = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
                          "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"})
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])


def binary(name: str) -> str:
    """The path of a munge or Slurm program (daemons live in /usr/sbin, often off a user's PATH)."""
    found = shutil.which(name, path=_SEARCH_PATH)
    if found is None:
        raise RuntimeError(f"no {name}: `make slurm` installs Debian's slurmctld, slurmd, slurm-client "
                           "and munge")
    return found


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free now (held together while chosen, so none repeats)."""
    held = [socket.socket() for _ in range(count)]
    try:
        for s in held:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _holders(needle: bytes) -> list[int]:
    """The live processes (not zombies) whose environment holds `needle` (as NAME=value)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except (OSError, IndexError):  # gone, or another user's
            continue
    return found


class ClusterError(RuntimeError):
    """The cluster did not come up; the message carries its logs' tails."""


class _PortTaken(ClusterError):
    """A port chosen free was taken before a daemon bound it: worth a second try with others."""


@dataclass
class Cluster:
    """A running cluster: `env` for its clients, its partition and node names, and its files."""

    root: Path
    nodes: tuple[str, ...]
    cpus_per_node: int
    partition: str = PARTITION
    ctld_port: int = 0
    node_ports: dict[str, int] = field(default_factory=dict)
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def work(self) -> Path:
        """The clients' default working directory (sbatch writes slurm-<id>.out there)."""
        return self.root / "work"

    @property
    def env(self) -> dict[str, str]:
        """The caller's environment without its SLURM_* variables, plus SLURM_CONF for this cluster."""
        kept = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return {**kept, "SLURM_CONF": str(self.conf)}

    def run(self, argv: Sequence[str], *, timeout_s: float = 60, check: bool = True,
            cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
        """Run a client command (srun, sinfo, scontrol ...) against this cluster; text output."""
        argv = [binary(argv[0]) if "/" not in argv[0] else argv[0], *argv[1:]]
        done = subprocess.run(argv, env=self.env, cwd=cwd or self.work, capture_output=True, text=True,
                              timeout=timeout_s)
        if check and done.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}\n"
                               f"{self.logs()}")
        return done

    def sbatch(self, *argv: str | os.PathLike, cwd: str | os.PathLike | None = None) -> str:
        """`sbatch --parsable` with these arguments (a script's path, or options and --wrap); the job id."""
        out = self.run(["sbatch", "--parsable", *map(str, argv)], cwd=cwd).stdout.strip()
        return out.split(";")[0]

    def job(self, job_id: str) -> str:
        """`scontrol show job -o`'s line for the job (finished jobs stay listed: MinJobAge is an hour)."""
        return self.run(["scontrol", "show", "job", "-o", str(job_id)]).stdout.strip()

    def state(self, job_id: str) -> str:
        found = re.search(r"\bJobState=(\S+)", self.job(job_id))
        if found is None:
            raise ClusterError(f"no JobState for job {job_id}: {self.job(job_id)}")
        return found.group(1)

    def wait(self, job_id: str, timeout_s: float = 120) -> str:
        """Wait until the job is over; its final state (COMPLETED, FAILED, ...)."""
        return wait_for(lambda: (s := self.state(job_id)) in FINAL_STATES and s, timeout=timeout_s,
                        every=0.1, what=f"job {job_id} to end",
                        context=lambda: f"{self.job(job_id)}\n{self.logs()}")

    def processes(self) -> list[int]:
        """The live processes of this cluster: its daemons, and whatever runs with its SLURM_CONF in
        the environment (slurmstepd, job tasks and their children, clients still running)."""
        daemons = [p.pid for p in self.daemons.values() if p.poll() is None]
        return sorted(set(daemons) | set(_holders(f"SLURM_CONF={self.conf}".encode())))

    def logs(self, lines: int = 25) -> str:
        """The last `lines` lines of every log the cluster wrote."""
        parts = []
        for path in sorted([*self.root.glob("log/*"), *self.root.glob("munge/*.log")]):
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path.name} ---\n" + "\n".join(tail))
        return "\n".join(parts) or "(no logs)"

    # -- starting and stopping -------------------------------------------------------------

    def _write_files(self) -> None:
        user = pwd.getpwuid(os.geteuid()).pw_name
        host = socket.gethostname().split(".")[0]
        ports = free_ports(1 + len(self.nodes))
        self.ctld_port, self.node_ports = ports[0], dict(zip(self.nodes, ports[1:], strict=True))
        for name in ("munge", "state", "spool", "log", "run", "work", *(f"spool/{n}" for n in self.nodes)):
            (self.root / name).mkdir()
        # munged wants its socket's directories searchable by all, its key unreadable by others.
        self.root.chmod(0o755)
        (self.root / "munge").chmod(0o755)
        key = self.root / "munge" / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(os.urandom(128))  # what `mungekey` makes: 1024 random bits
        r = self.root
        node_lines = [f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.node_ports[n]} "
                      f"CPUs={self.cpus_per_node} State=UNKNOWN" for n in self.nodes]
        self.conf.write_text("\n".join([
            "# A throw-away cluster: tests/support/slurm.py",
            "ClusterName=tally",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            # No cgroups: processes tracked by their parentage, no binding, no accounting.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "SchedulerParameters=batch_sched_delay=0",  # a batch job starts within a second, not three
            # Nodes as configured here, whatever this machine has; back in service on registering.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            # Finished jobs stay in `scontrol show job` for an hour (there is no slurmdbd for sacct).
            "MinJobAge=3600",
            "KillWait=5",  # a cancelled job's tasks get SIGKILL 5 s after SIGTERM, not 30
            *node_lines,
            f"PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE "
            "State=UP",
            "",
        ]))

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.root / "log" / f"{name}.out", "wb") as out:
            self.daemons[name] = subprocess.Popen(argv, env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
                                                  stdout=out, stderr=subprocess.STDOUT)

    def _alive(self) -> None:
        """Raise at once, with the logs, when a daemon has exited."""
        for name, process in self.daemons.items():
            if process.poll() is not None:
                message = f"{name} exited {process.returncode} while the cluster started:\n{self.logs()}"
                raise (_PortTaken if "Address already in use" in message else ClusterError)(message)

    def _until(self, ready, what: str, deadline: float) -> None:
        def check():
            self._alive()
            return ready()
        try:
            wait_for(check, timeout=max(0.0, deadline - time.monotonic()), every=0.05, what=what)
        except AssertionError as e:
            raise ClusterError(f"{e}\n{self.logs()}") from None

    def _start(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self._write_files()
        m = self.root / "munge"
        self._spawn("munged", [binary("munged"), "--foreground", f"--key-file={m}/munge.key",
                               f"--socket={self.munge_socket}", f"--pid-file={m}/munged.pid",
                               f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"])
        self._until(lambda: subprocess.run([binary("munge"), "-n", "-S", str(self.munge_socket)],
                                           capture_output=True, timeout=10).returncode == 0,
                    "munged to answer", deadline)
        self._spawn("slurmctld", [binary("slurmctld"), "-D", "-f", str(self.conf)])
        self._until(lambda: "is UP" in self.run(["scontrol", "ping"], check=False, timeout_s=30).stdout,
                    "slurmctld to answer `scontrol ping`", deadline)
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", [binary("slurmd"), "-D", "-N", node, "-f", str(self.conf)])

        def all_idle() -> bool:
            listed = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout_s=30).stdout
            states = dict(line.split() for line in listed.splitlines() if len(line.split()) == 2)
            return all(states.get(node) == "idle" for node in self.nodes)

        self._until(all_idle, f"every node ({', '.join(self.nodes)}) idle in sinfo", deadline)

    def _stop(self) -> None:
        """End every process of the cluster: slurmds, then slurmctld, then munged (SIGTERM, then
        SIGKILL after STOP_S), then anything still carrying its SLURM_CONF (step daemons and job
        tasks outlive a slurmd); all bounded."""
        order = [n for n in self.daemons if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for group in (order[:-2], order[-2:-1], order[-1:]):
            running = [self.daemons[n] for n in group if n in self.daemons]
            for p in running:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in running:
                try:
                    p.wait(timeout=STOP_S)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        while (left := self.processes()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)


@contextlib.contextmanager
def cluster(nodes: Sequence[str] = NODES, cpus_per_node: int = 2,
            timeout_s: float = STARTUP_S) -> Iterator[Cluster]:
    """Start a cluster of these node names, each with `cpus_per_node` CPUs (as configured: not
    checked against this machine's), in one partition; yield it once every node is idle; stop it
    and delete its directory at the end. ClusterError, with the logs' tails, when it does not
    come up within `timeout_s`; a port taken between choosing and binding earns two more tries."""
    for binary_name in ("munged", "munge", "slurmctld", "slurmd", "sinfo", "scontrol", "srun", "sbatch"):
        binary(binary_name)
    for attempt in range(3):
        started = Cluster(Path(tempfile.mkdtemp(prefix="tally-slurm-")), tuple(nodes), cpus_per_node)
        try:
            started._start(timeout_s)
        except BaseException as e:
            started._stop()
            shutil.rmtree(started.root, ignore_errors=True)
            if isinstance(e, _PortTaken) and attempt < 2:
                continue
            raise
        break
    try:
        yield started
    finally:
        started._stop()
        shutil.rmtree(started.root, ignore_errors=True)
