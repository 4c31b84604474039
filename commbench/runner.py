"""One rank's sweep: join the group, agree on the configuration, measure every case, write rows.

Used in-process under torchrun and by every rank that `commbench sweep` spawns itself.
"""

from __future__ import annotations

import datetime
import re
import uuid
from pathlib import Path
from typing import Any

import torch

import commbench
from commbench.backends import load_backend
from commbench.backends.base import Backend
from commbench.config import SweepConfig
from commbench.errors import UserError
from commbench.harness import CollArgs, Measurement, measure
from commbench.ops import load_op
from commbench.ops.base import Op
from commbench.ops.options import choose_variants
from commbench.progress import ProgressBoard
from commbench.resources import memory_error
from commbench.results import COLUMNS, RAW_COLUMNS, SCHEMA_VERSION, CsvAppender, check_writable, default_output, raw_path
from commbench.stats import Stats, bandwidth_gbps
from commbench import table
from commbench.watchdog import Watchdog, bounded


TRANSPORT_TIMEOUT_SLACK_S = 10.0


class PeerError(Exception):
    """Another rank reported the error; it prints it, this rank exits quietly."""


def agree(backend: Backend, cfg: SweepConfig, error: str | None) -> dict[str, Any]:
    """Compare the resolved configuration across ranks and share rank 0's run facts.

    A broken launch script that hands ranks different options is caught here, before the first
    collective, with the name of the option that differs.
    """
    mine = {"fingerprint": cfg.fingerprint(), "error": error, "node": backend.node_info(), "run_id": uuid.uuid4().hex[:12]}
    everyone = backend.all_gather_object(mine)
    if (message := _inconsistent(everyone)) is not None:
        if backend.rank == 0:  # one report, not one per rank
            raise UserError(message)
        raise PeerError(message)
    errors = [(e["node"]["rank"], e["error"]) for e in everyone if e["error"]]
    if errors:
        rank, message = errors[0]
        if rank == backend.rank:
            raise UserError(message)
        raise PeerError(message)
    nodes = [e["node"] for e in everyone]
    return {
        "run_id": everyone[0]["run_id"],
        "hosts": ";".join(sorted({n["host"] for n in nodes})),
        "node_ranks": ";".join(f"{n['rank']}@{n['host']}/{n['node_rank']}" for n in nodes),
    }


def _inconsistent(everyone: list[dict[str, Any]]) -> str | None:
    """Which options differ from rank 0's, and on which ranks; None when every rank agrees."""
    reference = everyone[0]["fingerprint"]
    odd: dict[str, list[int]] = {}
    for other in everyone[1:]:
        for option, digest in reference.items():
            if other["fingerprint"].get(option) != digest:
                odd.setdefault(option, []).append(other["node"]["rank"])
    if not odd:
        return None
    differs = "; ".join(f"{option} differs between rank 0 and rank{'s' if len(ranks) > 1 else ''} "
                        f"{', '.join(map(str, ranks[:8]))}{' ...' if len(ranks) > 8 else ''}"
                        for option, ranks in odd.items())  # fmt: skip
    return f"ranks were launched with different options: {differs}; launch every rank with the same command"


def resolve_output(cfg: SweepConfig, backend: Backend) -> Path:
    path = Path(cfg.output) if cfg.output else default_output(cfg.backend, backend.world_size)
    check_writable(path, cfg.overwrite)
    if cfg.raw:
        check_writable(raw_path(path), cfg.overwrite)
    cfg.output = str(path)  # under torchrun, rank 0's caller charts this file once the sweep ends
    return path


def run_rank(cfg: SweepConfig) -> int:
    """Run the sweep on this rank; returns the exit code (0 ok, 1 wrong results)."""
    ops: list[Op] = [load_op(name)(cfg.op_options) for name in cfg.ops]
    backend = load_backend(cfg.backend)()
    # The transport's own timeout is only a backstop: the watchdog fires first with the step's label and
    # a diagnosis, where NCCL's would abort the process with neither.
    backend.init(cfg.timeout + TRANSPORT_TIMEOUT_SLACK_S)
    try:
        return _sweep(cfg, backend, ops)
    finally:
        backend.close()


def _sweep(cfg: SweepConfig, backend: Backend, ops: list[Op]) -> int:
    lead = backend.rank == 0
    watchdog = Watchdog(cfg.timeout, backend.rank)
    board = ProgressBoard(backend.control_store(min(cfg.timeout, 30.0)), backend.rank, backend.world_size,
                          watchdog.poll_s, local=lambda: (backend.issued, watchdog.label))  # fmt: skip
    watchdog.diagnose = lambda: _timed_out(board, watchdog)
    board.start()
    watchdog.arm("agreeing on the configuration across ranks")
    path = None
    # Every rank checks its own host or device; rank 0 alone owns the output file.
    error = memory_error(ops, cfg.sizes, backend.world_size, backend.device)
    if lead and error is None:
        try:
            path = resolve_output(cfg, backend)
        except UserError as exc:
            error = exc.format_message()
    facts = agree(backend, cfg, error)
    watchdog.disarm()
    sink = Sink(cfg, backend, facts, path) if lead else None
    try:
        wrong_total = 0
        for op in ops:
            if sink:
                sink.section(op)
            for dtype in cfg.dtypes:
                wrong_total += _sweep_op(cfg, backend, op, dtype, watchdog, sink, board)
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
    return 1 if wrong_total else 0


def _sweep_op(cfg: SweepConfig, backend: Backend, op: Op, dtype: str, watchdog: Watchdog, sink: "Sink | None",
              board: ProgressBoard | None = None) -> int:  # fmt: skip
    """Every size x variant x phase of one op in one dtype; variants interleave per size for fairness."""
    window = cfg.window if cfg.mode == "nonblocking" else 1
    seen: set[tuple[str, str, int]] = set()
    wrong_total = 0

    def unavailable(variant: str) -> str | None:
        torch_dtype = getattr(torch, dtype)
        return backend.dtype_unavailable(torch_dtype) or op.dtype_unavailable(torch_dtype) or op.unavailable(variant, backend)

    chosen = choose_variants(op.variants, cfg.op_options)
    for variant in chosen:
        if (reason := unavailable(variant)) is not None and sink:
            sink.unavailable(op, variant, dtype, reason)
    variants = [v for v in chosen if unavailable(v) is None]
    for size in op.sizes(cfg.sizes):
        for variant in variants:
            args = CollArgs(backend=backend, dtype=getattr(torch, dtype), variant=variant)
            op.setup(args, size)
            for phase in op.phases:
                s_bytes = op.size_bytes(args, phase)
                if (variant, phase, s_bytes) in seen:  # two requested sizes rounded to one
                    continue
                seen.add((variant, phase, s_bytes))
                label = f"{op.name}/{variant}/{phase} {dtype} at {s_bytes} bytes"
                if sink:
                    sink.progress(label)
                if board is not None:
                    board.step(label)
                try:
                    m = measure(op, args, phase, iters=cfg.iters, warmup=cfg.warmup, window=window,
                                check=cfg.check, watchdog=watchdog, label=label)  # fmt: skip
                except RuntimeError as exc:
                    first = _first_sentence(exc)
                    raise CollectiveFailure(f"rank {backend.rank}: {label} failed: {first}") from exc
                if sink:
                    sink.measured(op, args, phase, dtype, s_bytes, m)
                wrong_total += max(m.wrong, 0)
    return wrong_total


class Sink:
    """Rank 0's outputs: the CSV (and raw samples), the printed table and the progress line."""

    def __init__(self, cfg: SweepConfig, backend: Backend, facts: dict[str, Any], path: Path) -> None:
        self.path = path
        self.world_size = backend.world_size
        self.writer = CsvAppender(path, COLUMNS, overwrite=cfg.overwrite)
        self.raw = CsvAppender(raw_path(path), RAW_COLUMNS, overwrite=cfg.overwrite) if cfg.raw else None
        self.done = 0
        self.base = {
            "schema_version": SCHEMA_VERSION, "run_id": facts["run_id"], "mode": cfg.mode,
            "world_size": backend.world_size, "backend": cfg.backend, "iters": cfg.iters, "warmup": cfg.warmup,
            "window": cfg.window if cfg.mode == "nonblocking" else 1, "hosts": facts["hosts"],
            "node_ranks": facts["node_ranks"], "torch_version": torch.__version__,
            "backend_version": backend.version(), "commbench_version": commbench.__version__, "command": cfg.command,
        }  # fmt: skip
        print(f"# commbench {commbench.__version__}: backend {cfg.backend} ({backend.version()}), "
              f"{backend.world_size} ranks on {facts['hosts']}, mode {cfg.mode}, {cfg.iters} iters, "
              f"{cfg.warmup} warm-up; results -> {path}", flush=True)  # fmt: skip

    def section(self, op: Op) -> None:
        print(table.header(f"{op.name} on {self.world_size} ranks"), flush=True)

    def progress(self, label: str) -> None:
        self.done += 1
        table.progress(self.done, label)

    def unavailable(self, op: Op, variant: str, dtype: str, reason: str) -> None:
        row = {**self.base, "timestamp": _now(), "op": op.name, "variant": variant, "dtype": dtype,
               "status": "unavailable", "note": reason}  # fmt: skip
        self.writer.write(row)
        print(table.line(row), flush=True)

    def measured(self, op: Op, args: CollArgs, phase: str, dtype: str, s_bytes: int, m: Measurement) -> None:
        row = _row(self.base, op, args, phase, dtype, s_bytes, m)
        self.writer.write(row)
        if self.raw is not None:
            key = {k: row[k] for k in ("run_id", "op", "variant", "phase", "dtype", "mode", "size_bytes")}
            self.raw.write_many(
                {**key, "iteration": i, "rank": r, "time_us": t}
                for r, samples in enumerate(m.per_rank_us)
                for i, t in enumerate(samples)
            )
        print(table.line(row), flush=True)

    def close(self) -> None:
        table.progress_done()
        for f in (self.writer, self.raw):
            if f is not None:
                f.close()

    def finish(self, wrong_total: int) -> None:
        if wrong_total:
            print(f"# FAILED: {wrong_total} wrong elements in total; see the 'wrong' column of {self.path}", flush=True)
        else:
            print(f"# done: results in {self.path}", flush=True)


class CollectiveFailure(Exception):
    """A collective raised (a peer died, a transport error): exit with the op, size and rank."""


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


def _row(base: dict[str, Any], op: Op, args: CollArgs, phase: str, dtype: str, s_bytes: int, m: Measurement) -> dict[str, Any]:
    stats = Stats.from_samples(m.samples_us)
    algbw, busbw = bandwidth_gbps(s_bytes, stats.time_us_p50, op.bus_factor(args.world_size))
    return {
        **base, "timestamp": _now(), "op": op.name, "variant": args.variant, "phase": phase, "dtype": dtype,
        "size_bytes": s_bytes, "count": args.count, "api": m.apis, "calls": round(m.calls, 3),
        **stats.as_dict(), "algbw_gbps": algbw, "busbw_gbps": busbw, "wrong": m.wrong,
        "status": "wrong" if m.wrong > 0 else "ok", "note": "" if m.wrong >= 0 else "check skipped",
    }  # fmt: skip


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
