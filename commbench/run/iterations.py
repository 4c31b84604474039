"""One visit of a case in the rotation: its warm-up and its blocks (samples per round) on the first, one block of
samples, --precision's early stop, the correctness check on the last."""

from __future__ import annotations

from commbench.results.stats import Stats
from commbench.run.config import SweepConfig
from commbench.run.eta import SweepProgress
from commbench.run.harness import TimedCase, blocks
from commbench.run.overlap import AUTO, ComputeKernel, calibrate, compute_dtype, seconds_of_kernel, side_for
from commbench.run.phases import PhaseClock
from commbench.run.plan import RotationEntry

# --precision checks the interval this many times per block (the ranks share samples after each
# chunk anyway, so the check costs no extra exchange beyond the chunk's).
PRECISION_CHUNKS = 4


def visit(
    cfg: SweepConfig, entry: RotationEntry, round_index: int, progress: SweepProgress, phases: PhaseClock | None = None
) -> bool:
    """One visit of a case: its warm-up and blocks on the first, one block, the check on the last.
    True when the case is done. phases: the sweep's clock, which times the progress estimate's share."""
    phases = PhaseClock() if phases is None else phases
    case = entry.case
    if round_index == 0:
        budget = cfg.budget
        entry.sample_s = case.warm_up(budget, cfg.check)
        iters = budget.samples(entry.sample_s)
        entry.blocks = blocks(iters, cfg.rounds)
        # --overlap times the op, the matmul and both together: three samples per iteration.
        with phases.phase("progress"):
            progress.warmed_up(id(entry), case.op.name, entry.work, iters, entry.sample_s * (3 if cfg.overlap else 1))
    last = round_index == len(entry.blocks) - 1
    chunks = (
        [entry.blocks[round_index]] if cfg.precision is None else blocks(entry.blocks[round_index], PRECISION_CHUNKS)
    )
    for i, chunk in enumerate(chunks):
        final = last and i == len(chunks) - 1
        # --precision decides on the shared samples after each chunk; otherwise the rotation shares
        # the round's blocks of every case at once, after the round.
        case.block(chunk, round_index, check=cfg.check and final, share=cfg.precision is not None)
        with phases.phase("progress"):
            progress.ran(id(entry), chunk)
        if not final and cfg.precision is not None and precise(case, cfg):
            if cfg.check:
                case.check()
            with phases.phase("progress"):
                progress.finish(id(entry))
            return True
    if last:
        with phases.phase("progress"):
            progress.finish(id(entry))
    return last


def compute_kernel(cfg: SweepConfig, case: TimedCase, target_s: float) -> ComputeKernel:
    """--overlap's matmul for a case: --compute FLOP, or (auto) about as long as one sample of the
    op (target_s, the median of its first block, agreed across ranks); every rank gets the same."""
    backend, dtype = case.backend, case.args.dtype
    if cfg.compute != AUTO:
        return ComputeKernel(side_for(float(cfg.compute)), backend.device, compute_dtype(dtype))
    return calibrate(
        target_s, backend.device, dtype, case.agree_max, seconds_of_kernel(backend.device, backend.synchronize)
    )


def precise(case: TimedCase, cfg: SweepConfig) -> bool:
    """--precision: the pooled mean's (the headline's) interval is narrow enough. Every rank holds the same samples, so
    every rank decides the same. At least two rounds first (where more are planned), so that the
    rounds can still disagree, and at least --min-iters samples."""
    if len(case.rounds_us) < min(2, cfg.rounds) or case.iters < cfg.min_iters:
        return False
    stats = Stats.from_samples(case.samples_us)
    return stats.relative_width <= cfg.precision
