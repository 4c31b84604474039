"""`commbench history`: the runs a history holds, one run in full, a trend across runs, and importing
CSVs written before the history existed (docs/history.md)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import click

from commbench.cli.options import chart_format_option
from commbench.redact import redact

DEFAULT_HISTORY = "results/history.sqlite"

history_location = click.option(
    "--history",
    "location",
    default=DEFAULT_HISTORY,
    show_default=True,
    envvar="COMMBENCH_HISTORY",
    help="The history: a SQLite file or a postgresql:// URL ($COMMBENCH_HISTORY where set).",
)


def _positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        from commbench.errors import UserError

        raise UserError(f"--{param.name} must be at least 1 (got {value})")
    return value


last_option = click.option("--last", type=int, default=None, callback=_positive, help="Only the newest N runs.")


@click.group()
def history() -> None:
    """The results history: every sweep and syncbn run files itself in one (history.sqlite beside
    its CSV unless --history or --no-history says otherwise)."""


@history.command("list")
@history_location
@click.option("--op", default=None, help="Only runs that measured this op.")
@click.option("--fingerprint", default=None, help="Only runs of this fingerprint (a prefix is enough).")
@click.option("--host", default=None, help="Only runs that ran on this host.")
@click.option("--since", default=None, help="Only runs started on or after this date (UTC), e.g. 2026-12-01.")
@click.option("--until", default=None, help="Only runs started on or before this date (UTC).")
@last_option
def list_runs(location: str, op, fingerprint, host, since, until, last) -> None:
    """List the runs, oldest first: id, start, duration, status, fingerprint, hosts, rows, command."""
    from commbench.history.query import list_runs as query
    from commbench.history.query import parse_when
    from commbench.history.store import open_history

    since = parse_when(since, "--since") if since else None
    until = parse_when(until, "--until", end_of_day=True) if until else None
    store = open_history(location, create=False)
    try:
        runs = query(store, op, fingerprint, host, since, until, last)
    finally:
        store.close()
    click.echo(f"# history {store.label}: {len(runs)} run{'s' if len(runs) != 1 else ''}")
    if not runs:
        return
    header = f"{'run':<12}  {'started (UTC)':<19}  {'took':>6}  {'status':<10}  {'fingerprint':<12}  {'kind':<6}  {'n':>4}  {'rows':>5}  {'hosts':<20}  command"
    click.echo(header)
    for r in runs:
        click.echo(
            f"{r['run_id']:<12}  {r['started_at'][:19].replace('T', ' '):<19}  {_took(r):>6}  {r['status']:<10}  "
            f"{(r['fingerprint'] or '?'):<12}  {r['kind'] or '':<6}  {r['world_size'] or 0:>4}  {r['rows']:>5}  "
            f"{_short(r['hosts'] or '', 20):<20}  {redact(r['command'] or '')}"
        )


def _took(run: dict[str, Any]) -> str:
    if not run["ended_at"] or not run["started_at"]:
        return "-"
    seconds = (
        datetime.datetime.fromisoformat(run["ended_at"]) - datetime.datetime.fromisoformat(run["started_at"])
    ).total_seconds()
    return f"{seconds:.0f}s" if seconds < 600 else f"{seconds / 60:.0f}m"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@history.command("show")
@click.argument("run")
@history_location
def show(run: str, location: str) -> None:
    """One run: its facts, every host's environment and how they differ, and its rows."""
    from commbench.history.query import find_run, run_rows
    from commbench.history.store import open_history
    from commbench.provenance import format_record
    from commbench.units import format_size

    store = open_history(location, create=False)
    try:
        found = find_run(store, run)
        rows = run_rows(store, [found["run_id"]])
    finally:
        store.close()
    for key in ("run_id", "kind", "status", "started_at", "ended_at", "fingerprint", "backend", "world_size", "hosts"):
        click.echo(f"{key:<20} {found[key] if found[key] is not None else '-'}")
    click.echo(f"{'command':<20} {redact(found['command'] or '')}")
    click.echo(f"{'csv':<20} {found['source']}")
    provenance = found["provenance"]
    if provenance.get("from_csv"):
        click.echo("# environment: only what the CSV says (imported without its .env.json)")
    for record in provenance.get("hosts", []):
        click.echo(f"# host {record.get('host')}")
        for line in format_record(record):
            click.echo(f"  {line}")
    for line in provenance.get("differences", []):
        click.echo(f"# the hosts differ: {line}")
    click.echo(f"# {len(rows)} rows")
    click.echo(f"  {'op/variant/phase':<40} {'dtype':<8} {'size':>7} {'p50 us':>10} {'95% interval':>21}  status")
    for r in rows.itertuples():
        size = "" if r.size_bytes != r.size_bytes else format_size(int(r.size_bytes))
        p50 = "" if r.time_us_p50 != r.time_us_p50 else f"{r.time_us_p50:.4g}"
        interval = "" if r.time_us_p50_lo != r.time_us_p50_lo else f"[{r.time_us_p50_lo:.4g}, {r.time_us_p50_hi:.4g}]"
        click.echo(
            f"  {f'{r.op}/{r.variant}/{r.phase}':<40} {r.dtype:<8} {size:>7} {p50:>10} {interval:>21}  {r.status}"
        )


@history.command("trend")
@click.option("--op", required=True, help="The op to chart.")
@click.option("--variant", default=None, help="Its variant (needed when the op has several).")
@click.option("--phase", default=None, help="Its phase (sync_bn: forward, backward, forward_backward).")
@click.option("--dtype", default=None, help="Element type, where runs measured several.")
@click.option("--mode", default=None, help="blocking or nonblocking, where runs measured both.")
@click.option("--world-size", type=int, default=None, help="Ranks, where runs ran on several counts.")
@click.option("--size", default=None, help="One size S (units K, M, G); default: the whole series as one index.")
@click.option("--fingerprint", default=None, help="Only runs of this fingerprint (a prefix is enough).")
@last_option
@click.option("--output", "-o", default=None, help="Chart file (default: <history folder>/trend-<op>-<variant>.png).")
@chart_format_option
@history_location
def trend(op, variant, phase, dtype, mode, world_size, size, fingerprint, last, output, fmt, location) -> None:
    """Chart the p50 (with its interval) of one size, or of a whole series, across the runs,
    coloured by fingerprint, with each fingerprint change marked."""
    from commbench.analysis.charts.render import write_charts
    from commbench.analysis.trend import one_series, trend_chart
    from commbench.history.query import list_runs as query
    from commbench.history.query import run_rows
    from commbench.history.store import is_url, open_history
    from commbench.results.paths import output_path
    from commbench.units import parse_size

    chosen = parse_size(size) if size is not None else None
    store = open_history(location, create=False)
    try:
        runs = query(store, op=op, fingerprint=fingerprint, last=last)
        rows = run_rows(store, [r["run_id"] for r in runs])
    finally:
        store.close()
    for column, value in (("op", op), ("variant", variant), ("phase", phase), ("dtype", dtype), ("mode", mode)):
        if value is not None:
            rows = rows[rows[column] == value]
    if world_size is not None:
        rows = rows[rows["world_size"] == world_size]
    series = one_series(rows, " ".join(f"{k} {v}" for k, v in (("op", op), ("variant", variant)) if v))
    first = series.iloc[0]
    stem = f"trend-{op}-{first['variant']}" + (f"-{chosen}" if chosen is not None else "")
    folder = Path("results") if is_url(location) else Path(location).parent
    out = output_path(output, lambda where: (where or folder) / f"{stem}.{fmt}")
    chart = trend_chart(series, chosen, out.stem)
    path = write_charts([chart], out.parent, fmt)[0]
    if path != out:
        path.replace(out)
    click.echo(f"# {chart.caption}")
    click.echo(str(out))


@history.command("import")
@click.argument("csvs", nargs=-1, required=True, type=click.Path(path_type=Path))
@history_location
def import_(csvs: tuple[Path, ...], location: str) -> None:
    """File result CSVs (schema versions 1 and 2) as runs, with their .env.json where it lies beside
    them. Runs already there are left as they are, so importing twice changes nothing."""
    from commbench.history.importer import import_csvs, summary
    from commbench.history.store import open_history

    store = open_history(location)
    try:
        click.echo(summary(import_csvs(store, list(csvs)), store.label))
    finally:
        store.close()
