"""Issue 44's nccl-tests importer cases (`history import r.json`, and report and model of such a file):
12 that end in a traceback ("Tracebacks") and the impossible values filed without a word ("Wrong,
silently"). Right, as docs/failure-modes.md says: a file nccl-tests could not have written refused
in one line (exit 2); an impossible value in one result (a size of 10^30, a time of 1e308, a
per-iteration block of another type) named in a warning and that result's rows left out, the rest
read; no forged `history list` line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.hostile_inputs.case import EITHER, READ, SILENT, TRACEBACKS, Case, Command, case, commbench
from tests.support.hostile_inputs.checks import listed_without, possible_rows, says
from tests.support.hostile_inputs.fixtures import nccl_tests_edited, replaced

Edit = Callable[[dict[str, Any]], object]
IMPORT = commbench("history", "import", "r.json")
FORGED = "FORGED"  # what a host name's newline puts at the start of a `history list` line of its own


def result(**values: Any) -> Edit:
    """Set fields of the first result (the 8-byte size)."""
    return lambda d: d["results"][0].update(values)


def placement(**values: Any) -> Edit:
    """Set fields of the first result's out_of_place block."""
    return lambda d: d["results"][0]["out_of_place"].update(values)


def per_iter(**values: Any) -> Edit:
    """Set fields of the first result's out_of_place per-iteration block."""
    return lambda d: d["results"][0]["out_of_place_per_iter"].update(values)


def config(**values: Any) -> Edit:
    return lambda d: d["config"].update(values)


def _document(edit: Edit, per_iter: bool = True) -> Callable[[Path, int], object]:
    return lambda folder, _size: nccl_tests_edited(folder / "r.json", edit, per_iter=per_iter)


def _deep(folder: Path, _size: int) -> None:
    nccl_tests_edited(folder / "r.json", lambda d: d.update(extra="@@DEEP@@"))
    replaced(folder / "r.json", '"@@DEEP@@"', "[" * 100_000 + "]" * 100_000)


def _refused(id: str, what: str, edit: Edit, command: Command = IMPORT) -> Case:
    return case(id, TRACEBACKS, what, _document(edit), command)


def _left_out(id: str, what: str, edit: Edit, group: str = SILENT, per_iter: bool = True) -> Case:
    """An impossible value in one result (a size, a time, a per-iteration block of another type):
    named in a warning, that result's rows not filed, the others are, as docs/failure-modes.md
    says. The issue lists some of these under its tracebacks (group)."""
    checks = (possible_rows(), says(_WARNED))
    return case(id, group, what, _document(edit, per_iter), IMPORT, exits=READ, checks=checks)


BAD_PER_ITER = result(out_of_place_per_iter="fast")  # the file report and model are given
_WARNED = r"warning: r\.json results\[0\].*left out"  # the result named, its rows left out


def _read_without(id: str, what: str, command: Command) -> Case:
    """`command` on a file with BAD_PER_ITER: that result named and left out, the rest read."""
    return case(id, TRACEBACKS, what, _document(BAD_PER_ITER), command, exits=READ, checks=(says(_WARNED),))


CASES = [
    _refused("nt-args-type", "nccl-tests `args` an object", lambda d: d.update(args={"program": "all_gather_perf"})),
    _refused("nt-config-type", "nccl-tests `config` a list", lambda d: d.update(config=["nthreads", 1])),
    _refused("nt-env-type", "nccl-tests `env` a number", lambda d: d.update(env=5)),
    _refused(
        "nt-nthreads-text", 'nccl-tests `nthreads: "abc"` (no devices listed)', config(devices=[], nthreads="abc")
    ),
    _refused(
        "nt-device-ranks-mixed",
        'nccl-tests device ranks 0, "1", 2, 3 (mixed types)',
        lambda d: d["config"]["devices"][1].update(rank="1"),
    ),
    _left_out("nt-size-10e30", "nccl-tests size 10^30: OverflowError from SQLite", result(size=10**30), TRACEBACKS),
    _left_out(
        "nt-per-iter-text",
        "nccl-tests `out_of_place_per_iter` a string",
        result(out_of_place_per_iter="fast"),
        TRACEBACKS,
    ),
    _left_out(
        "nt-per-iter-list",
        "nccl-tests `out_of_place_per_iter` a list",
        result(out_of_place_per_iter=[1.0, 2.0]),
        TRACEBACKS,
    ),
    _left_out(
        "nt-times-1e308", "nccl-tests `times_us` of 1e308s: fsum overflows", per_iter(times_us=[1e308] * 20), TRACEBACKS
    ),
    case("nt-deep-nesting", TRACEBACKS, "an nccl-tests file nested 100,000 lists deep", _deep, IMPORT),
    _read_without(
        "nt-report",
        "`report` of an nccl-tests file whose times_us is a string",
        commbench("report", "r.json", "-o", "r.html"),
    ),
    _read_without("nt-model", "`model` of an nccl-tests file whose times_us is a string", commbench("model", "r.json")),
    _left_out(
        "nt-time-negative",
        "nccl-tests time -5.0 (no per-iteration block), filed as it is",
        placement(time=-5.0),
        per_iter=False,
    ),
    _left_out(
        "nt-time-zero", "nccl-tests time 0 (no per-iteration block), filed as it is", placement(time=0), per_iter=False
    ),
    _left_out("nt-per-iter-negative", "nccl-tests per-iteration times all -3.0, filed", per_iter(times_us=[-3.0] * 20)),
    _left_out("nt-size-negative", "nccl-tests size -8, filed", result(size=-8)),
    _left_out("nt-size-text", 'nccl-tests size "eight", stored empty', result(size="eight")),
    _left_out("nt-size-fraction", "nccl-tests size 8.5, stored as 8", result(size=8.5)),
    case(
        "nt-hostname-newline",
        SILENT,
        "an nccl-tests host name holding a newline forges a line of its own in `history list`",
        _document(lambda d: d["config"]["devices"][0].update(hostname=f"\n{FORGED} 2026-01-01 00:00:00")),
        IMPORT,
        exits=EITHER,
        checks=(listed_without(FORGED),),
    ),
]
