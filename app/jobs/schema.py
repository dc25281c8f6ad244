"""The job database's tables, declared once for both databases, and the migrations that bring an
older database to the latest version when it is opened.

Types are SQLite's own on SQLite, so a new file is column for column and index for index what
Tally has always written; on PostgreSQL they are their equals: INTEGER is 64-bit on SQLite, so
BIGINT (and BIGSERIAL for ids); REAL unix seconds are doubles, so DOUBLE PRECISION (PostgreSQL's
REAL is 32-bit: a unix time in it keeps about two minutes' precision). JSON columns stay TEXT on
both, so both keep the very text the store wrote.

Versions: 0, a database from before versions were kept (a jobs table without gpu, ran_on_gpu and
attempts_log, or with some of them); 1, those three columns; 2, a job may ask for several GPUs
(num_gpus; gpus, a JSON list of indices) and records those it ran on (ran_on_gpus, a JSON list);
NULL in a row from before means one GPU, as the row's gpu says; 3, the fleet: a job's targets
(target_host, target_device, target_model), its campaign, and the device it ran on, beside the
devices and campaigns tables; 4, a running job's claim token (`claim`, app/jobs/store.py), which
every write of the attempt that holds it names; 5, a profile's device; 6, a job's nodes (the
boxes it spans). The version lives in the one-row
table tally_schema; on SQLite also in PRAGMA user_version, which Tally kept before tally_schema
(and is read where tally_schema is absent or empty) and still writes, so an older Tally finds
the version it expects.
"""

from collections.abc import Callable

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.dialects import postgresql

from app.jobs import backends

INTEGER = sa.Integer().with_variant(sa.BigInteger(), "postgresql")
REAL = sa.REAL().with_variant(postgresql.DOUBLE_PRECISION(), "postgresql")
TEXT = sa.Text()

metadata = sa.MetaData()

# nullable=True on the ids: SQLite's `INTEGER PRIMARY KEY` as Tally has always declared it (a
# primary key is NOT NULL on PostgreSQL whatever is said).
jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", INTEGER, primary_key=True, autoincrement=True, nullable=True),
    sa.Column("probe", TEXT, nullable=False),
    sa.Column("params", TEXT, nullable=False),
    sa.Column("status", TEXT, nullable=False),
    sa.Column("attempts", INTEGER, nullable=False, server_default=sa.text("0")),
    sa.Column("timeout_s", REAL, nullable=False),
    sa.Column("created_at", REAL, nullable=False),
    sa.Column("started_at", REAL),
    sa.Column("finished_at", REAL),
    sa.Column("progress_done", INTEGER, nullable=False, server_default=sa.text("0")),
    sa.Column("progress_total", INTEGER, nullable=False, server_default=sa.text("0")),
    sa.Column("progress_message", TEXT, nullable=False, server_default=sa.text("''")),
    sa.Column("result", TEXT),
    sa.Column("error", TEXT),
    sa.Column("worker_id", TEXT),
    sa.Column("heartbeat_at", REAL),
    sa.Column("cancel_requested", INTEGER, nullable=False, server_default=sa.text("0")),
    sa.Column("revision", INTEGER, nullable=False, server_default=sa.text("0")),
    sa.Column("device", TEXT),
    sa.Column("gpu", INTEGER),
    sa.Column("ran_on_gpu", INTEGER),
    sa.Column("attempts_log", TEXT),
    sa.Column("num_gpus", INTEGER),
    sa.Column("gpus", TEXT),
    sa.Column("ran_on_gpus", TEXT),
    sa.Column("target_host", TEXT),
    sa.Column("target_device", TEXT),
    sa.Column("target_model", TEXT),
    sa.Column("campaign_id", INTEGER),
    sa.Column("ran_on_device", TEXT),
    sa.Column("claim", TEXT),
    sa.Column("nodes", INTEGER),
    sqlite_autoincrement=True,
)
GPU_INDEX = sa.Index("jobs_status_gpu_id", jobs.c.status, jobs.c.gpu, jobs.c.id)
sa.Index("jobs_status_id", jobs.c.status, jobs.c.id)
sa.Index("jobs_probe_id", jobs.c.probe, jobs.c.id)
CAMPAIGN_INDEX = sa.Index("jobs_campaign_id", jobs.c.campaign_id, jobs.c.id)
DEVICE_INDEX = sa.Index("jobs_ran_on_device_id", jobs.c.ran_on_device, jobs.c.id)

# The fleet (app/jobs/fleet.py): every device a worker has registered, a GPU by NVML's UUID or a
# host's CPU as "<host>:cpu", with what NVML says of it and when its dispatcher was last seen.
devices = sa.Table(
    "devices", metadata,
    sa.Column("device", TEXT, primary_key=True, nullable=True),
    sa.Column("host", TEXT, nullable=False),
    sa.Column("kind", TEXT, nullable=False),
    sa.Column("gpu_index", INTEGER),
    sa.Column("name", TEXT, nullable=False),
    sa.Column("catalogue_id", TEXT),
    sa.Column("memory_bytes", INTEGER),
    sa.Column("driver_version", TEXT),
    sa.Column("cuda_driver_version", TEXT),
    sa.Column("compute_capability", TEXT),
    sa.Column("max_sm_clock_mhz", INTEGER),
    sa.Column("max_memory_clock_mhz", INTEGER),
    sa.Column("power_limit_watts", REAL),
    sa.Column("worker_id", TEXT),
    sa.Column("registered_at", REAL, nullable=False),
    sa.Column("seen_at", REAL, nullable=False),
)

# A job fanned out to every device of the fleet (a burn-in), grouped for its results.
campaigns = sa.Table(
    "campaigns", metadata,
    sa.Column("id", INTEGER, primary_key=True, autoincrement=True, nullable=True),
    sa.Column("probe", TEXT, nullable=False),
    sa.Column("params", TEXT, nullable=False),
    sa.Column("created_at", REAL, nullable=False),
    sa.Column("outlier_fraction", REAL, nullable=False),
    sqlite_autoincrement=True,
)

# Calibration profiles (app/jobs/profiles.py): the JSON of app/accounting/calibration/profile.Profile,
# numbered per device model. A table added whole, without a version step: a database that lacks it
# gets it when opened (the create_all below), and an older Tally that opens this one ignores it.
profiles = sa.Table(
    "profiles", metadata,
    sa.Column("id", INTEGER, primary_key=True, autoincrement=True, nullable=True),
    sa.Column("device_model", TEXT, nullable=False),
    sa.Column("version", INTEGER, nullable=False),
    sa.Column("created_at", REAL, nullable=False),
    sa.Column("body", TEXT, nullable=False),
    # Null: every device of the model; else the one device (a GPU's UUID, "<host>:cpu") an outlier's
    # own profile was built from (schema version 5).
    sa.Column("device", TEXT),
    sqlite_autoincrement=True,
)
sa.Index("profiles_device_model_version", profiles.c.device_model, profiles.c.version, unique=True)

# Calibration campaigns (app/jobs/profiles.py): the jobs queued for one device model's profile, and
# the profile built from them once they ended (or why none could be). Added whole, as profiles.
calibrations = sa.Table(
    "calibrations", metadata,
    sa.Column("id", INTEGER, primary_key=True, autoincrement=True, nullable=True),
    sa.Column("device_model", TEXT, nullable=False),
    sa.Column("jobs", TEXT, nullable=False),
    sa.Column("held_out", TEXT, nullable=False),
    sa.Column("created_at", REAL, nullable=False),
    sa.Column("profile_id", INTEGER),
    sa.Column("error", TEXT),
    sqlite_autoincrement=True,
)

# The accuracy ledger (app/jobs/profiles.py, app/measured/accuracy.py): each probe job's (prediction,
# measurement) pairs, per mode and, for calibrated ones, the profile that made the prediction.
ledger = sa.Table(
    "ledger", metadata,
    sa.Column("id", INTEGER, primary_key=True, autoincrement=True, nullable=True),
    sa.Column("job_id", INTEGER, nullable=False),
    sa.Column("probe", TEXT, nullable=False),
    sa.Column("device_model", TEXT, nullable=False),
    sa.Column("metric", TEXT, nullable=False),
    sa.Column("kind", TEXT, nullable=False),
    sa.Column("mode", TEXT, nullable=False),
    sa.Column("profile_id", INTEGER),
    sa.Column("profile_version", INTEGER),
    sa.Column("predicted", REAL, nullable=False),
    sa.Column("measured", REAL, nullable=False),
    sa.Column("detail", TEXT, nullable=False),
    sa.Column("recorded_at", REAL, nullable=False),
    sqlite_autoincrement=True,
)
sa.Index("ledger_job_mode", ledger.c.job_id, ledger.c.mode, ledger.c.profile_id)

workers = sa.Table(
    "workers", metadata,
    sa.Column("worker_id", TEXT, primary_key=True, nullable=True),
    sa.Column("seen_at", REAL, nullable=False),
)

# Device leases (app/jobs/leases.py): one row per device a running job holds.
leases = sa.Table(
    "leases", metadata,
    sa.Column("device", TEXT, primary_key=True, nullable=True),
    sa.Column("job_id", INTEGER, nullable=False),
    sa.Column("worker_id", TEXT),
    sa.Column("heartbeat_at", REAL, nullable=False),
)

# A job that spans boxes (app/jobs/gangs.py): one row per box that joined it, in join order (its
# node), with the address and port it publishes for the rendezvous, its own token and heartbeat,
# and how its part ended. Added whole, as profiles; the rows of a job's last attempt are kept.
members = sa.Table(
    "members", metadata,
    sa.Column("job_id", INTEGER, primary_key=True, nullable=False),
    sa.Column("host", TEXT, primary_key=True, nullable=False),
    sa.Column("node", INTEGER, nullable=False),
    sa.Column("worker_id", TEXT, nullable=False),
    sa.Column("device", TEXT),
    sa.Column("address", TEXT, nullable=False),
    sa.Column("port", INTEGER, nullable=False),
    sa.Column("token", TEXT, nullable=False),
    sa.Column("status", TEXT, nullable=False),
    sa.Column("error", TEXT),
    sa.Column("joined_at", REAL, nullable=False),
    sa.Column("heartbeat_at", REAL, nullable=False),
    sa.Column("ended_at", REAL),
)

tally_schema = sa.Table("tally_schema", metadata, sa.Column("version", INTEGER, nullable=False))


def _add_columns(ops: Operations, db: sa.Connection, names: tuple[str, ...]) -> None:
    have = {column["name"] for column in sa.inspect(db).get_columns("jobs")}
    for name in names:
        if name not in have:  # a version-0 database may have some of version 1's already
            ops.add_column("jobs", sa.Column(name, jobs.c[name].type))


def _v1(ops: Operations, db: sa.Connection) -> None:
    """A job may name its GPU (and the index its dispatchers' claims read by); attempts are logged."""
    _add_columns(ops, db, ("gpu", "ran_on_gpu", "attempts_log"))
    if GPU_INDEX.name not in {index["name"] for index in sa.inspect(db).get_indexes("jobs")}:
        ops.create_index(GPU_INDEX.name, "jobs", [column.name for column in GPU_INDEX.columns])


def _v2(ops: Operations, db: sa.Connection) -> None:
    """A job may ask for several GPUs, and records those it ran on."""
    _add_columns(ops, db, ("num_gpus", "gpus", "ran_on_gpus"))


def _v3(ops: Operations, db: sa.Connection) -> None:
    """The fleet: a job may target a host, a device or a GPU model, belong to a campaign, and
    records the device it ran on (the devices and campaigns tables are created whole after)."""
    _add_columns(ops, db, ("target_host", "target_device", "target_model", "campaign_id", "ran_on_device"))
    have = {index["name"] for index in sa.inspect(db).get_indexes("jobs")}
    for index in (CAMPAIGN_INDEX, DEVICE_INDEX):
        if index.name not in have:
            ops.create_index(index.name, "jobs", [column.name for column in index.columns])


def _v4(ops: Operations, db: sa.Connection) -> None:
    """Writes after a claim are fenced by the claim's token, not by a worker's name."""
    _add_columns(ops, db, ("claim",))


def _v6(ops: Operations, db: sa.Connection) -> None:
    """A job may span boxes (nodes; its members in a table of their own)."""
    _add_columns(ops, db, ("nodes",))


def _v5(ops: Operations, db: sa.Connection) -> None:
    """A calibration profile may be one device's own (an outlier of its model)."""
    if sa.inspect(db).has_table("profiles") and "device" not in {
            column["name"] for column in sa.inspect(db).get_columns("profiles")}:
        ops.add_column("profiles", sa.Column("device", TEXT))


# Oldest first, each step run in a transaction of its own that also records its number. A step
# alters the tables a database already has; tables it lacks (workers, leases, tally_schema in the
# oldest) are then created whole, as declared above.
MIGRATIONS: tuple[tuple[int, Callable[[Operations, sa.Connection], None]], ...] = (
    (1, _v1), (2, _v2), (3, _v3), (4, _v4), (5, _v5), (6, _v6))
VERSION = MIGRATIONS[-1][0]
# The advisory lock (PostgreSQL) under which one process at a time reads and moves the version.
LOCK = "tally:schema"


class NewerDatabase(Exception):
    """The database's schema is newer than this code knows: opening it could break a newer Tally."""

    def __init__(self, version: int) -> None:
        super().__init__(f"its schema is version {version}, newer than this Tally's {VERSION}: run the "
                         "Tally that wrote it, or point Tally at another database")
        self.version = version


def version(db: sa.Connection) -> int:
    """The database's schema version; 0 for one from before versions were kept (or a new one)."""
    if sa.inspect(db).has_table(tally_schema.name):
        kept = db.execute(sa.select(tally_schema.c.version)).scalar()
        if kept is not None:
            return kept
    if db.dialect.name == "sqlite":
        return db.exec_driver_sql("PRAGMA user_version").scalar()
    return 0


def _set_version(db: sa.Connection, number: int) -> None:
    tally_schema.create(db, checkfirst=True)
    db.execute(tally_schema.delete())
    db.execute(tally_schema.insert().values(version=number))
    if db.dialect.name == "sqlite":
        db.exec_driver_sql(f"PRAGMA user_version = {int(number)}")


def migrate(engine: sa.Engine) -> int:
    """Bring the database to VERSION, creating what is missing (every table, in a new one); its
    rows keep their data. NewerDatabase when it is beyond VERSION. Opening a current database
    reads its version and changes nothing. Returns the version it is now at."""
    with backends.write(engine) as db:
        backends.lock(db, LOCK)
        at, tables = version(db), set(sa.inspect(db).get_table_names())
        if at > VERSION:
            raise NewerDatabase(at)
        if jobs.name not in tables:  # a new database: every table whole, at the latest version
            metadata.create_all(db)
            _set_version(db, VERSION)
            return VERSION
        if at == VERSION and tables >= set(metadata.tables):
            return at
    for number, step in MIGRATIONS:
        with backends.write(engine) as db:
            backends.lock(db, LOCK)  # another process may have moved it meanwhile: read it again
            if version(db) < number:
                step(Operations(MigrationContext.configure(db)), db)
                _set_version(db, number)
    with backends.write(engine) as db:
        backends.lock(db, LOCK)
        at = version(db)
        metadata.create_all(db)  # only the tables it lacks; those it has are left as they are
        _set_version(db, at)
    return at
