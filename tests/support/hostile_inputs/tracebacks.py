"""Issue 44, "Tracebacks": traces (and one option) that end in exit 4 and a traceback. Right: one
line saying what is wrong with the input, exit 2, before any rank starts. The nccl-tests importer's
cases are in importer.py."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.hostile_inputs.case import SWEEP, TRACEBACKS, Case, Interrupt, case, commbench, replay
from tests.support.hostile_inputs.fixtures import (
    edited_json,
    fr_document,
    fr_pickle,
    one_collective,
    out,
    replaced,
    small_trace,
)

Maker = Callable[[Path, int], object]
DEPTH = 100_000  # brackets deep: past any recursion limit


def only(name: str, elems: Any = 1024, **args: Any) -> Maker:
    """A trace whose one collective is name (of elems elements, args overriding its fields)."""
    return lambda folder, _size: one_collective(folder / "t.json", name, elems, **args)


def fields(**args: Any) -> Maker:
    """small_trace with both collectives' record_param_comms fields overridden."""
    return lambda folder, _size: small_trace(folder / "t.json", **args)


def event(**values: Any) -> Maker:
    """small_trace with its first collective's event fields (ts, dur, args) replaced."""
    return lambda folder, _size: edited_json(
        small_trace(folder / "t.json"), lambda d: d["traceEvents"][1].update(values)
    )


def text(old: Any, new: str) -> Maker:
    """A trace whose one all_reduce has old elements, old then replaced by new in the JSON text."""
    return lambda folder, _size: replaced(one_collective(folder / "t.json", "allreduce", old), str(old), new)


def dump(**values: Any) -> Maker:
    """A Flight Recorder pickle with top-level fields replaced (named t.json: replay tells the format from the content)."""
    return lambda folder, _size: fr_pickle(folder / "t.json", fr_document(**values))


def _stopped(signum: signal.Signals) -> Case:
    """`sweep --repeat 3`, signum sent as the second launch starts its ranks: 128 + signum, no traceback."""
    return case(
        f"repeat-{signum.name.lower()}",
        TRACEBACKS,
        f"{signum.name} as `sweep --repeat`'s next launch starts its ranks: KeyboardInterrupt, init_import_site tracebacks",
        out,
        commbench(*SWEEP, "--repeat", "3"),
        exits=frozenset({128 + signum}),
        interrupt=Interrupt(signum, on_output="# starting 2 local", times=2),
        ranks=True,
    )


def _case(id: str, what: str, make: Maker, *argv: str, ranks: bool = False) -> Case:
    return case(id, TRACEBACKS, what, make, replay("t.json", *argv), ranks=ranks)


CASES = [
    _case("unmapped-names", "every collective of an unknown name: max(1, *()) gives a TypeError", only("frobnicate")),
    _case("unmapped-nelems-text", '"In msg nelems": "lots" on every collective', only("allreduce", "lots")),
    _case("unmapped-nelems-zero", '"In msg nelems": 0 on every collective', only("allreduce", 0)),
    _case("unmapped-send-outside", "a send to rank 5 of a 2-rank group", only("send", **{"Dst Rank": 5})),
    _case(
        "unmapped-splits",
        "an all_to_allv split [1000, 24] in one rank's trace (the others' splits unknown)",
        only("all_to_allv", **{"In split size": "[1000, 24]", "Out split size": "[1000, 24]"}),
    ),
    _case("field-ts-text", 'a collective\'s "ts": "soon" (a wrong field type)', event(ts="soon")),
    _case("field-args-list", 'a collective\'s "args": [1, 2] (a wrong field type)', event(args=[1, 2])),
    _case("nelems-1e400", '"In msg nelems": 1e400 (infinity as JSON reads it)', text(987654321, "1e400")),
    _case("nelems-10e400", '"In msg nelems": 10^400', only("allreduce", 10**400)),
    _case("dur-text", 'a collective\'s "dur": "fast"', event(dur="fast")),
    _case(
        "group-ranks-negative",
        '"Process Group Ranks": "[-1, 0]": torch\'s ValueError in both ranks',
        fields(**{"Process Group Ranks": "[-1, 0]"}),
        ranks=True,
    ),
    _case(
        "group-ranks-duplicate",
        '"Process Group Ranks": "[0, 0]": torch\'s ValueError in both ranks',
        fields(**{"Process Group Ranks": "[0, 0]"}),
        ranks=True,
    ),
    _case(
        "deep-nesting",
        f"an argument nested {DEPTH:,} lists deep: RecursionError",
        lambda folder, _size: replaced(
            one_collective(folder / "t.json", "allreduce", Extra="@@DEEP@@"), '"@@DEEP@@"', "[" * DEPTH + "]" * DEPTH
        ),
    ),
    _case("fr-entries-number", "a Flight Recorder dump with entries: 5", dump(entries=5)),
    _case("fr-pg-config-list", "a Flight Recorder dump whose pg_config is a list", dump(pg_config=[{"name": "0"}])),
    _case("nproc-0-scale", "`--nproc 0 --scale`: ZeroDivisionError", fields(), "--nproc", "0", "--scale"),
    *(_stopped(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)),
]
