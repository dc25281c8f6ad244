"""The throw-away Slurm cluster the `tally slurm` tests run on (tests/support/slurm.py): two node
names on this machine, each its own slurmd, that srun and sbatch spread tasks across, and nothing
of it left once it is over."""

import os
import socket

import pytest

from tests.support import slurm
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster():
    with slurm.cluster() as started:
        yield started


def test_srun_runs_one_task_on_each_node_name(cluster):
    assert cluster.nodes == ("tally-n1", "tally-n2")
    done = cluster.run(["srun", "-N", "2", "-n", "2", "--ntasks-per-node=1", "bash", "-c",
                        'echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_CONF"'])
    lines = sorted(done.stdout.split("\n")[:-1])
    assert sorted(line.split()[1] for line in lines) == ["tally-n1", "tally-n2"], done.stdout
    assert {line.split()[0] for line in lines} == {"0", "1"}
    assert {line.split()[2] for line in lines} == {str(cluster.conf)}  # the throw-away config


def test_sbatch_job_across_both_nodes_completes(cluster, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output={tmp_path}/job.out
srun bash -c 'echo "$SLURM_PROCID" > {shared}/"$SLURMD_NODENAME"'
""")
    job = cluster.sbatch(script)
    assert cluster.wait(job, timeout_s=120) == "COMPLETED", (tmp_path / "job.out").read_text()
    assert sorted(p.name for p in shared.iterdir()) == ["tally-n1", "tally-n2"]
    assert {p.read_text().strip() for p in shared.iterdir()} == {"0", "1"}
    assert "NodeList=tally-n[1-2]" in cluster.job(job)


def test_a_failing_job_ends_failed(cluster):
    job = cluster.sbatch("-N", "1", "--wrap", "exit 3")
    assert cluster.wait(job, timeout_s=120) == "FAILED"
    assert "ExitCode=3:0" in cluster.job(job)


def test_a_second_cluster_runs_beside_the_first_and_leaves_nothing(cluster):
    """Two at once (as two pytest workers may start): their own ports, munge sockets and
    directories; the second, stopped with a job still running, leaves no process, file or port."""
    with slurm.cluster(nodes=("tally-a", "tally-b"), cpus_per_node=1) as second:
        assert second.root != cluster.root and second.munge_socket != cluster.munge_socket
        ports = {second.ctld_port, *second.node_ports.values()}
        assert not ports & {cluster.ctld_port, *cluster.node_ports.values()}
        job = second.sbatch("-N", "2", "--wrap", "srun sleep 300")
        assert wait_for(lambda: second.state(job) == "RUNNING", timeout=60, every=0.1,
                              what="the sleep job to run", context=second.logs)
        # Each node's step runs under its own slurmstepd, carrying the cluster's SLURM_CONF.
        assert wait_for(lambda: len(_running(second, b"sleep")) == 2, timeout=60, every=0.1,
                              what="a sleep on each node", context=second.logs)
        assert _running(second, b"slurmstepd")
        daemons = list(second.daemons.values())
        both = cluster.run(["srun", "-N", "2", "printenv", "SLURMD_NODENAME"]).stdout.split()
        assert sorted(both) == ["tally-n1", "tally-n2"]  # the first still answers, untouched
    assert all(p.returncode is not None for p in daemons)
    assert second.processes() == []
    assert not second.root.exists()
    for port in ports:
        with socket.socket() as s:  # nothing listens there now (as the daemons do, ignore TIME_WAIT)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", port))
    assert cluster.run(["sinfo", "-h", "-o", "%D %t"]).stdout.split() == ["2", "idle"]


def _running(cluster: slurm.Cluster, program: bytes) -> list[int]:
    """The cluster's processes running `program` (slurmstepd names itself "slurmstepd: [1.0]")."""
    found = []
    for pid in cluster.processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        if os.path.basename(argv0).split(b":")[0] == program:
            found.append(pid)
    return found


def test_without_slurm_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setattr(slurm, "_SEARCH_PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="make slurm"), slurm.cluster():
        pass
