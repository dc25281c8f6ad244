"""A job's attempts: the SQL that records how each run of it ended (the `attempts_log` column),
and the rule that retries a job whose worker died without blaming the job for it.

Each entry is {attempt, worker_id, started_at, ended_at, reason}: the attempt's number, the
dispatcher that ran it, unix seconds, and why it ended: the terminal status it ended in, or
WORKER_LOST (its dispatcher died under it; recovered) or REQUEUED (its dispatcher stopped).
"""

import json

WORKER_LOST = "worker_lost"
REQUEUED = "requeued"
# Appended in the UPDATE that moves a job out of `running`; the column names read the row as it
# was before the move (SQLite evaluates every SET expression on the old row), so the entry names
# the attempt that is ending. Parameters: ended_at, reason.
APPEND = ("json_insert(COALESCE(attempts_log, '[]'), '$[#]', json_object('attempt', attempts, "
          "'worker_id', worker_id, 'started_at', started_at, 'ended_at', ?, 'reason', ?))")


def decode(text: str | None) -> list[dict]:
    return [] if text is None else json.loads(text)


def worker_losses(text: str | None) -> int:
    """Attempts that ended because their worker died."""
    return sum(entry["reason"] == WORKER_LOST for entry in decode(text))


def lost_too_often(losses: int, retries: int) -> dict:
    """The error of a job whose workers died under it once more than `retries` allows."""
    return {"type": "WorkerLost",
            "message": f"the job's worker died while running it {losses} times (TALLY_WORKER_LOSS_RETRIES "
                       f"is {retries}); the job itself never failed, but it is not retried again",
            "detail": {"worker_losses": losses, "retries": retries}}
