"""One rank's sweep: join the group, agree on the configuration, measure every case, write rows.

Used in-process under torchrun and by every rank that `commbench sweep` spawns itself.
"""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path
from typing import Any

import torch

import commbench
from commbench.backends import load_backend
from commbench.backends.base import Backend
from commbench.config import SweepConfig
from commbench.errors import UserError
from commbench.harness import CollArgs, measure
from commbench.ops import load_op
from commbench.ops.base import Op
from commbench.results import COLUMNS, RAW_COLUMNS, SCHEMA_VERSION, CsvAppender, check_writable, default_output, raw_path
from commbench.stats import Stats, bandwidth_gbps
from commbench import table
from commbench.watchdog import Watchdog


class WrongResults(Exception):
    """The correctness check found wrong elements (exit code 1)."""


class PeerError(Exception):
    """Another rank reported the error; it prints it, this rank exits quietly."""


def agree(backend: Backend, cfg: SweepConfig, error: str | None) -> dict[str, Any]:
    """Compare the resolved configuration across ranks and share rank 0's run facts.

    A broken launch script that hands ranks different options is caught here, before the first
    collective, with the name of the option that differs.
    """
    mine = {"fingerprint": cfg.fingerprint(), "error": error, "node": backend.node_info(), "run_id": uuid.uuid4().hex[:12]}
    everyone = backend.all_gather_object(mine)
    for other in everyone[1:]:
        differs = [k for k, v in everyone[0]["fingerprint"].items() if other["fingerprint"].get(k) != v]
        if differs:
            message = (f"ranks were launched with different options: {', '.join(differs)} differ between rank 0 "
                       f"and rank {other['node']['rank']}; launch every rank with the same command")
            raise UserError(message)
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


def resolve_output(cfg: SweepConfig, backend: Backend) -> Path:
    path = Path(cfg.output) if cfg.output else default_output(cfg.backend, backend.world_size)
    check_writable(path, cfg.overwrite)
    if cfg.raw:
        check_writable(raw_path(path), cfg.overwrite)
    return path


def run_rank(cfg: SweepConfig) -> int:
    """Run the sweep on this rank; returns the exit code (0 ok, 1 wrong results)."""
    ops: list[Op] = [load_op(name)(cfg.op_options) for name in cfg.ops]
    backend = load_backend(cfg.backend)()
    backend.init(cfg.timeout)
    try:
        return _sweep(cfg, backend, ops)
    finally:
        backend.close()


def _sweep(cfg: SweepConfig, backend: Backend, ops: list[Op]) -> int:
    lead = backend.rank == 0
    watchdog = Watchdog(cfg.timeout, backend.rank)
    watchdog.arm("agreeing on the configuration across ranks")
    path, error = None, None
    if lead:
        try:
            path = resolve_output(cfg, backend)
        except UserError as exc:
            error = exc.format_message()
    facts = agree(backend, cfg, error)
    watchdog.disarm()

    writer = CsvAppender(path, COLUMNS) if lead else None
    raw = CsvAppender(raw_path(path), RAW_COLUMNS) if lead and cfg.raw else None
    if lead:
        print(f"# commbench {commbench.__version__}: backend {cfg.backend} ({backend.version()}), "
              f"{backend.world_size} ranks on {facts['hosts']}, mode {cfg.mode}, {cfg.iters} iters, "
              f"{cfg.warmup} warm-up; results -> {path}", flush=True)
    base = {
        "schema_version": SCHEMA_VERSION, "run_id": facts["run_id"], "mode": cfg.mode,
        "world_size": backend.world_size, "backend": cfg.backend, "iters": cfg.iters, "warmup": cfg.warmup,
        "window": cfg.window if cfg.mode == "nonblocking" else 1, "hosts": facts["hosts"],
        "node_ranks": facts["node_ranks"], "torch_version": torch.__version__,
        "backend_version": backend.version(), "commbench_version": commbench.__version__, "command": cfg.command,
    }  # fmt: skip
    window = cfg.window if cfg.mode == "nonblocking" else 1
    total = sum(len(op.variants) * len(op.phases) * len(op.sizes(cfg.sizes)) for op in ops) * len(cfg.dtypes)
    done, wrong_total = 0, 0
    try:
        for op in ops:
            if lead:
                print(table.header(f"{op.name} on {backend.world_size} ranks"), flush=True)
            for dtype_name in cfg.dtypes:
                dtype = getattr(torch, dtype_name)
                reported_unavailable: set[str] = set()
                seen: set[tuple[str, str, int]] = set()
                for size in op.sizes(cfg.sizes):
                    for variant in op.variants:
                        args = CollArgs(backend=backend, dtype=dtype, variant=variant)
                        reason = op.unavailable(variant, backend)
                        if reason is not None:
                            done += len(op.phases)
                            if lead and variant not in reported_unavailable:
                                row = {**base, "op": op.name, "variant": variant, "phase": "", "dtype": dtype_name,
                                       "status": "unavailable", "note": reason, "timestamp": _now()}
                                writer.write(row)
                                print(table.line(row), flush=True)
                            reported_unavailable.add(variant)
                            continue
                        op.setup(args, size)
                        for phase in op.phases:
                            done += 1
                            s_bytes = op.size_bytes(args, phase)
                            if (variant, phase, s_bytes) in seen:  # two requested sizes rounded to one
                                continue
                            seen.add((variant, phase, s_bytes))
                            label = f"{op.name}/{variant}/{phase} {dtype_name} at {s_bytes} bytes (rank {backend.rank})"
                            if lead:
                                table.progress(done, total, label)
                            try:
                                m = measure(op, args, phase, iters=cfg.iters, warmup=cfg.warmup, window=window,
                                            check=cfg.check, watchdog=watchdog, label=label)
                            except RuntimeError as exc:
                                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                                raise CollectiveFailure(f"rank {backend.rank}: {label} failed: {first}") from exc
                            if not lead:
                                continue
                            row = _row(base, op, args, phase, dtype_name, s_bytes, m)
                            writer.write(row)
                            if raw is not None:
                                raw.write_many(
                                    {"run_id": base["run_id"], **{k: row[k] for k in ("op", "variant", "phase", "dtype", "mode", "size_bytes")},
                                     "iteration": i, "rank": r, "time_us": t}
                                    for r, samples in enumerate(m.per_rank_us) for i, t in enumerate(samples)
                                )
                            print(table.line(row), flush=True)
                            wrong_total += max(m.wrong, 0)
    finally:
        for f in (writer, raw):
            if f is not None:
                f.close()
    if lead:
        table.progress(total, total, "")
        if wrong_total:
            print(f"# FAILED: {wrong_total} wrong elements in total; see the 'wrong' column of {path}", flush=True)
        else:
            print(f"# done: results in {path}", flush=True)
    return 1 if wrong_total else 0


class CollectiveFailure(Exception):
    """A collective raised (a peer died, a transport error): exit with the op, size and rank."""


def _row(base: dict[str, Any], op: Op, args: CollArgs, phase: str, dtype: str, s_bytes: int, m: Any) -> dict[str, Any]:
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
