"""A job's attempts: how each run of it ended (the `attempts_log` column, a JSON list that
Store._move appends to), and the rule that retries a job whose worker died without blaming the job for it.

Each entry is {attempt, worker_id, started_at, ended_at, reason}: the attempt's number, the
dispatcher that ran it, unix seconds, and why it ended: the terminal status it ended in, or
WORKER_LOST (its dispatcher died under it; recovered) or REQUEUED (its dispatcher stopped).
"""

import json

WORKER_LOST = "worker_lost"
REQUEUED = "requeued"


def append(text: str | None, *, attempt: int, worker_id: str | None, started_at: float | None,
           ended_at: float, reason: str) -> str:
    """The log `text` with the ending attempt's entry added: what the row's attempts_log becomes in
    the move out of `running`, from the row as it was before the move (read under the move's lock,
    so the entry names the attempt that is ending). Compact JSON, as SQLite's json_insert wrote it
    before, so old and new entries read alike."""
    entry = {"attempt": attempt, "worker_id": worker_id, "started_at": started_at, "ended_at": ended_at,
             "reason": reason}
    return json.dumps([*decode(text), entry], separators=(",", ":"), allow_nan=False)


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
