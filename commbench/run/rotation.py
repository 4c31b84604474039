"""The rotation: every case of an op in one dtype, set up a memory-bounded group at a time, visited
in rounds, the ranks sharing each round's samples in one exchange, each row written as soon as its
last block has been shared; on a stop, the rows of what was measured so far; a variant the transport refuses becomes one `unavailable` row."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from commbench.ops.args import CollArgs
from commbench.ops.base import Op
from commbench.ops.spec import Point
from commbench.results.measurement import Measurement
from commbench.run.config import ONE_RANK_NOTE
from commbench.run.failures import CollectiveFailure, first_sentence, refusal, refused_everywhere
from commbench.run.harness import TimedCase, share_blocks
from commbench.run.iterations import compute_kernel, visit
from commbench.run.overlap import cpu_note
from commbench.run.plan import RotationEntry
from commbench.run.session import Session

T = TypeVar("T")

# A stopped row's round in progress: its blocks ran, but the ranks never reduced them to maxima.
UNSHARED_NOTE = " (the last of them rank 0's own samples: the ranks had not shared it)"
WAITS_INSIDE_NOTE = "completes its collectives inside each iteration: measured one op at a time (window 1)"


def sweep_op(session: Session, op: Op, dtype: str) -> int:
    """Every point x variant x phase of one op in one dtype, interleaved in rounds (see rotate);
    returns the wrong elements found."""
    variants = session.plan.variants(op, dtype)
    if session.sink:
        for variant, reason in variants.refused.items():
            session.sink.unavailable(op.name, variant, dtype, reason)
    seen: set[tuple[str, str, int]] = set()
    wrong_total = 0
    for group in session.plan.rotation_groups(op, dtype, variants.runnable):
        with session.phases.phase("setup"):
            entries = _set_up(session, op, dtype, group, seen)
        wrong_total += rotate(session, op, dtype, entries)
    return wrong_total


def _set_up(
    session: Session, op: Op, dtype: str, group: list[tuple[Point, str]], seen: set[tuple[str, str, int]]
) -> list[RotationEntry]:
    """The group's cases with their buffers allocated (they hold them until the group is done);
    seen: the (variant, phase, S) already measured, since two requested sizes can round to one."""
    cfg, backend = session.cfg, session.backend  # the ops see their group's ranks
    need = session.plan.work(op, dtype)
    entries: list[RotationEntry] = []
    for point, variant in group:
        args = CollArgs(backend=backend, dtype=getattr(torch, dtype), variant=variant)
        op.setup(args, point)
        window = op.spec.window_for(variant, cfg.window_per_sample)
        notes = [
            WAITS_INSIDE_NOTE if op.spec.completes_internally(variant) and cfg.mode == "nonblocking" else "",
            op.note(args),
            ONE_RANK_NOTE if backend.world_size == 1 else "",
        ]
        note = "; ".join(n for n in notes if n)
        for phase in op.phases:
            s_bytes = op.size_bytes(args, phase)
            if (variant, phase, s_bytes) in seen:  # two requested sizes rounded to one
                session.progress.skip(op.name, need(point, variant))
                continue
            seen.add((variant, phase, s_bytes))
            label = f"{op.name}/{variant}/{phase} {dtype} at {_where(point, s_bytes)}"
            # Rank 0 keeps every rank's samples only for --raw's samples file, their one reader.
            case = TimedCase(
                op,
                args,
                phase,
                window=window,
                watchdog=session.watchdog,
                label=label,
                keep_per_rank=cfg.raw,
                compute_for=functools.partial(compute_kernel, cfg) if cfg.overlap else None,
                phases=session.phases,
            )
            entries.append(RotationEntry(case, args, s_bytes, note, need(point, variant)))
    return entries


def rotate(session: Session, op: Op, dtype: str, entries: list[RotationEntry]) -> int:
    """Visit every case of the group once per round, each visit one block of its samples.

    A slow spell of the machine then lands on a block of every case rather than on all samples of
    one, and the rounds are independent replicates (compare tests against their spread). The first
    visit warms the case up and cuts its samples into blocks; the last one checks the result. The
    ranks share the blocks of every case of a round in one exchange after the round (share_blocks),
    and a row is written as soon as its last block has been shared. Should the sweep stop before that
    (a failed or hung collective, Ctrl-C), rank 0 still writes each unfinished case's row from the
    rounds the ranks have shared and, for the round in progress, its own samples, with status
    `stopped` and a note saying how many rounds ran and that the last is rank 0's alone: nothing
    measured is lost, and nothing unchecked passes for checked.
    """
    cfg, sink, board, progress, watchdog = session.cfg, session.sink, session.board, session.progress, session.watchdog
    wrong_total = 0
    pending = list(entries)
    finishing: list[RotationEntry] = []  # done, their last block not yet shared

    def write(entry: RotationEntry, note: str = "", stopped: bool = False) -> None:
        if sink is not None:
            sink.measured(dataclasses.replace(_with_notes(session, entry, note), stopped=stopped))

    def write_unfinished() -> None:
        unfinished = [e for e in pending + finishing if e.case.rounds_us or e.case.held]
        pending[:], finishing[:] = [], []
        for entry in unfinished:
            own = UNSHARED_NOTE if entry.case.keep_held() else ""
            rounds = f"stopped after {len(entry.case.rounds_us)} of {len(entry.blocks)} rounds{own}"
            write(entry, f"{rounds}, its check not run", stopped=True)

    def share_round() -> None:
        """One exchange for the blocks of every case of the round; then the rows of those it finished."""
        nonlocal wrong_total
        share_blocks([entry.case for entry in entries])
        for entry in finishing:
            wrong_total += max(entry.case.wrong, 0)
            write(entry)
        finishing.clear()

    watchdog.last_words = write_unfinished
    try:
        for round_index, entry in in_rounds(pending, cfg.rounds, after_round=share_round):
            label = entry.case.label + (f", round {round_index + 1}/{cfg.rounds}" if cfg.rounds > 1 else "")
            with session.phases.phase("progress"):
                if sink:
                    sink.progress(progress.status(label))
                board.step(label)
            try:
                done = visit(cfg, entry, round_index, progress, session.phases)
            except RuntimeError as exc:
                if round_index == 0 and (reason := refused_everywhere(session.backend, exc)) is not None:
                    # The variant's other sizes would be refused alike: one unavailable row for it.
                    variant = entry.args.variant
                    dropped = [e for e in pending if e.args.variant == variant and not e.case.rounds_us]
                    pending[:] = [e for e in pending if not any(e is d for d in dropped)]
                    for e in dropped:  # counted as done: the total stays what was announced
                        progress.skip(op.name, e.work, id(e))
                    if sink:
                        sink.unavailable(op.name, variant, dtype, reason)
                    continue
                raise CollectiveFailure(
                    f"rank {board.rank}: {label} failed: {first_sentence(exc)}", refusal=refusal(exc)
                ) from exc
            if done:
                pending.remove(entry)
                finishing.append(entry)
    except BaseException:
        write_unfinished()
        raise
    finally:
        watchdog.last_words = None
    return wrong_total


def in_rounds(pending: list[T], rounds: int, after_round: Callable[[], None] | None = None) -> Iterator[tuple[int, T]]:
    """The rotation's order: (round index, case) for every case still in `pending`, once per round,
    in order, and after_round() once each round's last case has been visited. The caller removes a
    case from `pending` once its last block has run (or the transport refused it); a case removed
    during a round is not visited again. The sweep's rotation and `commbench isolate`'s rounds of
    exchanges (isolate/exchanges.py) both visit their cases so."""
    for round_index in range(rounds):
        for case in list(pending):
            if any(case is other for other in pending):  # by identity: cases hold tensors
                yield round_index, case
        if after_round is not None:
            after_round()


def _with_notes(session: Session, entry: RotationEntry, note: str) -> Measurement:
    """The case's measurement with the notes its row carries: the case's own, the rotation's (a
    stopped case), and --overlap's on a CPU."""
    m = entry.case.measurement()
    overlap_note = cpu_note(session.backend.device) if m.compute_flops else ""
    return dataclasses.replace(m, note="; ".join(n for n in (entry.note, note, overlap_note) if n))


def _where(point: Point, s_bytes: int) -> str:
    """A case's workload in labels: its S in bytes, after the op's own name for it where it has one."""
    return f"{s_bytes} bytes" if not point.params and point.size_bytes else f"{point.label} ({s_bytes} bytes)"
