"""Issue 44, "Files destroyed": replay's outputs written over each other, over its inputs, through
symlinks, by two runs at once, and a leftover side file found only once the ranks run. The right
behaviour: every target planned and refused before any rank starts (nothing written), or, for a
link, a new file in the link's place (the issue lets the fix choose); never a byte of a victim."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.support.hostile_inputs.case import EITHER, FILES, REFUSED, Case, Check, case, replay
from tests.support.hostile_inputs.checks import (
    HISTORY,
    history_opens,
    not_the_json,
    nothing_new,
    one_json_winner,
    unchanged,
)
from tests.support.hostile_inputs.fixtures import out, small_trace
from tests.support.synth_results import Case as SynthCase
from tests.support.synth_results import synth_run

Maker = Callable[[Path, int], object]
README = "# a tracked README\n\nThe file a careless link points at.\n"


def trace_and_out(folder: Path, _size: int = 0) -> None:
    """t.json (a small 2-rank trace) and an empty out/."""
    small_trace(folder / "t.json")
    out(folder)


def victim_and_link(folder: Path, _size: int = 0) -> None:
    """trace_and_out, README.md, docs/README.md, and in fx/ links to both (the tracked files a link names)."""
    trace_and_out(folder)
    (folder / "README.md").write_text(README)
    (folder / "docs").mkdir()
    (folder / "docs" / "README.md").write_text(README)
    (folder / "fx").mkdir()
    (folder / "fx" / "readme_link.csv").symlink_to("../README.md")
    (folder / "fx" / "docs_link.json").symlink_to("../docs/README.md")


def model_csv(folder: Path, _size: int = 0) -> None:
    """trace_and_out and m.csv, a Gloo sweep of all_reduce and broadcast at 4 sizes (what --model fits)."""
    trace_and_out(folder)
    synth_run(folder / "m.csv", [SynthCase("all_reduce", "flat"), SynthCase("broadcast", "flat")], seed=1, raw=False)


def leftover_replay_csv(folder: Path, _size: int = 0) -> None:
    """trace_and_out and out/a.replay.csv, a side file an earlier run left (its a.csv since removed)."""
    trace_and_out(folder)
    (folder / "out" / "a.replay.csv").write_text("kind,op\ncall,allreduce\n")


def trace_in(folder: Path, _size: int = 0) -> None:
    """in.json (a small 2-rank trace) and an empty out/."""
    small_trace(folder / "in.json")
    out(folder)


def _destroyed(
    id: str, what: str, make: Maker, argv: tuple[str, ...], *checks: Check, exits: frozenset[int] = REFUSED
) -> Case:
    """A case of `replay ARGV` (it starts ranks today): what and where it destroys, the checks that see it."""
    return case(id, FILES, what, make, replay(*argv), exits=exits, checks=checks, ranks=True)


def _json_over(id: str, side: str, *more: str) -> Case:
    """--json names `side`, one of the outputs of the run itself (none exists yet)."""
    argv = ("t.json", "-o", "out/a.csv", "--json", side, *more)
    what = f"`replay {' '.join(argv[1:])}`: the JSON is written over the run's own {side}"
    return _destroyed(id, what, trace_and_out, argv, not_the_json(side), nothing_new("out"))


HISTORY_JSON = ("t.json", "-o", "out/a.csv", "--json", HISTORY)

CASES = [
    _json_over("json-is-results", "out/a.csv"),
    _json_over("json-is-env", "out/a.env.json"),
    _json_over("json-is-chart", "out/a-replay.png", "--plot"),
    _json_over("json-is-raw", "out/a.raw.csv", "--raw"),
    _json_over("json-is-replay-csv", "out/a.replay.csv"),
    _destroyed(
        "json-is-history",
        f"`replay --json {HISTORY}` (the run's own history, new): it becomes JSON, every command refuses it",
        trace_and_out,
        HISTORY_JSON,
        not_the_json(HISTORY),
        history_opens(),
        nothing_new("out"),
    ),
    _destroyed(
        "overwrite-trace",
        "`replay in.json --overwrite -o in.json`: the trace read is replaced by the results CSV",
        trace_in,
        ("in.json", "--overwrite", "-o", "in.json"),
        unchanged("in.json"),
        nothing_new(),
    ),
    _destroyed(
        "overwrite-trace-json",
        "`replay in.json --overwrite --json in.json`: the trace read is replaced by the JSON",
        trace_in,
        ("in.json", "--overwrite", "-o", "out/a.csv", "--json", "in.json"),
        unchanged("in.json"),
        nothing_new("out"),
    ),
    _destroyed(
        "overwrite-model",
        "`replay --project 4 --model m.csv --overwrite -o m.csv`: the model CSV read is replaced",
        model_csv,
        ("t.json", "--project", "4", "--model", "m.csv", "--overwrite", "-o", "m.csv"),
        unchanged("m.csv"),
        nothing_new(),
    ),
    _destroyed(
        "symlink-output",
        "`-o fx/readme_link.csv --overwrite`, a link to README.md: README.md becomes CSV, README.env.json lands beside it",
        victim_and_link,
        ("t.json", "-o", "fx/readme_link.csv", "--overwrite"),
        unchanged("README.md"),
        nothing_new(),
        exits=EITHER,
    ),
    _destroyed(
        "symlink-json",
        "`--json fx/docs_link.json --overwrite`, a link to docs/README.md: docs/README.md is replaced by the JSON",
        victim_and_link,
        ("t.json", "-o", "out/a.csv", "--json", "fx/docs_link.json", "--overwrite"),
        unchanged("docs/README.md"),
        nothing_new("docs"),
        exits=EITHER,
    ),
    case(
        "two-writers-json",
        FILES,
        "two replays at once with one --json (-o out/a.csv, -o out/b.csv): both exit 0, the first one's JSON is lost",
        trace_and_out,
        replay("t.json", "-o", "out/a.csv", "--json", "out/r.json"),
        replay("t.json", "-o", "out/b.csv", "--json", "out/r.json"),
        exits=EITHER,
        checks=(one_json_winner("out/r.json", ("out/a.csv", "out/b.csv")),),
        ranks=True,
    ),
    _destroyed(
        "leftover-replay-csv",
        "`-o out/a.csv` beside a leftover out/a.replay.csv: refused only once the ranks run; a.csv, a.env.json left behind",
        leftover_replay_csv,
        ("t.json", "-o", "out/a.csv"),
        unchanged("out/a.replay.csv"),
        nothing_new("out"),
    ),
]
