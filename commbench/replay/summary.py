"""What a replay reports beside the results CSV: the replay CSV (one row per distinct call, the
step, and each collective that could not be mapped), the step line, the verdict line and the
unmapped list. Pure functions of the Plan and the rows, so they are tested on hand-built Plans."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from commbench.replay.adapter import s_elements as rule_s_elements
from commbench.replay.record import Call, Plan
from commbench.results.measurement import Measurement
from commbench.results.ownership import register_header
from commbench.results.paths import beside
from commbench.results.row_outputs import RowOutput
from commbench.results.stats import TYPICAL, TYPICAL_HI, TYPICAL_LO

# The columns of <stem>.replay.csv (docs/replay.md). kind: call, step or unmapped.
REPLAY_COLUMNS = (
    *"run_id kind op variant phase dtype in_elems out_elems group_ranks peer splits".split(),
    *"count_per_step recorded_us recorded_us_per_step".split(),
    *(TYPICAL, TYPICAL_LO, TYPICAL_HI),
    *"replayed_us_per_step status wrong note trace_digest".split(),
)
STEP_OP = "step"
STEP_VARIANT = "sequence"


# The files a replay writes beside its results CSV (results/paths.beside's suffixes).
REPLAY_CSV, REPLAY_CHART = ".replay.csv", "-replay.png"
register_header(REPLAY_COLUMNS)


def replay_path(csv_path: Path) -> Path:
    return beside(csv_path, REPLAY_CSV)


def ranks_text(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in ranks)


def phase_tags(plan: Plan) -> dict[Call, str]:
    """Each distinct call's phase in the results CSV: `comm`, with its group's ranks where that is not
    every rank, its name where it is no default group (`pg 1`: two groups over one set of ranks), its
    root where it has one and a one-way transfer's ends (`0->1`), and a #k where two calls would still share a row key
    (the CSV has one row per (op, variant, phase, dtype, size): calls of one S, told apart only by
    their splits or tensors, would otherwise share one)."""
    world = tuple(range(plan.world_size))
    tags: dict[Call, str] = {}
    seen: dict[tuple, int] = {}
    for call, _ in plan.counts:
        tag = "comm"
        if tuple(sorted(call.group_ranks)) != world:
            tag += f"@{ranks_text(call.group_ranks)}"
        if call.group:
            tag += f" pg {call.group}"
        if call.peer is not None:
            tag += f" root {call.peer}"
        if call.src is not None:
            tag += f" {call.src}->{call.dst}"
        key = (call.op, call.variant, tag, call.dtype, s_elements(call))
        seen[key] = seen.get(key, 0) + 1
        tags[call] = tag if seen[key] == 1 else f"{tag} #{seen[key]}"
    return tags


def s_elements(call: Call) -> int:
    """The call's S in elements, as its results row's size_bytes counts it (the op's S rule)."""
    return rule_s_elements(call, len(call.group_ranks))


def recorded(plan: Plan) -> dict[Call, tuple[float, ...]]:
    return dict(plan.recorded_us)


def recorded_per_step_us(plan: Plan, call: Call) -> float | None:
    """What the call took per step in the trace: its recorded times over the steps they came from."""
    times = recorded(plan).get(call, ())
    return sum(times) / max(plan.steps, 1) if times else None


def call_row(plan: Plan, call: Call, count: int, row: Mapping[str, Any] | None) -> dict[str, Any]:
    """A distinct call's replay row; `row` is its results-CSV row once measured."""
    times = recorded(plan).get(call, ())
    typical = _float(row, TYPICAL)
    return {
        "kind": "call",
        "op": call.op,
        "variant": call.variant,
        "phase": phase_tags(plan)[call],
        "dtype": call.dtype,
        "in_elems": call.in_elems,
        "out_elems": call.out_elems,
        "group_ranks": ranks_text(call.group_ranks),
        "peer": call.peer,
        "splits": ";".join(ranks_text(r) for r in call.splits),
        "count_per_step": count,
        "recorded_us": statistics.median(times) if times else None,
        "recorded_us_per_step": recorded_per_step_us(plan, call),
        **_measured(row),
        "replayed_us_per_step": None if typical is None else typical * count,
        "trace_digest": plan.digest,
    }


def step_row(plan: Plan, row: Mapping[str, Any] | None) -> dict[str, Any]:
    """The step's replay row: its sequence issued back to back, timed as one measurement."""
    return {
        "kind": "step",
        "op": STEP_OP,
        "variant": STEP_VARIANT,
        "phase": "comm",
        "count_per_step": 1,
        "recorded_us_per_step": recorded_step_us(plan),
        **_measured(row),
        "replayed_us_per_step": _float(row, TYPICAL),
        "trace_digest": plan.digest,
    }


class ReplayRows(RowOutput):
    """One of rank 0's row outputs (results/row_outputs.py): the replay row beside each results row. A results row is matched to
    its call by the row key the results CSV keeps unique (op, variant, phase, dtype, size_bytes);
    a variant the backend refused (one `unavailable` row for it) gives each of its calls not yet
    written a row that says so, so no call is dropped silently."""

    def __init__(self, plan: Plan, sizes: Mapping[Call, int], write: Callable[[dict[str, Any]], None]) -> None:
        self.plan, self.write = plan, write
        self.counts = dict(plan.counts)
        tags = phase_tags(plan)
        self.calls = {(c.op, c.variant, tags[c], c.dtype, sizes[c]): c for c in self.counts}
        if len(self.calls) != len(self.counts):
            raise ValueError("two distinct calls share a results row key")  # phase_tags' #k prevents this
        self.written: set[Call] = set()

    def add(self, row: Mapping[str, Any], m: Measurement | None = None) -> None:
        if row["op"] == STEP_OP:
            self.write({**step_row(self.plan, row), "dtype": row["dtype"]})
            return
        if row.get("status") == "unavailable":  # no phase, no size: the whole variant was refused
            key = (row["op"], row["variant"], row["dtype"])
            calls = [c for c in self.counts if (c.op, c.variant, c.dtype) == key and c not in self.written]
        else:
            calls = [self.calls[(row["op"], row["variant"], row["phase"], row["dtype"], int(row["size_bytes"]))]]
        for call in calls:
            self.written.add(call)
            self.write(call_row(self.plan, call, self.counts[call], row))


def unmapped_rows(plan: Plan) -> list[dict[str, Any]]:
    total = total_recorded_us(plan)
    rows = []
    for u in plan.unmapped:
        c = u.collective
        share = f"; {c.recorded_us / total:.1%} of the recorded time" if c.recorded_us is not None and total else ""
        rows.append(
            {
                "kind": "unmapped",
                "op": c.name,
                "dtype": c.dtype,
                "in_elems": c.in_elems,
                "out_elems": c.out_elems,
                "group_ranks": ranks_text(c.group_ranks),
                "peer": c.peer,
                "recorded_us": c.recorded_us,
                "status": "unmapped",
                "note": u.reason + share,
                "trace_digest": plan.digest,
            }
        )
    return rows


def _measured(row: Mapping[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {"status": "not run"}
    keys = (TYPICAL, TYPICAL_LO, TYPICAL_HI, "status", "wrong", "note", "run_id")
    return {k: row.get(k) for k in keys}


def _float(row: Mapping[str, Any] | None, key: str) -> float | None:
    if row is None or row.get(key) in (None, ""):
        return None
    return float(row[key])


def recorded_step_us(plan: Plan) -> float | None:
    """The step's communication in the trace as the replay's step row measures it here: the time some
    call of the step ran, overlaps merged, per step (replay/spans.py); None where the trace recorded
    no spans. Never the calls' times added up: overlapping calls would count twice."""
    walls = plan.recorded_wall_us
    return sum(walls) / len(walls) if walls else None


def recorded_calls_us(plan: Plan) -> float | None:
    """The mapped calls' recorded times added up, per step (None when the trace recorded no times):
    what the calls timed one at a time here compare with, not the step."""
    found = [t for c, _ in plan.counts if (t := recorded_per_step_us(plan, c)) is not None]
    return sum(found) if found else None


def total_recorded_us(plan: Plan) -> float:
    """Every collective's recorded time: the mapped calls' and the unmapped ones'."""
    mapped = sum(sum(times) for _, times in plan.recorded_us)
    return mapped + sum(u.collective.recorded_us or 0.0 for u in plan.unmapped)


def digits(value: float) -> str:
    """Three significant digits, trailing zeros kept (43.0, 0.601, 120, 1460: never 1.46e+03)."""
    if abs(value) >= 1000:
        return f"{float(f'{value:.3g}'):.0f}"
    return f"{value:#.3g}".rstrip(".")


def ms(us: float) -> str:
    return f"{digits(us / 1e3)} ms" if us >= 100 else f"{digits(us)} us"


def step_line(step: Mapping[str, Any], calls: list[Mapping[str, Any]]) -> str:
    """The step's time with its interval, beside the calls timed one at a time and added up."""
    typical, lo, hi = (float(step[k]) for k in (TYPICAL, TYPICAL_LO, TYPICAL_HI))
    parts = [float(c["replayed_us_per_step"]) for c in calls if c.get("replayed_us_per_step") not in (None, "")]
    alone = f"; its {len(calls)} distinct calls timed one at a time add up to {ms(sum(parts))}" if parts else ""
    return f"# step: {ms(typical)} (95%: {ms(lo)}-{ms(hi)}) for the sequence issued back to back{alone}"


def verdict_line(
    step: Mapping[str, Any],
    plan: Plan,
    world_here: int,
    backend_here: str,
    recorded_on: str,
    calls: Sequence[Mapping[str, Any]] = (),
) -> str:
    """'step communication here 41.2 ms (95%: 39.8-43.0) on 2 ranks of gloo; in the trace 12.5 ms on 2
    ranks of nccl 2.17.1 (...)': like compared with like, and the line says which. The step here is
    its calls issued back to back, timed from the first's start to the last's end; the trace's like
    figure is the time its calls ran, overlaps merged (Plan.recorded_wall_us). Where the plan holds
    none (a trace that records no spans), only the calls' sums compare: the trace's, and the calls
    timed one at a time here (`calls`, their rows)."""
    typical, lo, hi = (float(step[k]) / 1e3 for k in (TYPICAL, TYPICAL_LO, TYPICAL_HI))
    here = f"step communication here {digits(typical)} ms (95%: {digits(lo)}-{digits(hi)}) on {world_here} ranks of {backend_here}"
    where = f" on {plan.world_size} ranks" + (f" of {recorded_on}" if recorded_on else "")
    wall, summed = recorded_step_us(plan), recorded_calls_us(plan)
    if wall is not None:
        added = f"; its calls' own times add up to {ms(summed)}" if summed is not None else ""
        trace = f"in the trace {digits(wall / 1e3)} ms{where} (the time the step's calls ran, overlaps merged, as here{added})"
    elif summed is not None:
        alone = [float(c["replayed_us_per_step"]) for c in calls if c.get("replayed_us_per_step") not in (None, "")]
        mine = f", here {ms(sum(alone))} (each call timed alone)" if alone else ""
        trace = (
            f"the trace{where} gives no figure for the step (its calls' spans merged): its calls' times add up to "
            f"{ms(summed)} a step{mine}"
        )
    else:
        trace = f"the trace{where} recorded no times"
    return f"# {here}; {trace}"


def unmapped_lines(plan: Plan) -> list[str]:
    """One line per collective the replay could not issue, with its reason and share of the time."""
    rows = unmapped_rows(plan)
    lines = [f"# not replayed: {len(rows)} collective(s) the replay cannot issue"] if rows else []
    lines += [
        f"#   {r['op']} {r['dtype']} {r['in_elems']} elements on ranks {r['group_ranks']}: {r['note']}" for r in rows
    ]
    return lines


def read_replay(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
