"""How watching a job's child ended (app/jobs/dispatcher.py), and so what becomes of the job's row."""

import enum
from dataclasses import dataclass
from typing import Any


class Ending(enum.Enum):
    """How watching a job's child ended, and so what becomes of the job's row."""

    # Over, as Outcome.status says: the child's report, or a timeout, protocol error or cancel seen here.
    FINISHED = "finished"
    CRASHED = "crashed"  # its output ended without a report; its exit status, once reaped, says why
    STOPPING = "stopping"  # the dispatcher is stopping: the job goes back to the queue
    LOST = "lost"  # another worker holds the row now, so this one must not write it
    # A job on several boxes: this box's part ended well, and rank 0's result is another box's to write.
    PART_DONE = "part_done"
    PEER = "peer"  # another box of the job failed or was lost: Outcome.error names it


@dataclass(frozen=True)
class Outcome:
    ending: Ending
    status: str | None = None
    """The terminal status to record; FINISHED only."""
    result: Any = None
    """The probe's result type, parsed from the child's report (succeeded only)."""
    error: dict | None = None
