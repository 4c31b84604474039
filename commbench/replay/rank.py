"""One rank's replay: the sweep's session (agreement, rank 0's CSV and history entry, the watchdog,
the heartbeat), the trace's process groups, then every distinct call timed on its own and the
step's sequence timed as one measurement, through the sweep's rotation (rounds, the per-iteration
max over ranks, the correctness check, rows written as each completes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from commbench.backends.base import Backend
from commbench.backends.job import Launch
from commbench.errors import UserError
from commbench.ops import spec_of
from commbench.ops.args import CollArgs
from commbench.replay.adapter import PHASE, Issued, Step, build_op, inexact, set_up, unsupported
from commbench.replay.codec import plan_from_dict
from commbench.replay.fit import fit
from commbench.replay.record import Call, Plan
from commbench.replay.summary import REPLAY_COLUMNS, ReplayRows, phase_tags, replay_path, unmapped_rows
from commbench.results.measurement import Measurement
from commbench.results.writer import CsvAppender
from commbench.run.config import Outcome, SweepConfig
from commbench.run.eta import SweepProgress
from commbench.run.groups import group_view
from commbench.run.harness import TimedCase
from commbench.run.plan import RotationEntry
from commbench.run.rotation import rotate
from commbench.run.runner import measure_session
from commbench.run.session import Session, open_session

REPLAY_PROGRAM = "commbench.replay.rank:replay_rank"


@dataclass(frozen=True)
class ReplayOptions:
    """What the ranks of a replay receive beside the SweepConfig (in its program_options)."""

    plan: dict[str, Any]  # codec.plan_to_dict
    scale: bool = False
    recorded_on: str = ""  # the traced job's backend, as its trace says ("nccl 2.17.1")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayOptions:
        return cls(**data)


class ReplayCase(TimedCase):
    """A call's timed loop whose row names the call (its op, variant, dtype, S on its group and the
    phase tag that holds its group), on every rank alike, whether this rank is in its group or not."""

    def __init__(self, issued: Issued, tag: str, group_size: int, **kwargs: Any) -> None:
        super().__init__(issued.op, issued.args, PHASE, **kwargs)
        self.issued, self.tag, self.group_size = issued, tag, group_size

    def measurement(self) -> Measurement:
        m = super().measurement()
        call = self.issued.call
        spec = spec_of(call.op)
        return dataclasses.replace(
            m,
            op=call.op,
            variant=call.variant,
            phase=self.tag,
            dtype=call.dtype,
            size_bytes=self.issued.s_bytes,
            count=call.in_elems,
            bus_factor=None if spec is None or spec.bus_factor is None else spec.bus_factor(self.group_size),
        )


class StepCase(TimedCase):
    """The step's sequence as one measurement: op `step`, variant `sequence`, S the bytes of all its calls."""

    def __init__(self, step: Step, args: CollArgs, dtype: str, calls: int, **kwargs: Any) -> None:
        super().__init__(step, args, PHASE, **kwargs)
        self.dtype_name, self.calls_in_step = dtype, calls

    def measurement(self) -> Measurement:
        m = super().measurement()
        return dataclasses.replace(m, dtype=self.dtype_name, count=self.calls_in_step)


def refuse_unreplayable(plan: Plan) -> None:
    """A call the ops cannot issue with its exact counts is refused in one line, before anything runs."""
    for call in plan.calls():
        why = unsupported(call) or inexact(call, len(set(call.group_ranks)))
        if why is not None:
            raise UserError(f"cannot replay {call.op}/{call.variant} of {call.in_elems} elements: {why}")


Views = dict[tuple[str, tuple[int, ...]], Backend | None]


def make_groups(backend: Backend, calls: Sequence[Call]) -> Views:
    """Every communicator the calls use (Call.communicator: two groups over the same ranks are two),
    created on every rank in one order: the backend as each group's members see it, None on the
    ranks outside it. The job's default group over the whole world is the backend itself."""
    world = tuple(range(backend.world_size))
    views: Views = {}
    for call in calls:
        key = call.communicator
        if key in views:
            continue
        name, ranks = key
        if ranks == world and name == "":
            views[key] = backend
            continue
        if not backend.torch_process_group:
            raise UserError(
                f"the trace issues collectives on a group of ranks {list(ranks)}"
                f"{f' (its group {name!r})' if name else ''}: the {backend.name} backend has no process groups; "
                "replay with --backend gloo or nccl"
            )
        import torch.distributed as dist

        group = dist.new_group(list(ranks))
        views[key] = group_view(backend, group, ranks) if backend.rank in ranks else None
    return views


def replay_rank(cfg: SweepConfig, launch: Launch, backend: Backend) -> Outcome:
    """The replay on this rank; the outcome's code is 0 (ok) or 1 (wrong results)."""
    opts = ReplayOptions.from_dict(cfg.program_options)
    plan, placement = fit(plan_from_dict(opts.plan), backend.world_size, opts.scale)
    refuse_unreplayable(plan)
    session = open_session(cfg, launch, backend, [])
    sink = session.sink
    writer = None
    if sink is not None and session.path is not None:
        writer = CsvAppender(replay_path(session.path), REPLAY_COLUMNS, cfg.overwrite)
        sink.display.write(f"# replay: {placement}; {len(plan.sequence)} calls per step, {len(plan.counts)} distinct")
        for note in plan.notes:
            sink.display.write(f"# trace: {note}")
        tags = phase_tags(plan)
        names = {
            "op": [*(c.op for c, _ in plan.counts), "step"],
            "variant": [*(c.variant for c, _ in plan.counts), "sequence"],
            "phase": list(tags.values()),
            "dtype": [*(c.dtype for c, _ in plan.counts), "mixed"],
        }
        sink.section(f"replay on {backend.world_size} ranks", names)
    try:
        return measure_session(session, lambda: _replay(session, backend, plan, writer))
    finally:
        if writer is not None:
            writer.close()


def _replay(session: Session, backend: Backend, plan: Plan, writer: CsvAppender | None) -> int:
    """Each distinct call on its own, then the step; every row written as it completes."""
    cfg, sink = session.cfg, session.sink
    views = make_groups(backend, plan.calls())
    tags = phase_tags(plan)
    entries: dict[str, list[RotationEntry]] = {}
    sizes: dict[Call, int] = {}
    for call, _ in plan.counts:
        ranks = tuple(sorted(call.group_ranks))
        issued = _issued(call, views[call.communicator], backend, len(ranks))
        label = f"{call.op}/{call.variant} {call.dtype} {call.in_elems} elements on ranks {list(ranks)}"
        window = 1 if call.op == "barrier" else cfg.window_per_sample
        case = ReplayCase(issued, tags[call], len(ranks), window=window, watchdog=session.watchdog, label=label)
        entries.setdefault(call.op, []).append(RotationEntry(case, issued.args, issued.s_bytes, "", issued.s_bytes))
        sizes[call] = issued.s_bytes
    if sink is not None and writer is not None:
        sink.outputs.append(ReplayRows(plan, sizes, writer.write))
        writer.write_many({**row, "run_id": sink.base["run_id"]} for row in unmapped_rows(plan))
    shared: list = []
    steps = [
        [_issued(c, views[c.communicator], backend, len(c.group_ranks), shared) for c in sequence]
        for sequence in plan.sequences()
    ]
    dtypes = sorted({c.dtype for c in plan.calls()})
    step = Step(steps)
    step_args = CollArgs(backend=backend, dtype=steps[0][0].args.dtype, variant="sequence", wait_objs=shared)
    turns = f", each of the {len(steps)} recorded steps in turn" if len(steps) > 1 else ""
    step_case = StepCase(
        step,
        step_args,
        dtypes[0] if len(dtypes) == 1 else "mixed",
        len(plan.sequence),
        window=1,
        watchdog=session.watchdog,
        label=f"the step's {len(plan.sequence)} calls back to back{turns}",
    )
    step_entry = RotationEntry(step_case, step_args, step.total_bytes, "", step.total_bytes)
    planned = [(op, e.work) for op, group in entries.items() for e in group] + [("step", step_entry.work)]
    session.progress = SweepProgress(planned, cfg.budget)
    wrong = 0
    for group in entries.values():
        wrong += rotate(session, build_op(group[0].case.issued.call), group[0].case.issued.call.dtype, group)
    wrong += rotate(session, step, step_case.dtype_name, [step_entry])
    return wrong


def _issued(call: Call, view: Backend | None, world: Backend, group_size: int, wait_objs: list | None = None) -> Issued:
    try:
        return set_up(call, view, world, group_size, wait_objs)
    except ValueError as exc:
        raise UserError(f"cannot replay {call.op}/{call.variant} of {call.in_elems} elements: {exc}") from None
