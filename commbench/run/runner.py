"""One rank's sweep: join the group, agree on the configuration, measure every case, write rows.

Used in-process under a launcher (torchrun, horovodrun) and by every rank `commbench sweep` spawns.
"""

from __future__ import annotations

import re

import torch

import commbench
from commbench.backends import load_backend
from commbench.backends.base import Backend
from commbench.errors import ExitCode, UserError
from commbench.launchers import Launch
from commbench.ops import build_ops, choose_variants, world_error
from commbench.ops.base import Op, Point
from commbench.results.schema import resolve_output
from commbench.results.sink import Measured, Sink
from commbench.run.config import ONE_RANK_NOTE, Outcome, RunFacts, SweepConfig, agree
from commbench.run.groups import Grouping, form_groups
from commbench.run.harness import CollArgs, measure
from commbench.run.progress import ProgressBoard, connect_store
from commbench.run.resources import memory_error
from commbench.run.watchdog import Watchdog, bounded

TRANSPORT_TIMEOUT_SLACK_S = 10.0
WAITS_INSIDE_NOTE = "completes its collectives inside each iteration: measured one op at a time (window 1)"


class CollectiveFailure(Exception):
    """A collective raised (a peer died, a transport error): exit with the op, size and rank."""


def run_rank(cfg: SweepConfig, launch: Launch) -> Outcome:
    """Run the sweep on this rank; the outcome's code is 0 (ok) or 1 (wrong results)."""
    ops = build_ops(cfg.ops, cfg.op_options, cfg.variants)
    backend = load_backend(cfg.backend)()
    # The transport's own timeout is only a backstop: the watchdog fires first with the step's label and
    # a diagnosis, where NCCL's would abort the process with neither.
    try:
        backend.init(cfg.timeout + TRANSPORT_TIMEOUT_SLACK_S, launch)
    except RuntimeError as exc:  # torch.distributed's errors: the store or a peer cannot be reached
        raise CollectiveFailure(
            f"rank {launch.rank}: could not join the process group: {_first_sentence(exc)}"
        ) from exc
    try:
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
    board.start()
    watchdog.arm("agreeing on the configuration across ranks")
    path = None
    # Every rank checks its own host or device; rank 0 alone owns the output file.
    error = memory_error(ops, cfg.sizes, backend.world_size, backend.device, launch.local_world_size)
    if lead and error is None:
        try:
            path = resolve_output(cfg.output, cfg.backend, backend.world_size, cfg.overwrite, cfg.raw)
        except UserError as exc:
            error = exc.format_message()
    facts = agree(backend, cfg, error, lambda n: world_error(ops, n))
    watchdog.arm(f"creating the --group {cfg.group} process groups")
    grouping = form_groups(backend, cfg.group, facts.rank_hosts)
    watchdog.disarm()
    sink = _open_sink(cfg, backend, facts, path, grouping) if lead and path is not None else None
    try:
        wrong_total = 0
        for op in ops:
            if sink:
                names = {"op": [op.name], "variant": op.variants, "phase": op.phases, "dtype": cfg.dtypes}
                sink.section(f"{op.name} on {backend.world_size} ranks{_in_groups(grouping)}", names)
            for dtype in cfg.dtypes:
                wrong_total += _sweep_op(cfg, grouping, op, dtype, watchdog, sink, board)
    except CollectiveFailure as exc:
        watchdog.disarm()  # this path diagnoses; the watchdog must not race it with a second report
        detail = bounded(board.diagnose, 4 * watchdog.poll_s + 5)
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


def _open_sink(cfg: SweepConfig, backend: Backend, facts: RunFacts, path, grouping: Grouping) -> Sink:
    base = {
        "run_id": facts.run_id,
        "mode": cfg.mode,
        "world_size": backend.world_size,
        "group": grouping.kind,
        "group_size": grouping.size,
        "backend": cfg.backend,
        "iters": cfg.iters,
        "warmup": cfg.warmup,
        "hosts": facts.hosts,
        "node_ranks": facts.node_ranks,
        "torch_version": torch.__version__,
        "backend_version": backend.version(),
        "command": cfg.command,
    }
    print(
        f"# commbench {commbench.__version__}: backend {cfg.backend} ({backend.version()}), "
        f"{backend.world_size} ranks on {facts.hosts}{_in_groups(grouping)}, mode {cfg.mode}, {cfg.iters} iters, "
        f"{cfg.warmup} warm-up{_alone(backend.world_size)}; results -> {path}",
        flush=True,
    )
    return Sink(path, base, cfg.overwrite, cfg.raw)


def _alone(world_size: int) -> str:
    return f" ({ONE_RANK_NOTE})" if world_size == 1 else ""


def _in_groups(grouping: Grouping) -> str:
    return "" if grouping.kind == "world" else f", --group {grouping.kind} (groups of {grouping.size})"


def _sweep_op(
    cfg: SweepConfig,
    grouping: Grouping,
    op: Op,
    dtype: str,
    watchdog: Watchdog,
    sink: Sink | None,
    board: ProgressBoard,
) -> int:
    """Every point x variant x phase of one op in one dtype; variants interleave per point for fairness."""
    seen: set[tuple[str, str, int]] = set()
    wrong_total = 0
    torch_dtype = getattr(torch, dtype)
    backend = grouping.backend  # the ops see their group's ranks

    def unavailable(variant: str) -> str | None:
        return (
            grouping.unavailable
            or backend.dtype_unavailable(torch_dtype)
            or op.dtype_unavailable(torch_dtype)
            or op.unavailable(variant, backend)
        )

    chosen = choose_variants(op.variants, cfg.variants)
    for variant in chosen:
        if (reason := unavailable(variant)) is not None and sink:
            sink.unavailable(op.name, variant, dtype, reason)
    variants = [v for v in chosen if unavailable(v) is None]
    for point in op.points(cfg.sizes):
        for variant in variants:
            args = CollArgs(backend=backend, dtype=torch_dtype, variant=variant)
            op.setup(args, point)
            waits_inside = op.completes_internally(variant)
            window = 1 if waits_inside else cfg.window_per_sample
            notes = [
                WAITS_INSIDE_NOTE if waits_inside and cfg.mode == "nonblocking" else "",
                op.note(args),
                ONE_RANK_NOTE if backend.world_size == 1 else "",
            ]
            note = "; ".join(n for n in notes if n)
            for phase in op.phases:
                s_bytes = op.size_bytes(args, phase)
                if (variant, phase, s_bytes) in seen:  # two requested sizes rounded to one
                    continue
                seen.add((variant, phase, s_bytes))
                label = f"{op.name}/{variant}/{phase} {dtype} at {_where(point, s_bytes)}"
                if sink:
                    sink.progress(label)
                board.step(label)
                try:
                    m = measure(
                        op,
                        args,
                        phase,
                        iters=cfg.iters,
                        warmup=cfg.warmup,
                        window=window,
                        check=cfg.check,
                        watchdog=watchdog,
                        label=label,
                    )
                except RuntimeError as exc:
                    raise CollectiveFailure(f"rank {board.rank}: {label} failed: {_first_sentence(exc)}") from exc
                if sink:
                    sink.measured(
                        Measured(
                            op.name,
                            variant,
                            phase,
                            dtype,
                            s_bytes,
                            args.count,
                            op.bus_factor(backend.world_size),
                            m.samples_us,
                            m.per_rank_us,
                            m.wrong,
                            m.calls,
                            m.apis,
                            window,
                            note,
                            m.timer,
                        )
                    )
                wrong_total += max(m.wrong, 0)
    return wrong_total


def _where(point: Point, s_bytes: int) -> str:
    """A case's workload in labels: its S in bytes, after the op's own name for it where it has one."""
    return f"{s_bytes} bytes" if not point.params and point.size_bytes else f"{point.label} ({s_bytes} bytes)"


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
