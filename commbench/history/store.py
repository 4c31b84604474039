"""The history database: where it is, its schema and migrations, and opening it safely.

A history is a SQLite file (the default, `results/history.sqlite` in the folder commbench runs
in: one per project folder, whatever folder a run's CSV goes to) or a PostgreSQL database a team
shares, named by a URL (`postgresql://user@host:port/db`, or `postgres://`) or a libpq connection
string (`host=... dbname=...`: is_url). Both go through SQLAlchemy Core, one
code path and one set of SQL for both, so the tests that pass on one pass on the other. SQLite
runs in WAL mode with `BEGIN IMMEDIATE` transactions: a writer takes the write lock when its
transaction starts, so two runs writing at once wait for each other (up to a minute) instead of
failing or losing rows; PostgreSQL's row inserts never conflict. Migrations run under the same
write lock (PostgreSQL: an advisory lock), so two processes opening an old history at once
migrate it once.

SQLAlchemy and the PostgreSQL driver are imported here only, when a history is opened, so the
CLI's start-up does not pay for them.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.errors import UserError, warn
from commbench.redact import redact

# The history's own schema version (not the CSV's): MIGRATIONS below bring any older history up to it.
HISTORY_SCHEMA = 2
DEFAULT_NAME = "history.sqlite"
NO_HISTORY = "off"  # SweepConfig.history under --no-history
HISTORY_ENV = "COMMBENCH_HISTORY"  # the default --history where set (a team's database URL)
SQLITE_BUSY_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10
# pg_advisory_xact_lock's key for migrations: any constant, the same in every commbench.
_MIGRATION_LOCK = 0x636F6D6D  # "comm"

META, RUNS, ROWS, HOSTS = "history_meta", "history_runs", "history_rows", "history_hosts"


DEFAULT_LOCATION = Path("results") / DEFAULT_NAME


def history_location(requested: str | None) -> str | None:
    """Where every command's history is (sweep, syncbn, compare, history *): --history (or
    $COMMBENCH_HISTORY, which click reads as its default), else results/history.sqlite in the
    current folder: one history per project folder, so runs written to any folder from one
    project meet in one history. None under --no-history. Refused in one line, before anything
    runs: an empty value, a folder, a device, a FIFO."""
    if requested == NO_HISTORY:
        return None
    if requested is not None and not requested.strip():
        raise UserError(
            "--history is empty: give a SQLite file or a postgresql:// URL, or leave --history out for the default"
        )
    target = requested or str(DEFAULT_LOCATION)
    if not is_url(target):
        from commbench.results.paths import target_kind

        if redact(target) != target:  # a password (or a token) never becomes a file's name
            raise UserError(
                f"--history {redact(target)} holds a secret but is neither a postgresql:// URL nor a libpq "
                "connection string (host=... dbname=...); give one of those, or a SQLite file name without it"
            )
        if (kind := target_kind(Path(target), "--history")) not in (None, "file"):
            raise UserError(
                f"--history {target} is a {kind}; give a file such as {Path(target) / DEFAULT_NAME}"
                if kind == "folder"
                else f"--history {target} is a {kind}, not a file; give a SQLite file or a postgresql:// URL"
            )
    return target


def history_file(requested: str | None) -> str | None:
    """The SQLite file a run's history is (so that no output of the run lands on it), or None: no
    history, or a database URL. Unchecked: history_location refuses what is unusable."""
    if requested == NO_HISTORY or (requested is not None and not requested.strip()):
        return None
    target = requested or str(DEFAULT_LOCATION)
    return None if is_url(target) else target


def history_folder(location: str) -> Path:
    """Where files made from a history go by default (history trend's chart): beside a SQLite
    history, and in results/ of the current folder for a database URL."""
    return DEFAULT_LOCATION.parent if is_url(location) else Path(location).parent


def open_run_history(requested: str | None) -> History | None:
    """The history a run files itself in (see history_location), opened and migrated; None under
    --no-history, or when the default history is unusable (one warning: a broken default history
    never stops a sweep; one the user named is refused in one line). The default history's folder
    (results/) is created when missing."""
    target = history_location(requested)
    if target is None:
        return None
    if requested is None:
        from commbench.results.paths import make_folder

        make_folder(DEFAULT_LOCATION.parent)
    try:
        import sqlalchemy  # noqa: F401  (only whether it is there)
    except ImportError:
        if requested is None:
            _without_default("sqlalchemy is not installed (pip install sqlalchemy; --no-history silences this)")
            return None
        raise UserError(f"--history {redact(target)} needs sqlalchemy: pip install sqlalchemy") from None
    try:
        return open_history(target, hint="check it, or pass --no-history")
    except UserError as exc:
        if requested is not None:
            raise
        _without_default(exc.format_message())
        return None


def check_run_history(requested: str | None) -> str | None:
    """Before any rank starts, the history a run will file itself in, checked, so that a refusal
    costs well under a second rather than a start of the ranks. It is opened and closed again; a
    SQLite file that does not exist yet only has its folder checked (a refused run leaves no file
    behind; the default's folder, results/, is made when the run opens it). Returns the --history
    to run with: NO_HISTORY when the default history is unusable (after its one warning, so the
    ranks do not warn again)."""
    target = history_location(requested)
    if target is None:
        return requested
    if not is_url(target) and not Path(target).exists():
        if requested is not None:
            _check_sqlite_path(Path(target))
        return requested
    history = open_run_history(requested)
    if history is None:
        return NO_HISTORY
    history.close()
    return requested


def _without_default(why: str) -> None:
    warn(f"this run is not filed in its default history ({why}); the CSV keeps every row")


def is_url(target: str) -> bool:
    """Whether a history location names a database, not a SQLite file: a URL (`postgresql://`,
    `postgres://`, `sqlite://`), or a libpq connection string, which begins `keyword=` (a SQLite file
    whose name does is given with its folder: ./host=a.sqlite)."""
    return "://" in target or _CONNINFO.match(target) is not None


_CONNINFO = re.compile(r"\s*[A-Za-z_]+\s*=")


@dataclass
class History:
    """An open history: the engine, a label safe to print (never a password), its dialect, and what
    its command offers when the database fails (only options that command has)."""

    engine: Any
    label: str
    dialect: str
    hint: str = "check it, or give --history another"

    @contextlib.contextmanager
    def begin(self) -> Iterator[Any]:
        """A write transaction (SQLite: BEGIN IMMEDIATE, the write lock taken at once)."""
        with _errors(self.label, self.hint), self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        with _errors(self.label, self.hint), self.engine.connect() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()


def open_history(target: str, create: bool = True, hint: str | None = None) -> History:
    """Open (and, when create, make or migrate) the history at a path or URL; every way it can be
    unusable is a one-line UserError: a missing folder, a database that is down, a file that is not
    a history, a history written by a newer commbench."""
    if "://" not in target and is_url(target):
        engine, label = _conninfo_engine(target)
    elif is_url(target):
        engine, label = _url_engine(target)
    else:
        engine, label = _sqlite_engine(Path(target), create)
    history = History(engine, label, engine.dialect.name, *([hint] if hint else []))
    try:
        _migrate(history)
    except BaseException:
        engine.dispose()
        raise
    return history


def _check_sqlite_path(path: Path) -> None:
    if path.is_dir():
        raise UserError(f"--history {path} is a folder; give a file such as {path / DEFAULT_NAME}")
    if not path.parent.is_dir():
        raise UserError(f"the history's folder {path.parent} does not exist; create it, or give --history another path")


def _sqlite_engine(path: Path, create: bool) -> tuple[Any, str]:
    _check_sqlite_path(path)
    if not create and not path.exists():
        raise UserError(
            f"no history at {path}: a sweep records itself there (or `commbench history import` fills it); "
            "give another with --history PATH|URL"
        )
    import sqlalchemy
    from sqlalchemy import event

    engine = sqlalchemy.create_engine(f"sqlite:///{path.resolve()}", connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy's documented recipe: the driver's own transaction handling off, BEGIN issued below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # a reader never blocks the writer, nor it them
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine, str(path)


def _url_engine(target: str) -> tuple[Any, str]:
    import sqlalchemy
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(target)
    except (ArgumentError, ValueError) as exc:
        why = "its port is not a number" if "int()" in str(exc) else "it is not a database URL"
        raise UserError(
            f"--history {redact(target)}: {why}; give postgresql://USER@HOST:PORT/DB (PORT a number, "
            "5432 by default) or a file path"
        ) from None
    if url.host and "@" in url.host:  # a raw '@' in the password: the host follows the last '@'
        tail, host = url.host.rsplit("@", 1)
        url = url.set(password=f"{url.password or ''}@{tail}", host=host)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(Path(url.database or ""), True)
    if backend not in ("postgresql", "postgres"):
        raise UserError(f"--history takes a postgresql:// URL or a SQLite file path (got a {backend}:// URL)")
    url = url.set(drivername=f"postgresql+{_pg_driver(url.drivername)}")
    label = f"postgresql://{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"
    try:
        engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}, pool_pre_ping=True)
    except ImportError as exc:  # the driver the URL names
        raise UserError(f"{NO_DRIVER} ({exc})") from None
    return engine, label


def _conninfo_engine(conninfo: str) -> tuple[Any, str]:
    """A libpq connection string (`host=db port=5432 dbname=bench user=cb`), read by libpq itself
    through the driver and handed to it whole; its label names host, port and database only. A
    string libpq cannot read is refused without quoting it (a password may be what it stumbled on)."""
    import importlib

    import sqlalchemy

    driver = _pg_driver("postgresql")
    module = importlib.import_module(driver)
    try:
        if driver == "psycopg":
            params = importlib.import_module("psycopg.conninfo").conninfo_to_dict(conninfo)
        else:
            params = importlib.import_module("psycopg2.extensions").parse_dsn(conninfo)
    except module.Error:
        raise UserError(
            "--history is read as a libpq connection string (it begins `keyword=`), which libpq cannot read: "
            "give key=value pairs of libpq's keywords, a value holding a space in single quotes, or a "
            "postgresql:// URL"
        ) from None
    label = (
        f"postgresql://{params.get('host') or 'localhost'}:{params.get('port') or 5432}/{params.get('dbname') or ''}"
    )
    engine = sqlalchemy.create_engine(
        f"postgresql+{driver}://",
        creator=lambda: module.connect(conninfo, connect_timeout=CONNECT_TIMEOUT_S),
        pool_pre_ping=True,
    )
    return engine, redact(label)


def _pg_driver(drivername: str) -> str:
    """The PostgreSQL driver: the one the URL names (postgresql+NAME://), else psycopg (3), else
    psycopg2. (SQLAlchemy's own default for a bare postgresql:// is psycopg2, whichever is there.)"""
    import importlib

    if named := drivername.partition("+")[2]:
        return named  # create_engine imports it (see _url_engine)
    for driver in ("psycopg", "psycopg2"):
        try:  # imported, not only found: a driver that is there but cannot load (no libpq) is none
            importlib.import_module(driver)
        except ImportError:
            continue
        return driver
    raise UserError(NO_DRIVER)


NO_DRIVER = (
    "a postgresql:// history needs the PostgreSQL driver, which is not installed: "
    "pip install 'commbench[postgresql]' (or pip install 'psycopg[binary]')"
)


@contextlib.contextmanager
def _errors(label: str, hint: str) -> Iterator[None]:
    """The database's errors as one line naming where (host and port, never a password)."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    try:
        yield
    except OperationalError as exc:
        raise UserError(f"cannot use the history {label}: {_reason(exc)}; {hint}") from None
    except DBAPIError as exc:
        if "not a database" in str(exc.orig):
            raise UserError(
                f"{label} is not a commbench history (not a SQLite database); give --history another file"
            ) from None
        if "malformed" in str(exc.orig) or "disk I/O error" in str(exc.orig):  # a cut or damaged file
            raise UserError(
                f"the history {label} is damaged ({_reason(exc)}): restore it from a backup, or move it aside "
                "and `commbench history import` the CSVs into a new one"
            ) from None
        raise


def _reason(exc: Any) -> str:
    """The driver's first line, with any password taken out."""
    lines = [line.strip() for line in str(getattr(exc, "orig", exc)).splitlines() if line.strip()]
    return redact(lines[0] if lines else type(exc).__name__)


# -- schema and migrations -------------------------------------------------------------------------

_V1 = (
    f"CREATE TABLE {META} (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)",
    f"CREATE TABLE {RUNS} (run_id VARCHAR(64) PRIMARY KEY, fingerprint VARCHAR(64), kind VARCHAR(32), "
    "command TEXT, backend VARCHAR(32), world_size INTEGER, hosts TEXT, started_at VARCHAR(40) NOT NULL, "
    "ended_at VARCHAR(40), status VARCHAR(16) NOT NULL, source TEXT, commbench_version VARCHAR(32), provenance TEXT)",
    f"CREATE TABLE {ROWS} (run_id VARCHAR(64) NOT NULL REFERENCES {RUNS} (run_id), seq INTEGER NOT NULL, "
    "op VARCHAR(64), variant VARCHAR(128), phase VARCHAR(64), dtype VARCHAR(16), mode VARCHAR(16), size_bytes BIGINT, "
    "grp VARCHAR(16), world_size INTEGER, status VARCHAR(16), time_us_p50 DOUBLE PRECISION, data TEXT NOT NULL, "
    "PRIMARY KEY (run_id, seq))",
)
# Version 2: the p50's interval as columns (the trend chart draws it), the hosts as a table (the
# host filter), and indexes for the questions the history answers.
_V2 = (
    f"ALTER TABLE {ROWS} ADD COLUMN time_us_p50_lo DOUBLE PRECISION",
    f"ALTER TABLE {ROWS} ADD COLUMN time_us_p50_hi DOUBLE PRECISION",
    f"CREATE TABLE {HOSTS} (run_id VARCHAR(64) NOT NULL REFERENCES {RUNS} (run_id), host VARCHAR(255) NOT NULL, "
    "PRIMARY KEY (run_id, host))",
    f"CREATE INDEX history_runs_by_fingerprint ON {RUNS} (fingerprint, started_at)",
    f"CREATE INDEX history_rows_by_key ON {ROWS} (op, variant, phase, size_bytes)",
)


def _backfill_v2(conn: Any) -> None:
    """Version 1's rows get their interval from their data; its runs, their hosts."""
    from sqlalchemy import text

    for run_id, seq, data in conn.execute(text(f"SELECT run_id, seq, data FROM {ROWS}")).all():
        cells = json.loads(data)
        conn.execute(
            text(f"UPDATE {ROWS} SET time_us_p50_lo = :lo, time_us_p50_hi = :hi WHERE run_id = :r AND seq = :s"),
            {
                "lo": number(cells.get("time_us_p50_lo")),
                "hi": number(cells.get("time_us_p50_hi")),
                "r": run_id,
                "s": seq,
            },
        )
    for run_id, hosts in conn.execute(text(f"SELECT run_id, hosts FROM {RUNS}")).all():
        for host in sorted({h for h in (hosts or "").split(";") if h}):
            conn.execute(text(f"INSERT INTO {HOSTS} (run_id, host) VALUES (:r, :h)"), {"r": run_id, "h": host})


MIGRATIONS: tuple[tuple[int, tuple[str, ...], Callable[[Any], None] | None], ...] = (
    (1, _V1, None),
    (2, _V2, _backfill_v2),
)


def number(cell: Any) -> float | None:
    """A CSV cell as a float; None when empty or not a number."""
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def _migrate(history: History, upto: int = HISTORY_SCHEMA) -> None:
    """Bring the history to version `upto`, one migration at a time, in one write transaction."""
    from sqlalchemy import inspect, text

    with history.begin() as conn:
        if history.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        version = stored_version(conn, inspect(conn).get_table_names(), history)
        if version > HISTORY_SCHEMA:
            from commbench import __version__

            raise UserError(
                f"the history {history.label} was written by a newer commbench (history schema {version}; "
                f"commbench {__version__} reads up to {HISTORY_SCHEMA}): upgrade commbench, or give --history another"
            )
        for target, statements, backfill in MIGRATIONS:
            if version < target <= upto:
                for statement in statements:
                    conn.execute(text(statement))
                if backfill is not None:
                    backfill(conn)
                set_version(conn, target, first=target == 1)
                version = target


def stored_version(conn: Any, tables: list[str], history: History) -> int:
    """The history's schema version; 0 for a database without one. A SQLite file with tables but
    not ours is someone else's database and is refused; a PostgreSQL database may hold other
    tables beside ours."""
    from sqlalchemy import text

    if META not in tables:
        if tables and history.dialect == "sqlite":
            raise UserError(f"{history.label} is a SQLite database but not a commbench history; give --history another")
        return 0
    value = conn.execute(text(f"SELECT value FROM {META} WHERE key = 'schema_version'")).scalar()
    return int(value)


def set_version(conn: Any, version: int, first: bool = False) -> None:
    from sqlalchemy import text

    if first:
        conn.execute(text(f"INSERT INTO {META} (key, value) VALUES ('schema_version', :v)"), {"v": str(version)})
    else:
        conn.execute(text(f"UPDATE {META} SET value = :v WHERE key = 'schema_version'"), {"v": str(version)})
