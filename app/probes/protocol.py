"""What a job's child and its dispatcher agree on beyond the JSON lines (app/bench/child.py writes
the protocol down): the keep-alive's deadline, set in the child's environment, and the exit codes
of a child that stopped itself for its parent's sake; and where a job that spans boxes meets."""

from collections.abc import Mapping
from dataclasses import dataclass

KEEPALIVE_VAR = "TALLY_KEEPALIVE_S"
"""Seconds a child waits for a keep-alive (a newline on stdin) before it takes its parent for
stalled; unset: it waits for the end of its stdin alone."""
PARENT_DIED_EXIT = 3
"""Its stdin ended: the dispatcher died."""
PARENT_STALLED_EXIT = 4
"""No keep-alive within KEEPALIVE_VAR seconds: the dispatcher is paused or stalled."""

# A job that spans boxes (app/jobs/gangs.py gathers them; app/bench/nodes.py starts the ranks):
# what each box's child is told in its environment. Under Slurm the batch script sets the same.
NODES_VAR = "TALLY_NODES"
"""How many boxes the job spans; unset or 1: one box, its ranks started by app/bench/dist.py."""
NODE_VAR = "TALLY_NODE"
"""This box's place among them, 0 first: box 0 hosts the rendezvous' store."""
RANKS_PER_NODE_VAR = "TALLY_RANKS_PER_NODE"
"""Ranks on each box: its GPUs; unset or 0 (a CPU job), the probe's own count."""
ENDPOINT_VAR = "TALLY_RDZV_ENDPOINT"
"""host:port of the c10d rendezvous (torchrun's --rdzv-endpoint)."""
RUN_ID_VAR = "TALLY_RDZV_ID"
"""The rendezvous' id (torchrun's --rdzv-id): the job and its attempt, so a retry never meets
an earlier attempt's agents."""
ADDRESS_VAR = "TALLY_NODE_ADDRESS"
"""The address the other boxes reach this one at (torchrun's --local-addr)."""
BOX_VAR = "TALLY_BOX_NAME"
JOIN_TIMEOUT_VAR = "TALLY_RDZV_JOIN_TIMEOUT_S"
JOIN_TIMEOUT_S = 60.0
"""Seconds the boxes' agents wait for each other at the rendezvous: the boxes were gathered
before the job started, so they come within seconds; one that does not is lost."""


@dataclass(frozen=True)
class Nodes:
    count: int
    node: int
    ranks_per_node: int
    endpoint: str
    run_id: str
    address: str | None = None
    box: str | None = None
    join_timeout_s: float = JOIN_TIMEOUT_S

    def env(self) -> dict[str, str]:
        """The variables that say this to a child (from_env reads them back)."""
        out = {NODES_VAR: str(self.count), NODE_VAR: str(self.node),
               RANKS_PER_NODE_VAR: str(self.ranks_per_node), ENDPOINT_VAR: self.endpoint,
               RUN_ID_VAR: self.run_id, JOIN_TIMEOUT_VAR: f"{self.join_timeout_s:g}"}
        if self.address:
            out[ADDRESS_VAR] = self.address
        if self.box:
            out[BOX_VAR] = self.box
        return out


def nodes_from_env(env: Mapping[str, str], *, ranks_per_node: int) -> Nodes | None:
    """The job's boxes as the child's environment gives them; None for a job on one box.
    `ranks_per_node`: the probe's own count, where the environment does not say."""
    count = int(env.get(NODES_VAR) or 1)
    if count < 2:
        return None
    return Nodes(count=count, node=int(env.get(NODE_VAR) or 0),
                 ranks_per_node=int(env.get(RANKS_PER_NODE_VAR) or 0) or ranks_per_node,
                 endpoint=env[ENDPOINT_VAR], run_id=env.get(RUN_ID_VAR) or "tally",
                 address=env.get(ADDRESS_VAR) or None, box=env.get(BOX_VAR) or None,
                 join_timeout_s=float(env.get(JOIN_TIMEOUT_VAR) or JOIN_TIMEOUT_S))


SECONDARY_WORDS = ("connection closed by peer", "connection reset", "broken pipe", "econnreset",
                   "socket timeout", "communicator was aborted", "timed out", "timeout", "connection refused",
                   "read error", "rendezvous")
"""Words of an error a rank raises because a peer on another box went away, not by a fault of its
own (gloo's "Connection closed by peer", NCCL's aborted communicator, a rendezvous that lost a
member): the consequence, where the box that failed first holds the cause."""


def secondary(message: str) -> bool:
    """Whether an error reads as the echo of a peer's failure (SECONDARY_WORDS)."""
    text = message.lower()
    return any(word in text for word in SECONDARY_WORDS)
