"""One rank's sweep: join the group, agree on the configuration, measure every case, write rows.

Used in-process under a launcher (torchrun, horovodrun) and by every rank `commbench sweep` spawns.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pandas as pd
import torch

import commbench
from commbench.backends import load_backend
from commbench.backends.base import Backend
from commbench.console.display import Display, choose_mode
from commbench.errors import ExitCode, UserError
from commbench.history.store import History, open_run_history
from commbench.launcher_env import Launch
from commbench.ops import build_ops, choose_variants, unavailable, world_error
from commbench.ops.args import CollArgs
from commbench.ops.base import Op, Point
from commbench.provenance import layout
from commbench.results.noise import Budget
from commbench.results.schema import resolve_output
from commbench.results.stats import Stats
from commbench.run.config import ONE_RANK_NOTE, Outcome, RunFacts, SweepConfig, agree, share_refusal
from commbench.run.eta import Plan, SweepProgress
from commbench.run.groups import Grouping, form_groups
from commbench.run.harness import Case, blocks, planned_iters
from commbench.run.heartbeat import ProgressBoard, connect_store
from commbench.run.overlap import AUTO, ComputeKernel, calibrate, compute_dtype, cpu_note, seconds_of_kernel, side_for
from commbench.run.record import begin_record, gather_host_envs
from commbench.run.resources import memory_case, memory_error
from commbench.run.sink import Measured, Sink
from commbench.run.watchdog import Watchdog, bounded

TRANSPORT_TIMEOUT_SLACK_S = 10.0
WAITS_INSIDE_NOTE = "completes its collectives inside each iteration: measured one op at a time (window 1)"


class CollectiveFailure(Exception):
    """A collective raised (a peer died, a transport error): exit with the op, size and rank."""


def run_rank(cfg: SweepConfig, launch: Launch) -> Outcome:
    """Run the sweep on this rank; the outcome's code is 0 (ok) or 1 (wrong results)."""
    ops = build_ops(cfg.ops, cfg.op_options, cfg.variants)
    backend = load_backend(cfg.backend)(**({"device": cfg.device} if cfg.device != "auto" else {}))
    # The transport's own timeout is only a backstop: the watchdog fires first with the step's label and
    # a diagnosis, where NCCL's would abort the process with neither.
    try:
        backend.init(cfg.timeout + TRANSPORT_TIMEOUT_SLACK_S, launch)
    except RuntimeError as exc:  # torch.distributed's errors: the store or a peer cannot be reached
        raise CollectiveFailure(
            f"rank {launch.rank}: could not join the process group: {_first_sentence(exc)}"
        ) from exc
    try:
        if cfg.isolate is not None:  # `commbench isolate`: the same launch, a node sweep on the ranks
            from commbench.isolate.node_sweep import isolate_rank

            return isolate_rank(cfg, launch, backend)
        return _sweep(cfg, launch, backend, ops)
    finally:
        backend.close()


def _sweep(cfg: SweepConfig, launch: Launch, backend: Backend, ops: list[Op]) -> Outcome:
    lead = backend.rank == 0
    watchdog = Watchdog(cfg.timeout, backend.rank)
    store = connect_store(launch, min(cfg.timeout, 30.0))
    board = ProgressBoard(
        store, backend.rank, backend.world_size, watchdog.poll_s, local=lambda: (backend.issued, watchdog.label)
    )
    watchdog.diagnose = lambda: _timed_out(board, watchdog)
    watchdog.diagnosis_s = board.diagnosis_s
    board.start()
    watchdog.arm("agreeing on the configuration across ranks")
    path = None
    # Every rank checks its own host or device; rank 0 alone owns the output file and the history.
    error = memory_error(ops, cfg, backend, launch.local_world_size)
    if lead and error is None:
        try:
            path = resolve_output(cfg.output, cfg.backend, backend.world_size, cfg.overwrite, cfg.raw)
        except UserError as exc:
            error = exc.format_message()
    facts = agree(backend, cfg, error, lambda n: world_error(ops, n))
    watchdog.arm(f"creating the --group {cfg.group} process groups")
    grouping = form_groups(backend, cfg.group, facts.rank_hosts)
    watchdog.arm("gathering every host's environment")
    host_envs = gather_host_envs(backend, cfg.backend, facts.run_id, facts.rank_hosts, launch.master_addr, store)
    sink, error, history = None, None, None
    if lead and path is not None:
        try:
            # Opened once the ranks agree, so that a refused run leaves no history file behind.
            history = open_run_history(cfg.history, path)
            sink = _open_sink(cfg, backend, facts, path, launch, grouping, host_envs or [], history)
        except UserError as exc:  # a history that cannot be opened; or the name was free when checked, but taken since
            error = exc.format_message()
    watchdog.arm("learning whether rank 0 could create its output")
    share_refusal(backend, error)
    watchdog.disarm()
    prior = _last_run_prior(cfg, grouping, ops, history, sink)
    progress = SweepProgress(planned_cases(cfg, grouping, ops), Plan.of(cfg), prior=prior)
    try:
        wrong_total = 0
        for op in ops:
            if sink:
                names = {"op": [op.name], "variant": op.variants, "phase": op.phases, "dtype": cfg.dtypes}
                sink.section(f"{op.name} on {backend.world_size} ranks{_in_groups(grouping)}", names)
            for dtype in cfg.dtypes:
                wrong_total += _sweep_op(cfg, grouping, op, dtype, watchdog, sink, board, progress)
    except CollectiveFailure as exc:
        watchdog.disarm()  # this path diagnoses; the watchdog must not race it with a second report
        detail = bounded(board.diagnose, board.diagnosis_s)
        board.finish(f"failed in {watchdog.label}")
        watchdog.arm(f"leaving the process group after {watchdog.label} failed")
        raise CollectiveFailure(f"{exc}; {detail}") from exc
    except BaseException:
        board.finish(f"stopped in {watchdog.label}")
        raise
    finally:
        board.finish("finished")  # a no-op after either failure above: the first state stays
        if sink:
            sink.close()
    if sink:
        sink.finish(wrong_total)
    return Outcome(ExitCode.FAILED if wrong_total else ExitCode.OK, path)


def _last_run_prior(
    cfg: SweepConfig, grouping: Grouping, ops: list[Op], history: History | None, sink: Sink | None
) -> dict[tuple[str, int], float]:
    """The ETA's prior from the last complete run of this run's fingerprint in the history (empty
    without one). A history that cannot be read costs the ETA its prior, never the run."""
    if history is None or sink is None:
        return {}
    from commbench.history.query import last_run_rows

    try:
        rows = last_run_rows(history, str(sink.base.get("fingerprint", "")))
    except Exception:  # a database error of any driver: the ETA goes on without its prior
        return {}
    return eta_prior(cfg, grouping, ops, rows) if len(rows) else {}


def _open_sink(
    cfg: SweepConfig,
    backend: Backend,
    facts: RunFacts,
    path,
    launch: Launch,
    grouping: Grouping,
    host_envs: list[dict],
    history: History | None,
) -> Sink:
    run_layout = layout(
        cfg.backend, backend.world_size, facts.rank_hosts, grouping.kind, cfg.mode, cfg.window, backend.device.type
    )
    record_columns, recorder = begin_record(path, facts.run_id, run_layout, host_envs, cfg.command, history)
    base = {
        "run_id": facts.run_id,
        "mode": cfg.mode,
        "world_size": backend.world_size,
        "group": grouping.kind,
        "group_size": grouping.size,
        "backend": cfg.backend,
        "warmup": cfg.warmup,
        "hosts": facts.hosts,
        "node_ranks": facts.node_ranks,
        "torch_version": torch.__version__,
        "backend_version": backend.version(),
        "command": cfg.command,
        **record_columns,
    }
    # A rank commbench spawned writes to a pipe its launcher reads: the launcher owns the terminal.
    display = Display(choose_mode(sys.stdout, relay=launch.spawned))
    budget = Budget(cfg.time_per_size, cfg.min_iters, cfg.max_iters, cfg.iters)
    # Creates the file, or refuses before the header.
    sink = Sink(path, base, cfg.overwrite, cfg.raw, display, budget, history=recorder)
    display.write(
        f"# commbench {commbench.__version__}: backend {cfg.backend} ({backend.version()}), "
        f"{backend.world_size} ranks on {facts.hosts}{_in_groups(grouping)}, mode {cfg.mode}, "
        f"{cfg.iterations_text}, {cfg.warmup} warm-up{_alone(backend.world_size)}; results -> {path}"
    )
    return sink


@dataclass
class _Slot:
    """A case of the rotation and what its row needs besides the measurement."""

    case: Case
    args: CollArgs
    s_bytes: int
    window: int
    note: str
    work: int  # the case's memory estimate: its size as the ETA weighs it
    blocks: list[int] = field(default_factory=list)  # samples per round, planned at the first visit
    sample_s: float = 0.0


def _alone(world_size: int) -> str:
    return f" ({ONE_RANK_NOTE})" if world_size == 1 else ""


def _in_groups(grouping: Grouping) -> str:
    return "" if grouping.kind == "world" else f", --group {grouping.kind} (groups of {grouping.size})"


def _variants(cfg: SweepConfig, grouping: Grouping, op: Op, dtype: str) -> tuple[list[str], dict[str, str]]:
    """The variants of the op that can run in dtype in this group, and why each of the others cannot."""
    torch_dtype = getattr(torch, dtype)
    backend = grouping.backend
    runnable, refused = [], {}
    for variant in choose_variants(op.variants, cfg.variants):
        reason = grouping.unavailable or unavailable(op, variant, backend, torch_dtype)
        if reason is None:
            runnable.append(variant)
        else:
            refused[variant] = reason
    return runnable, refused


def planned_cases(cfg: SweepConfig, grouping: Grouping, ops: list[Op]) -> list[tuple[str, int]]:
    """(op, work) of every case the sweep plans, before sizes that round to one another are merged
    and before the transport refuses any; work is the case's memory estimate, which grows with it."""
    return [(op.name, work) for op, _, _, _, work in _planned(cfg, grouping, ops)]


def _planned(cfg: SweepConfig, grouping: Grouping, ops: list[Op]) -> Iterator[tuple[Op, tuple, Point, str, int]]:
    """Every planned case: its op, its row key without the size (op, variant, phase, dtype), its point
    and its work."""
    on_host = grouping.backend.device.type != "cuda"
    for op in ops:
        for dtype in cfg.dtypes:
            for point in op.points(cfg.sizes):
                for variant in _variants(cfg, grouping, op, dtype)[0]:
                    work = _work(op, point, variant, dtype, cfg, grouping, on_host)
                    for phase in op.phases:
                        yield op, (op.name, variant, phase, dtype), point, variant, work


def eta_prior(cfg: SweepConfig, grouping: Grouping, ops: list[Op], rows: pd.DataFrame) -> dict[tuple[str, int], float]:
    """Seconds per sample of each planned (op, work) as an earlier run's rows measured them (their
    p50 at the same op, variant, phase and dtype, at the nearest size within 2x), for the ETA."""
    curves: dict[tuple, list[tuple[int, float]]] = {}
    for row in rows.itertuples(index=False):
        p50 = float(row.time_us_p50)
        if row.status == "ok" and p50 > 0:
            key = (row.op, row.variant, row.phase, row.dtype)
            curves.setdefault(key, []).append((int(row.size_bytes), p50 * 1e-6))
    found: dict[tuple[str, int], list[float]] = {}
    for op, key, point, _, work in _planned(cfg, grouping, ops):
        near = [(abs(math.log(s / point.size_bytes)), t) for s, t in curves.get(key, []) if s > 0 < point.size_bytes]
        if near and min(near)[0] <= math.log(2):
            found.setdefault((op.name, work), []).append(min(near)[1])
    return {case: statistics.fmean(times) for case, times in found.items()}


def _work(op: Op, point: Point, variant: str, dtype: str, cfg: SweepConfig, grouping: Grouping, on_host: bool) -> int:
    """A case's memory estimate: how the ETA and the rotation weigh it."""
    return op.memory_bytes(memory_case(op, variant, dtype, cfg, grouping.backend.world_size, on_host), point)


# Cases are interleaved (rotated) in groups whose buffers are alive together. A group may hold this
# much, or the sweep's largest single case where that is more, so a rotation never needs more memory
# than the memory check allowed: small sizes rotate all together, the largest one at a time.
ROTATION_MEMORY_BYTES = 64 << 20


def rotation_groups(
    points: list[Point], variants: list[str], need: Callable[[Point, str], int]
) -> list[list[tuple[Point, str]]]:
    """(point, variant) pairs in sweep order, cut into consecutive groups that fit the rotation memory;
    need(point, variant) is a case's memory estimate (Op.memory_bytes)."""
    pairs = [(point, variant) for point in points for variant in variants]
    if not pairs:
        return []
    needs = {(p.label, v): need(p, v) for p, v in pairs}
    cap = max(ROTATION_MEMORY_BYTES, *needs.values())
    groups: list[list[tuple[Point, str]]] = [[]]
    held = 0
    for point, variant in pairs:
        if groups[-1] and held + needs[point.label, variant] > cap:
            groups.append([])
            held = 0
        groups[-1].append((point, variant))
        held += needs[point.label, variant]
    return groups


def _sweep_op(
    cfg: SweepConfig,
    grouping: Grouping,
    op: Op,
    dtype: str,
    watchdog: Watchdog,
    sink: Sink | None,
    board: ProgressBoard,
    progress: SweepProgress,
) -> int:
    """Every point x variant x phase of one op in one dtype, interleaved in rounds (see _rotate)."""
    backend = grouping.backend  # the ops see their group's ranks
    variants, refused = _variants(cfg, grouping, op, dtype)
    if sink:
        for variant, reason in refused.items():
            sink.unavailable(op.name, variant, dtype, reason)
    seen: set[tuple[str, str, int]] = set()
    wrong_total = 0
    on_host = backend.device.type != "cuda"

    def need(point: Point, variant: str) -> int:
        return _work(op, point, variant, dtype, cfg, grouping, on_host)

    for group in rotation_groups(op.points(cfg.sizes), variants, need):
        slots: list[_Slot] = []
        for point, variant in group:
            args = CollArgs(backend=backend, dtype=getattr(torch, dtype), variant=variant)
            op.setup(args, point)
            waits_inside = op.completes_internally(variant)
            window = op.window_for(variant, cfg.window_per_sample)
            notes = [
                WAITS_INSIDE_NOTE if waits_inside and cfg.mode == "nonblocking" else "",
                op.note(args),
                ONE_RANK_NOTE if backend.world_size == 1 else "",
            ]
            note = "; ".join(n for n in notes if n)
            for phase in op.phases:
                s_bytes = op.size_bytes(args, phase)
                if (variant, phase, s_bytes) in seen:  # two requested sizes rounded to one
                    progress.skip(op.name, need(point, variant))
                    continue
                seen.add((variant, phase, s_bytes))
                label = f"{op.name}/{variant}/{phase} {dtype} at {_where(point, s_bytes)}"
                # Rank 0 keeps every rank's samples only for --raw's samples file, their one reader.
                case = Case(op, args, phase, window=window, watchdog=watchdog, label=label, keep_per_rank=cfg.raw)
                slots.append(_Slot(case, args, s_bytes, window, note, need(point, variant)))
        del args  # the slots hold the group's buffers, until the group is done
        wrong_total += _rotate(cfg, backend, op, dtype, slots, sink, board, progress, watchdog)
    return wrong_total


def _rotate(
    cfg: SweepConfig,
    backend: Backend,
    op: Op,
    dtype: str,
    slots: list[_Slot],
    sink: Sink | None,
    board: ProgressBoard,
    progress: SweepProgress,
    watchdog: Watchdog,
) -> int:
    """Visit every case of the group once per round, each visit one block of its samples.

    A slow spell of the machine then lands on a block of every case rather than on all samples of
    one, and the rounds are independent replicates (compare tests against their spread). The first
    visit warms the case up and plans its iterations; the last one checks the result. A row is
    written as soon as its last block has run. Should the sweep stop before that (a failed or hung
    collective, Ctrl-C), rank 0 still writes each unfinished case's row from the blocks it has, with
    a note saying how many rounds ran: nothing measured is lost.
    """
    wrong_total = 0
    pending = list(slots)

    def write(slot: _Slot, note: str = "") -> None:
        if sink is None:
            return
        m = slot.case.measurement()
        sink.measured(
            Measured(
                op=op.name,
                variant=slot.args.variant,
                phase=slot.case.phase,
                dtype=dtype,
                size_bytes=slot.s_bytes,
                count=slot.args.count,
                bus_factor=op.bus_factor(backend.world_size),
                rounds_us=m.rounds_us,
                per_rank_us=m.per_rank_us,
                wrong=m.wrong,
                calls=m.calls,
                apis=m.apis,
                window=slot.window,
                note="; ".join(n for n in (slot.note, note, cpu_note(backend.device) if m.compute_flops else "") if n),
                timer=m.timer,
                compute_rounds_us=m.compute_rounds_us,
                overlapped_rounds_us=m.overlapped_rounds_us,
                compute_flops=m.compute_flops,
            )
        )

    def write_unfinished() -> None:
        unfinished, pending[:] = [s for s in pending if s.case.rounds_us], []
        for slot in unfinished:
            write(slot, f"stopped after {len(slot.case.rounds_us)} of {len(slot.blocks)} rounds")

    watchdog.last_words = write_unfinished
    refused: set[int] = set()  # slots of a variant the transport refused (by id: slots hold tensors)
    try:
        for round_index in range(cfg.rounds):
            for slot in list(pending):
                if id(slot) in refused:
                    continue
                label = slot.case.label + (f", round {round_index + 1}/{cfg.rounds}" if cfg.rounds > 1 else "")
                if sink:
                    sink.progress(progress.status(label))
                board.step(label)
                try:
                    done = _visit(cfg, slot, round_index, progress)
                except RuntimeError as exc:
                    if round_index == 0 and (reason := _refused_everywhere(backend, exc)) is not None:
                        # The variant's other sizes would be refused alike: one unavailable row for it.
                        variant = slot.args.variant
                        dropped = [s for s in pending if s.args.variant == variant and not s.case.rounds_us]
                        refused |= {id(s) for s in dropped}
                        pending[:] = [s for s in pending if id(s) not in refused]
                        for s in dropped:  # counted as done: the total stays what was announced
                            progress.skip(op.name, s.work, id(s))
                        if sink:
                            sink.unavailable(op.name, slot.args.variant, dtype, reason)
                        continue
                    raise CollectiveFailure(f"rank {board.rank}: {label} failed: {_first_sentence(exc)}") from exc
                if done:
                    pending.remove(slot)
                    wrong_total += max(slot.case.wrong, 0)
                    write(slot)
    except BaseException:
        write_unfinished()
        raise
    finally:
        watchdog.last_words = None
    return wrong_total


# --precision checks the interval this many times per block (the ranks share samples after each
# chunk anyway, so the check costs no extra exchange beyond the chunk's).
PRECISION_CHUNKS = 4


def _visit(cfg: SweepConfig, slot: _Slot, round_index: int, progress: SweepProgress) -> bool:
    """One visit of a case: its warm-up and plan on the first, one block, the check on the last.
    True when the case is done."""
    case = slot.case
    if round_index == 0:
        slot.sample_s = case.warm_up(cfg.warmup, cfg.time_per_size if cfg.auto else None)
        iters = cfg.iters or planned_iters(slot.sample_s, cfg.time_per_size, cfg.min_iters, cfg.max_iters)
        slot.blocks = blocks(iters, cfg.rounds)
        if cfg.overlap:
            case.compute_for = lambda target_s, case=case: compute_kernel(cfg, case, target_s)
        # --overlap times the op, the matmul and both together: three samples per iteration.
        progress.plan(id(slot), case.op.name, slot.work, iters, slot.sample_s * (3 if cfg.overlap else 1))
    last = round_index == len(slot.blocks) - 1
    chunks = [slot.blocks[round_index]] if cfg.precision is None else blocks(slot.blocks[round_index], PRECISION_CHUNKS)
    for i, chunk in enumerate(chunks):
        final = last and i == len(chunks) - 1
        case.block(chunk, round_index, check=cfg.check and final)
        progress.ran(id(slot), chunk)
        if not final and cfg.precision is not None and _precise(case, cfg):
            if cfg.check:
                case.check()
            progress.finish(id(slot))
            return True
    if last:
        progress.finish(id(slot))
    return last


def compute_kernel(cfg: SweepConfig, case: Case, target_s: float) -> ComputeKernel:
    """--overlap's matmul for a case: --compute FLOP, or (auto) about as long as one sample of the
    op (target_s, the median of its first block, agreed across ranks); every rank gets the same."""
    backend, dtype = case.backend, case.args.dtype
    if cfg.compute != AUTO:
        return ComputeKernel(side_for(float(cfg.compute)), backend.device, compute_dtype(dtype))
    return calibrate(
        target_s, backend.device, dtype, case._agree_max, seconds_of_kernel(backend.device, backend.synchronize)
    )


def _precise(case: Case, cfg: SweepConfig) -> bool:
    """--precision: the pooled p50's interval is narrow enough. Every rank holds the same samples, so
    every rank decides the same. At least two rounds first (where more are planned), so that the
    rounds can still disagree, and at least --min-iters samples."""
    if len(case.rounds_us) < min(2, cfg.rounds) or case.iters < cfg.min_iters:
        return False
    stats = Stats.from_samples(case.samples_us)
    return stats.relative_width <= cfg.precision


def _where(point: Point, s_bytes: int) -> str:
    """A case's workload in labels: its S in bytes, after the op's own name for it where it has one."""
    return f"{s_bytes} bytes" if not point.params and point.size_bytes else f"{point.label} ({s_bytes} bytes)"


# What a transport says when it refuses a kind of tensor outright (Gloo and some collectives on
# CUDA tensors, a dtype a library lacks): raised as the call is issued, on every rank alike.
_REFUSAL = re.compile(r"not supported|unsupported|only supports|supports only|not implemented", re.IGNORECASE)


def _refused_everywhere(backend: Backend, exc: RuntimeError) -> str | None:
    """The transport's refusal, when every rank of the group refused this case at its first call;
    the case then becomes an `unavailable` row instead of failing the sweep."""
    mine = _first_sentence(exc) if _REFUSAL.search(str(exc)) else None
    if mine is None:
        return None
    try:  # the largest "not refused" over ranks: 0 when every rank refused
        accepted = backend.reduce_floats([0.0], "max")[0]
    except RuntimeError:  # a peer failed otherwise and left: the original failure is the diagnosis
        return None
    return f"the transport refused it: {mine}" if accepted == 0.0 else None


def _first_sentence(exc: BaseException) -> str:
    """The gist of a transport error: gloo prefixes a source location and appends advice."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    return text.split(". ")[0]


def _timed_out(board: ProgressBoard, watchdog: Watchdog) -> str:
    """The watchdog's diagnosis: name the peers at fault, then tell them this rank is leaving."""
    detail = board.diagnose()
    board.finish(f"timed out in {watchdog.label}")
    return detail
