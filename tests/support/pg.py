"""A throw-away PostgreSQL for tests: Debian's server binaries (`make test` installs the package
where it is missing), a cluster made by initdb in a temporary directory, listening on a Unix
socket there only, stopped and deleted at the end. As root (CI, containers) the server runs as
`nobody`, since postgres refuses to run as root."""

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

PORT = 5432  # names the socket file only: nothing listens on TCP


def bin_dir() -> Path:
    """Debian's newest server binaries (/usr/lib/postgresql/<major>/bin), or initdb on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("no PostgreSQL server binaries: `make test` installs Debian's postgresql")
    return Path(initdb).parent


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "nobody", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """Start a cluster; yield its URL (user tally, database postgres, trust over the socket)."""
    bins = bin_dir()
    root = Path(tempfile.mkdtemp(prefix="tally-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
    run = dict(check=True, capture_output=True, text=True)
    try:
        subprocess.run(_as_server_user([str(bins / "initdb"), "-D", str(data), "-U", "tally", "-A", "trust",
                                        "-E", "UTF8", "--no-sync", "--no-instructions"]), **run)
        # max_connections: each Store keeps a pool, and each waiting dispatcher a listener.
        options = (f"-k {root} -p {PORT} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
                   "-c max_connections=400")
        subprocess.run(_as_server_user([str(bins / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                                        str(root / "server.log"), "-w", "start"]), **run)
        try:
            yield f"postgresql://tally@/postgres?host={root}&port={PORT}"
        finally:
            stop = [str(bins / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
            subprocess.run(_as_server_user(stop), capture_output=True)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"{e.cmd[0]} failed: {e.stderr}") from None
    finally:
        shutil.rmtree(root, ignore_errors=True)


def database_url(server: str, name: str) -> str:
    """The URL of the database `name` on the cluster whose URL (from `cluster`) is `server`."""
    head, _, query = server.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}?{query}"


_created = itertools.count()


def new_database(server: str) -> str:
    """A new, empty database on the cluster whose URL is `server`; its URL."""
    import psycopg  # here: initdb and pg_ctl alone need no driver

    name = f"t_{os.getpid()}_{next(_created)}"
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return database_url(server, name)
