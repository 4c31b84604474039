"""A password typed into a postgresql:// URL or a libpq connection string reaches no output: a real
sweep filing itself in a real PostgreSQL server (tests/history/conftest.py), then its CSV, its
environment file, the database's own tables, `history list`/`show` and the HTML report, searched
for the password; a connection string is a database, never a file's name."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.cli import main
from tests.support.distributed import commbench
from tests.support.errors import assert_one_line_error
from tests.support.nccl_tests_json import nccl_tests_file

# A raw '@' in the password (its tail once passed for the host) and a secret query parameter.
PASSWORD, PARAMETER = "Se@cret9", "T0PSECRET"
LEAKS = ("Se@cret9", "cret9", "T0PSECRET")
SWEEP = ("sweep", "--op", "all_gather", "--variant", "flat", "--sizes", "1K", "-n", "3", "--no-plot")


def _with_password(url: str) -> str:
    user, rest = url.split("://", 1)[1].split("@", 1)
    return f"postgresql://{user}:{PASSWORD}@{rest}?sslpassword={PARAMETER}"


def _leaks(text: str) -> list[str]:
    return [secret for secret in LEAKS if secret in text]


@pytest.mark.slow
def test_a_password_in_the_history_url_is_in_no_csv_history_listing_or_report(postgres, tmp_path):
    import psycopg

    url = postgres.create_database()
    history = _with_password(url)  # the server trusts loopback: the password is accepted and unused
    out = tmp_path / "x" / "run.csv"
    sweep = commbench(*SWEEP, "--history", history, "-o", str(out))
    assert sweep.returncode == 0, sweep.stderr
    assert "***" in out.read_text() and not _leaks(out.read_text() + sweep.stdout + sweep.stderr)
    assert not _leaks(out.with_suffix(".env.json").read_text())
    listing = commbench("history", "list", "--history", history)
    assert listing.returncode == 0 and "1 run" in listing.stdout, listing.stderr
    run_id = listing.stdout.splitlines()[2].split()[0]
    shown = commbench("history", "show", run_id, "--history", history)
    assert shown.returncode == 0 and "postgresql://commbench:***@127.0.0.1" in shown.stdout, shown.stderr
    assert not _leaks(listing.stdout + shown.stdout)
    with psycopg.connect(url) as conn:  # what anyone reading the shared database sees
        stored = repr(conn.execute("SELECT * FROM history_runs").fetchall())
        stored += repr(conn.execute("SELECT * FROM history_rows").fetchall())
    assert not _leaks(stored)
    report = commbench("report", str(out), "-o", str(tmp_path / "report.html"))
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report.html").read_text()
    assert "postgresql://commbench:***@" in html and not _leaks(html)


@pytest.mark.slow
def test_a_csv_written_before_redaction_is_filed_and_reported_without_its_password(postgres, tmp_path):
    """Files from an older commbench carry the password in their command column: importing them
    files it redacted, and a report of them shows it redacted."""
    out = tmp_path / "old.csv"
    sweep = commbench(*SWEEP, "--no-history", "-o", str(out))
    assert sweep.returncode == 0, sweep.stderr
    old = out.read_text().replace("--no-history", f"--history {_with_password('postgresql://cb@db.example/h')}")
    out.write_text(old)
    assert _leaks(out.read_text())
    url = postgres.create_database()
    imported = commbench("history", "import", str(out), "--history", url)
    assert imported.returncode == 0, imported.stderr
    listing = commbench("history", "list", "--history", url)
    assert "cb:***@db.example" in listing.stdout and not _leaks(listing.stdout)
    report = commbench("report", str(out), "-o", str(tmp_path / "report.html"))
    assert report.returncode == 0 and not _leaks((tmp_path / "report.html").read_text()), report.stderr


def _conninfo(url: str, password: str) -> str:
    """A database URL of the test server as libpq's key=value connection string, with a password."""
    user, rest = url.split("://", 1)[1].split("@", 1)
    hostport, db = rest.split("/", 1)
    host, port = hostport.split(":")
    return f"host={host} port={port} dbname={db} user={user} password='{password}'"


@pytest.mark.slow
def test_a_libpq_connection_string_is_a_postgresql_history_never_a_file(postgres, tmp_path, monkeypatch):
    """`host=... password=...` as --history or $COMMBENCH_HISTORY once became a SQLite file named
    after it, password included; it is the PostgreSQL database it names."""
    import psycopg

    monkeypatch.chdir(tmp_path)
    url = postgres.create_database()
    conninfo = _conninfo(url, "Se@cret9 T0PSECRET")  # a quoted password holding a space and an '@'
    path = nccl_tests_file(tmp_path / "nightly.json")
    imported = CliRunner().invoke(main, ["history", "import", str(path), "--history", conninfo])
    assert imported.exit_code == 0 and "# imported 1 run (8 rows)" in imported.output, imported.output
    label = url.replace("commbench@", "")  # postgresql://127.0.0.1:PORT/DB: host, port and database only
    assert imported.output.rstrip().endswith(f"into {label}")
    listing = CliRunner(env={"COMMBENCH_HISTORY": conninfo}).invoke(main, ["history", "list"])
    assert listing.exit_code == 0 and f"# history {label}: 1 run" in listing.output, listing.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nightly.json"]  # no file named after the string
    with psycopg.connect(url) as conn:
        stored = repr(conn.execute("SELECT * FROM history_runs").fetchall())
    assert not _leaks(imported.output + listing.output + stored)
    # postgres:// (Heroku's and others' spelling) names the same database.
    again = CliRunner().invoke(main, ["history", "list", "--history", url.replace("postgresql://", "postgres://")])
    assert again.exit_code == 0 and ": 1 run" in again.output, again.output


@pytest.mark.parametrize(
    ("history", "fragment"),
    [
        ("x password=Se@cret9", "holds a secret but is neither a postgresql:// URL nor a libpq connection string"),
        ("host=127.0.0.1 bogus=1 password=Se@cret9", "libpq cannot read"),
        ("host=127.0.0.1 password='Se@cret9", "libpq cannot read"),  # an unclosed quote
        ("host=127.0.0.1 port=9 dbname=h password=Se@cret9", "cannot use the history postgresql://127.0.0.1:9/h"),
    ],
)
def test_a_history_holding_a_password_is_refused_in_one_line_that_never_shows_it(
    tmp_path, monkeypatch, history, fragment
):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["history", "list", "--history", history])
    assert_one_line_error(result, fragment, exit_code=2)
    assert not _leaks(result.output) and list(tmp_path.iterdir()) == []
