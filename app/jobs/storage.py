"""What can go wrong with the job database's file, said in one line: a missing or read-only
directory, a file that is not a database, a full disk. Start-up prints it and exits 2, as a
bad setting does; at run time the API answers 503 with it (app/api/errors.py)."""

import sqlite3
from pathlib import Path

# SQLite's own words for SQLITE_FULL: the disk, or a size limit, has no room for the write.
_FULL = "database or disk is full"


def is_full(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and _FULL in str(error)


def problem(path: Path, error: sqlite3.Error) -> str:
    """What an operator should know about `error` on the database at `path`."""
    text = str(error)
    if is_full(error):
        return f"the disk holding it is full ({text}); free some space"
    if isinstance(error, sqlite3.DatabaseError) and "not a database" in text:
        return "the file is not a SQLite database; point TALLY_DATABASE_PATH at another file"
    if "readonly" in text or "read-only" in text:
        return f"it is read-only ({text})"
    if "unable to open" in text:
        return (f"it cannot be created or opened: is {path.parent} an existing directory this user may "
                "write to?")
    return text


class StoreUnavailable(Exception):
    """The job database cannot be opened, created or written."""

    def __init__(self, path: Path, error: sqlite3.Error) -> None:
        self.path, self.problem = path, problem(path, error)
        super().__init__(f"the job database {path}: {self.problem}")
