"""`commbench history`: the runs a history holds, one run in full, a trend across runs, and importing
CSVs written before the history existed (docs/history.md)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import click

from commbench.cli.options import chart_format_option, history_location_option, overwrite_option
from commbench.redact import redact

history_location = history_location_option("The history")


def _positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        from commbench.errors import UserError

        raise UserError(f"--{param.name} must be at least 1 (got {value})")
    return value


last_option = click.option("--last", type=int, default=None, callback=_positive, help="Only the newest N runs.")


@click.group()
def history() -> None:
    """The results history: every sweep and syncbn run files itself in one (results/history.sqlite
    in the current folder unless --history or --no-history says otherwise), and every command reads
    the same one."""


@history.command("list")
@history_location
@click.option("--op", default=None, help="Only runs that measured this op.")
@click.option("--fingerprint", default=None, help="Only runs of this fingerprint (a prefix is enough).")
@click.option("--host", default=None, help="Only runs that ran on this host.")
@click.option("--since", default=None, help="Only runs started on or after this date (UTC), e.g. 2026-12-01.")
@click.option("--until", default=None, help="Only runs started on or before this date (UTC).")
@last_option
def list_runs(location: str, op, fingerprint, host, since, until, last) -> None:
    """List the runs, oldest first: id, start, duration, status, fingerprint, rows, the `--repeat`
    group a launch belongs to (GROUP/LAUNCH; compare pools a group as one candidate), hosts, command."""
    from commbench.history.query import list_runs as query
    from commbench.history.query import parse_when

    since = parse_when(since, "--since") if since else None
    until = parse_when(until, "--until", end_of_day=True) if until else None
    store = _open(location)
    try:
        runs = query(store, op, fingerprint, host, since, until, last)
    finally:
        store.close()
    _echo(f"# history {store.label}: {len(runs)} run{'s' if len(runs) != 1 else ''}")
    if not runs:
        return
    header = f"{'run':<12}  {'started (UTC)':<19}  {'took':>6}  {'status':<10}  {'fingerprint':<12}  {'kind':<10}  {'n':>4}  {'rows':>5}  {'group':<16}  {'hosts':<20}  command"
    _echo(header)
    for r in runs:
        _echo(
            f"{r['run_id']:<12}  {r['started_at'][:19].replace('T', ' '):<19}  {_took(r):>6}  {r['status']:<10}  "
            f"{(r['fingerprint'] or '?'):<12}  {r['kind'] or '':<10}  {r['world_size'] or 0:>4}  {r['rows']:>5}  "
            f"{_group(r):<16}  {_short(r['hosts'] or '', 20):<20}  {redact(r['command'] or '')}"
        )


def _echo(line: str, err: bool = False) -> None:
    """Every line the history commands print: what a history holds (host names, commands, paths)
    came from files and databases anyone could write, so no character of it may end a line or
    drive the terminal (commbench/console/lines.py's printable)."""
    from commbench.console.lines import printable

    click.echo(printable(line), err=err)


def _open(location: str | None, create: bool = False):
    """The history every command reads (commbench/history/store.py's history_location), opened."""
    from commbench.history.store import history_location, open_history

    return open_history(history_location(location) or "", create=create)


def _took(run: dict[str, Any]) -> str:
    try:  # a history written by anyone may hold any text, or one time with a zone and one without
        seconds = (
            datetime.datetime.fromisoformat(run["ended_at"]) - datetime.datetime.fromisoformat(run["started_at"])
        ).total_seconds()
    except (TypeError, ValueError):
        return "-"
    return f"{seconds:.0f}s" if seconds < 600 else f"{seconds / 60:.0f}m"


def _group(run: dict[str, Any]) -> str:
    """`sweep --repeat K`'s group id and the launch's number in it ("3f2a9c01b2e4/2"), "-" outside one."""
    if not run.get("launch_group"):
        return "-"
    return f"{run['launch_group']}/{run['launch']}" if run.get("launch") not in (None, "") else run["launch_group"]


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@history.command("show")
@click.argument("run")
@history_location
def show(run: str, location: str) -> None:
    """One run: its facts, every host's environment and how they differ, and its rows."""
    from commbench.history.query import find_run, run_rows
    from commbench.provenance import format_record
    from commbench.units import format_size

    store = _open(location)
    try:
        found = find_run(store, run)
        rows = run_rows(store, [found["run_id"]])
    finally:
        store.close()
    for key in ("run_id", "kind", "status", "started_at", "ended_at", "fingerprint", "backend", "world_size", "hosts"):
        _echo(f"{key:<20} {found[key] if found[key] is not None else '-'}")
    _echo(f"{'command':<20} {redact(found['command'] or '')}")
    _echo(f"{'csv':<20} {found['source']}")
    provenance = found["provenance"]
    if provenance.get("from_csv"):
        _echo("# environment: only what the CSV says (imported without its .env.json)")
    for record in provenance.get("hosts", []):
        _echo(f"# host {record.get('host')}")
        for line in format_record(record):
            _echo(f"  {line}")
    for line in provenance.get("differences", []):
        _echo(f"# the hosts differ: {line}")
    _echo(f"# {len(rows)} rows")
    _echo(f"  {'op/variant/phase':<40} {'dtype':<8} {'size':>7} {'p50 us':>10} {'95% interval':>21}  status")
    for r in rows.itertuples():
        size = "" if r.size_bytes != r.size_bytes else format_size(int(r.size_bytes))
        p50 = "" if r.time_us_p50 != r.time_us_p50 else f"{r.time_us_p50:.4g}"
        interval = "" if r.time_us_p50_lo != r.time_us_p50_lo else f"[{r.time_us_p50_lo:.4g}, {r.time_us_p50_hi:.4g}]"
        _echo(f"  {f'{r.op}/{r.variant}/{r.phase}':<40} {r.dtype:<8} {size:>7} {p50:>10} {interval:>21}  {r.status}")
    for line in _resolution_lines(location, found, rows):
        _echo(line)


def _resolution_lines(location: str | None, found: dict[str, Any], rows: Any) -> list[str]:
    """What `compare` of a run like this one could see against the runs of its fingerprint before
    it: each series' run-to-run spread and the change one launch resolves (and two, and four)."""
    from commbench.analysis.compare import keyed
    from commbench.analysis.comparison_text import describe
    from commbench.analysis.history_gate import DEFAULT_LAST, series_plans
    from commbench.analysis.resolution import format_ratio, resolution
    from commbench.analysis.verdict import DEFAULT_CRITERIA
    from commbench.errors import UserError

    measured = rows[rows["status"] == "ok"]
    if measured.empty or not found["fingerprint"]:
        return []
    store = _open(location)
    try:
        plans = series_plans(
            store,
            found["fingerprint"],
            list(keyed(measured, found["run_id"]).index),
            DEFAULT_LAST,
            DEFAULT_CRITERIA,
            found["started_at"],
            found["run_id"],
        )
    except UserError as exc:
        return [f"# resolution: none yet ({exc.format_message()})"]
    finally:
        store.close()
    n = plans[0].noise.history_runs
    lines = [f"# resolution per series against the {n} runs of its fingerprint before it (compare --last {n}):"]
    for p in plans:
        resolved = ", ".join(f"{k} {format_ratio(resolution(p.noise, p.alpha, p.tests, k))}" for k in (1, 2, 4))
        lines.append(f"  {describe(p.key):<58} run-to-run sd {p.noise.spread:.1%}; resolves with launches {resolved}")
    return lines


# Every column that can split a trend's series (SERIES_KEY) has an option that narrows it.
TREND_FILTERS = {
    "variant": "--variant",
    "phase": "--phase",
    "dtype": "--dtype",
    "mode": "--mode",
    "world_size": "--world-size",
    "group": "--group",
}


@history.command("trend")
@click.option("--op", required=True, help="The op to chart.")
@click.option("--variant", default=None, help="Its variant (needed when the op has several).")
@click.option("--phase", default=None, help="Its phase (sync_bn: forward, backward, forward_backward).")
@click.option("--dtype", default=None, help="Element type, where runs measured several.")
@click.option("--mode", default=None, help="blocking or nonblocking, where runs measured both.")
@click.option("--world-size", type=int, default=None, help="Ranks, where runs ran on several counts.")
@click.option("--group", default=None, help="world, intra or inter, where runs measured several (sweep --group).")
@click.option("--size", default=None, help="One size S (units K, M, G); default: the whole series as one index.")
@click.option("--fingerprint", default=None, help="Only runs of this fingerprint (a prefix is enough).")
@last_option
@click.option(
    "--output",
    "-o",
    default=None,
    help="Chart file, or a folder for the default name (default: trend-<op>-<variant>.<format> beside a SQLite "
    "history, in results/ for a postgresql:// one).",
)
@chart_format_option
@overwrite_option
@history_location
def trend(
    op, variant, phase, dtype, mode, world_size, group, size, fingerprint, last, output, fmt, overwrite, location
) -> None:
    """Chart the p50 (with its interval) of one size, or of a whole series, across the runs,
    coloured by fingerprint, with each fingerprint change marked. An existing file is replaced
    only with --overwrite."""
    from commbench.analysis.charts.render import render
    from commbench.analysis.trend import one_series, trend_chart
    from commbench.errors import UserError
    from commbench.history.query import list_runs as query
    from commbench.history.query import run_rows
    from commbench.history.store import history_folder, history_location
    from commbench.results.paths import check_target, output_path, write_atomically
    from commbench.units import parse_size

    chosen = parse_size(size) if size is not None else None
    location = history_location(location) or ""
    store = _open(location)
    try:
        runs = query(store, op=op, fingerprint=fingerprint, last=last)
        rows = run_rows(store, [r["run_id"] for r in runs])
    finally:
        store.close()
    given = {"op": op, "variant": variant, "phase": phase, "dtype": dtype, "mode": mode, "group": group}
    for column, value in given.items():
        if value is not None and column in rows.columns:
            rows = rows[rows[column] == value]
    if world_size is not None:
        rows = rows[rows["world_size"] == world_size]
    series = one_series(rows, " ".join(f"{k} {v}" for k, v in (("op", op), ("variant", variant)) if v), TREND_FILTERS)
    first = series.iloc[0]
    stem = f"trend-{op}-{first['variant']}" + (f"-{chosen}" if chosen is not None else "")
    out = output_path(output, lambda where: (where or history_folder(location)) / f"{stem}.{fmt}")
    if out.suffix.lower() != f".{fmt}":
        raise UserError(f"--output {out}: a {fmt} chart's file name ends in .{fmt} (--format svg for .svg)")
    check_target(out, overwrite)
    chart = trend_chart(series, chosen, out.stem)
    write_atomically(out, render(chart, fmt))
    _echo(f"# {chart.caption}")
    _echo(str(out))


@history.command("import")
@click.argument("csvs", nargs=-1, required=True, type=click.Path(path_type=Path))
@history_location
def import_(csvs: tuple[Path, ...], location: str) -> None:
    """File result CSVs (schema versions 1 and 2) as runs, with their .env.json where it lies beside
    them, and nccl-tests' -J results.json files (docs/history.md). Runs already there are left as
    they are, so importing twice changes nothing. Per-iteration samples files (.raw.csv, which
    `sweep --raw` writes beside a CSV) are skipped with a note."""
    from commbench.history.importer import import_csvs, summary
    from commbench.history.store import history_location, is_url
    from commbench.results.paths import check_target

    location = history_location(location) or ""
    csvs = _without_raw(csvs)
    if not is_url(location):
        check_target(Path(location), True, inputs=csvs, flag="--history")
    store = _open(location, create=True)
    try:
        _echo(summary(import_csvs(store, list(csvs)), store.label))
    finally:
        store.close()


def _without_raw(csvs: tuple[Path, ...]) -> tuple[Path, ...]:
    """The CSVs less the per-iteration samples files among them (a glob such as results/*.csv
    takes them in), one note for those skipped; refused when nothing is left."""
    from commbench.errors import UserError

    raw = [p for p in csvs if p.name.endswith(".raw.csv")]
    if raw:
        _echo(
            f"# skipped {len(raw)} per-iteration samples file{'s' if len(raw) != 1 else ''} ({raw[0]}"
            f"{', ...' if len(raw) > 1 else ''}): a history holds results rows, from the CSV each belongs to",
            err=True,
        )
    kept = tuple(p for p in csvs if p not in raw)
    if not kept:
        raise UserError("every file given is a .raw.csv samples file; give the results CSVs they belong to")
    return kept
