"""What can go wrong with the job database, said in one line. A SQLite file: a missing or
read-only directory, a file that is not a database, a full disk. A PostgreSQL server: nothing
listening, no such database, a refused login. Start-up prints it and exits 2, as a bad setting
does; at run time the API answers 503 with it (app/api/errors.py)."""

import os
import sqlite3
from pathlib import Path

# SQLite's own words for SQLITE_FULL: the disk, or a size limit, has no room for the write.
_FULL = "database or disk is full"
# Less free than this on the file's disk, and an I/O error or a file SQLite cannot open is a full
# disk's doing (creating a -wal or -shm file, or growing one, needs a page or a few).
NEARLY_FULL_BYTES = 256 * 1024
# libpq's and the server's words, as psycopg passes them on, for the ways a connection is turned away.
_REFUSED = ("connection refused", "no such file or directory", "could not connect", "timeout expired",
            "could not translate host name", "name or service not known", "network is unreachable")
_LOGIN = ("authentication failed", "no password supplied", "role \"")
_MISSING = "does not exist"


def _driver_error(error: BaseException) -> BaseException:
    """The driver's own exception: SQLAlchemy wraps it (as .orig) in one of its own."""
    return getattr(error, "orig", None) or error


def is_full(error: BaseException, path: Path | None = None) -> bool:
    """SQLITE_FULL; or, for the SQLite file at `path`, an I/O error (or a file it could not open) on
    a disk with next to no room left."""
    error = _driver_error(error)
    if not isinstance(error, sqlite3.OperationalError):
        return False
    text = str(error)
    if _FULL in text:
        return True
    if path is None or not ("disk I/O error" in text or "unable to open" in text):
        return False
    try:
        disk = os.statvfs(path.parent)
    except OSError:
        return False
    # A file system with no blocks at all (/proc) or mounted read-only is no full disk.
    writable = disk.f_blocks > 0 and not disk.f_flag & os.ST_RDONLY
    return writable and disk.f_bavail * disk.f_frsize < NEARLY_FULL_BYTES


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _postgres(text: str) -> str:
    line = _one_line(text)
    lower = line.lower()
    if 'database "' in lower and _MISSING in lower:
        return f"the server has no such database ({line}); create it, or name another in TALLY_DATABASE_URL"
    if any(words in lower for words in _LOGIN[:2]) or (_LOGIN[2] in lower and _MISSING in lower):
        return f"the server refused the login ({line}); check the user and password in TALLY_DATABASE_URL"
    if any(words in lower for words in _REFUSED):
        return f"the server cannot be reached ({line}); is PostgreSQL running where TALLY_DATABASE_URL says?"
    return line


def problem(error: BaseException, *, path: Path | None = None) -> str:
    """What an operator should know about `error` on the database (the SQLite file at `path`;
    None for PostgreSQL)."""
    error = _driver_error(error)
    text = str(error)
    if path is None:
        return _postgres(text)
    if is_full(error, path):
        return f"the disk holding it is full ({text}); free some space"
    if isinstance(error, sqlite3.DatabaseError) and "not a database" in text:
        return "the file is not a SQLite database; point TALLY_DATABASE_PATH at another file"
    if "readonly" in text or "read-only" in text:
        return f"it is read-only ({text})"
    if "unable to open" in text:
        return (f"it cannot be created or opened: is {path.parent} an existing directory this user may "
                "write to?")
    return _one_line(text)


class StoreUnavailable(Exception):
    """The job database cannot be opened, created or written."""

    def __init__(self, where: str | Path, error: BaseException | str, *, path: Path | None = None) -> None:
        """`where`: the file, or the server's URL without its password; `error`: the exception
        (`path`: the SQLite file it concerns), or the problem in words."""
        self.where = str(where)
        self.problem = error if isinstance(error, str) else problem(error, path=path)
        super().__init__(f"the job database {self.where}: {self.problem}")
