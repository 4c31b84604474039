"""The measurements of a node sweep, run on every rank: concurrent pair exchanges in subgroups,
and the per-rank compute probe.

A round is a list of rank groups that exchange at the same time. Each group gets its own process
group (every rank creates every group of the round, in the same order, as torch.distributed
requires); a rank in no group of the round sits it out in a group of its own. Where the transport
splits communicators (NCCL, its device bound), the round's groups are one `split_group` call;
elsewhere one `new_group` per group (Gloo). A round that forms the groups the last one formed (the
size probe's repeats, then the first round) keeps them instead of creating them again. In a group
[a0, b0, a1, b1, ...] the sendrecv op's `pair` variant exchanges a_i with b_i in both directions,
as a training job's inter-node traffic does. The harness times it (barrier across every rank
before each sample, so the round's pairs start together), and every rank gathers every rank's
samples, so every rank computes the same per-pair statistics and the same verdicts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from commbench.backends.base import Backend
from commbench.ops import build_ops
from commbench.ops.args import CollArgs
from commbench.ops.spec import Point
from commbench.results.budget import Budget
from commbench.results.stats import Stats, bandwidth_gbps
from commbench.run.config import SweepConfig
from commbench.run.groups import group_view
from commbench.run.harness import TimedCase, blocks
from commbench.run.overlap import ComputeKernel, calibrate, seconds_of_kernel, side_for
from commbench.run.rotation import in_rounds
from commbench.run.watchdog import Watchdog

EXCHANGE_OP = "sendrecv"
EXCHANGE_VARIANT = "pair"


@dataclass(frozen=True)
class Exchange:
    """One group's exchange at one size: its p50 (the slowest rank's time per iteration) and interval."""

    ranks: tuple[int, ...]
    size_bytes: int
    stats: Stats
    iters: int
    wrong: int  # wrong elements in the check, over every rank of the round (-1: not checked)

    @property
    def busbw_gbps(self) -> float:
        """Bytes each rank sent per second (the exchange's busbw: sendrecv's bus factor is 1)."""
        return bandwidth_gbps(self.size_bytes, self.stats.time_us_p50, 1.0)[1]


class Rounds:
    """Runs rounds of concurrent exchanges on this rank's backend."""

    def __init__(
        self,
        backend: Backend,
        cfg: SweepConfig,
        watchdog: Watchdog,
        op: str = EXCHANGE_OP,
        variant: str = EXCHANGE_VARIANT,
    ) -> None:
        self.backend, self.cfg, self.watchdog = backend, cfg, watchdog
        self.op = build_ops((op,), {}, (variant,))[0]
        self.variant = variant
        self.created = 0
        # The groups the last run formed, kept until a run forms others: (every group, this rank's
        # process group, its ranks). Held ones are freed by the next creation or the backend's close.
        self._held: tuple[list[list[int]], object, list[int]] | None = None
        self.creation_s: list[float] = []  # seconds each creation took on this rank (bench/isolate_groups.py)

    def _my_group(self, groups: Sequence[Sequence[int]]) -> tuple[object, list[int]]:
        busy = {r for g in groups for r in g}
        everyone = [sorted(g) for g in groups] + [[r] for r in range(self.backend.world_size) if r not in busy]
        if self._held is not None and self._held[0] == everyone:
            return self._held[1], self._held[2]
        self._release()
        self.watchdog.arm(f"creating the process groups of round {self.created + 1}")
        began = time.perf_counter()
        mine = split(everyone)
        self.creation_s.append(time.perf_counter() - began)
        self.watchdog.disarm()
        self.created += 1
        ranks = next(g for g in everyone if self.backend.rank in g)
        self._held = (everyone, mine, ranks)
        return mine, ranks

    def _release(self) -> None:
        """Free the held groups (their connections) once every rank is done with them."""
        import torch.distributed as dist

        if self._held is None:
            return
        group, self._held = self._held[1], None
        self.watchdog.arm(f"freeing the process groups of round {self.created}")
        self.backend.barrier()
        self.watchdog.disarm()
        if group is not None:
            dist.destroy_process_group(group)

    def run(
        self,
        units: Sequence[Sequence[int]],
        sizes: Sequence[int],
        label: str,
        iters: int | None = None,
        groups: Sequence[Sequence[int]] | None = None,
    ) -> list[list[Exchange]]:
        """Every unit's exchange at every size, all units at once; per unit, one Exchange per size.

        A unit is the ranks whose slowest time per iteration is one result (a pair of hosts: the
        ranks of both); groups are the process groups the op runs in (default: one per unit). A
        pair of hosts runs one group per local rank index, [a_i, b_i], each of which the pair op
        exchanges both ways.

        iters None: the configuration's (--iters, or auto from --time-per-size); the cases are
        visited in --rounds interleaved blocks, as a sweep visits its cases.
        """
        group, ranks = self._my_group(units if groups is None else groups)
        view = group_view(self.backend, group, ranks)
        cases = []
        for size in sizes:
            args = CollArgs(backend=view, dtype=torch.float32, variant=self.variant)
            self.op.setup(args, Point.of_size(size))
            cases.append(
                TimedCase(
                    self.op,
                    args,
                    "comm",
                    window=1,
                    watchdog=self.watchdog,
                    label=f"{label} at {size} bytes",
                    keep_per_rank=True,
                )
            )
        case_blocks = []
        cfg = self.cfg
        # A count given here (the size probe's) runs in one block, after one warm-up sample.
        budget = cfg.budget if iters is None else Budget(iters=iters, warmup=1)
        for case in cases:
            # The check stays after the timed blocks here (a fresh iteration, _check_here), not on the
            # first warm-up sample as a sweep's: on a host under a CPU quota the check's work would spend
            # the quota just before the pair's samples and read as a slow link.
            count = budget.samples(case.warm_up(budget))
            case_blocks.append(blocks(count, cfg.rounds if iters is None else 1))
        # Visited in rounds as a sweep visits its cases (every warm-up first, as the exchanges go together).
        pending = [(case, per_round) for case, per_round in zip(cases, case_blocks) if per_round]
        for round_index, visit in in_rounds(pending, max(len(p) for p in case_blocks)):
            case, per_round = visit
            last = round_index == len(per_round) - 1
            case.block(per_round[round_index], round_index, check=cfg.check and last)
            if last:
                pending[:] = [other for other in pending if other is not visit]
        # Rank 0 alone holds every rank's samples (gathered block by block); every rank needs the
        # results, since what is measured next depends on them.
        found = [[_exchange(case, unit) for case in cases] for unit in units] if self.backend.rank == 0 else None
        return self.backend.all_gather_object(found)[0]


def split(everyone: list[list[int]]) -> object:
    """This rank's process group of a partition of every rank, made on every rank alike.

    torch's split_group (one communicator split for the whole partition) needs a default group
    with a bound device and a backend that splits: NCCL with device_id, as NcclBackend binds it
    (distributed_c10d.py: "No device associated with the default pg, not safe to split any process
    groups" otherwise). Gloo's default group has no bound device, so there (and on a torch without
    split_group) each group is a new_group, one after another, through new_subgroups_by_enumeration.
    """
    import torch.distributed as dist

    world = dist.distributed_c10d._get_default_group()
    if hasattr(dist, "split_group") and getattr(world, "bound_device_id", None) is not None:
        return dist.split_group(split_ranks=everyone)
    mine, _ = dist.new_subgroups_by_enumeration(everyone)
    return mine


def _exchange(case: TimedCase, ranks: Sequence[int]) -> Exchange:
    per_iter = [max(column) for column in zip(*(case.per_rank_us[r] for r in ranks))]
    # The bytes one rank sends, as the op rounded the request to whole elements.
    sent = case.op.size_bytes(case.args, "comm")
    return Exchange(tuple(ranks), sent, Stats.from_samples(per_iter), len(per_iter), case.wrong)


@dataclass(frozen=True)
class ComputeProbe:
    """Every rank's matmul rate (GFLOP/s, the median of its samples' rates), its samples' times per
    matmul and the kernel's size."""

    flops: float
    rates: list[float]  # by rank
    stats: list[Stats]  # by rank: time per matmul, one value per sample
    kernel: ComputeKernel  # the calibrated matmul, for re-timings of the same work


PROBE_TARGET_S = 0.01  # one matmul's time on the median rank
# Each sample runs matmuls back to back for at least this long. A CPU quota (a cgroup's cpu.max, a
# container's --cpus) lets a process run for its share of every scheduler period (CFS: 100 ms by
# default) and then stops it until the next one; a sample shorter than what is left of the share
# runs at full speed, so a throttled rank's fastest short sample looks healthy. A window of two
# periods or more always includes the stop.
PROBE_WINDOW_S = 0.2
# The rate is the median of these samples' rates: a burst of contention on the machine slows one
# sample, a quota slows all of them.
PROBE_SAMPLES = 5
# The smallest matmul the probe times: a calibration on a busy machine can pick one so small that
# a call's fixed cost, not the arithmetic, sets its time.
PROBE_MIN_FLOP = 1e8


def compute_probe(
    backend: Backend, watchdog: Watchdog, only: Collection[int] | None = None, kernel: ComputeKernel | None = None
) -> ComputeProbe:
    """The calibrated matmul of --overlap, timed on every rank at once (only None), or on the ranks
    `only` while the others wait (a suspect beside its reference: free of the contention of every
    other rank, and under the same conditions as the reference at the same moment). Each sample is
    as many matmuls as fit in PROBE_WINDOW_S, back to back; rates in GFLOP/s. kernel None: calibrated
    here (every rank takes part), else that kernel again."""
    with one_thread_on_cpu(backend.device):
        if kernel is None:
            watchdog.arm("calibrating the compute probe")
            kernel = calibrate(
                PROBE_TARGET_S,
                backend.device,
                torch.float32,
                lambda value: statistics.median(backend.all_gather_object(value)),
                seconds_of_kernel(backend.device, backend.synchronize),
            )
            if kernel.flops < PROBE_MIN_FLOP:  # calibrated while the machine was busy: too small to time
                kernel = ComputeKernel(side_for(PROBE_MIN_FLOP), kernel.device, kernel.dtype)
        watchdog.arm("the compute probe" + ("" if only is None else f" on ranks {sorted(only)}"))
        backend.barrier()
        mine = []
        if only is None or backend.rank in only:
            for _ in range(PROBE_SAMPLES):
                mine.append(_window_sample(kernel, backend.synchronize))
    everyone = backend.all_gather_object(mine)
    watchdog.disarm()
    stats = [Stats.from_samples(s) if s else None for s in everyone]
    # The median sample: a quota or a slow device slows every sample, a neighbour's burst only some.
    rates = [kernel.flops / (s.time_us_p50 * 1e3) if s is not None else float("nan") for s in stats]
    return ComputeProbe(kernel.flops, rates, stats, kernel)


@contextmanager
def one_thread_on_cpu(device: Any) -> Iterator[None]:
    """On CPU, the probe's matmul runs on one intra-op thread: it compares the ranks' cores. With
    torch's default of one thread per core, ranks that share cores (several ranks per host, hosts
    in namespaces on one machine) oversubscribe them, and a matmul's threads wait on each other for
    whole scheduler slices: the rates measured that scheduling, not the cores (a healthy rank read
    40x slower than a throttled one beside it). A quota below one core slows one thread as much."""
    if getattr(device, "type", "cpu") != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _window_sample(kernel: ComputeKernel, synchronize: Callable[[], None]) -> float:
    """Microseconds per matmul over at least PROBE_WINDOW_S of matmuls back to back."""
    synchronize()
    start = time.perf_counter()
    runs = 0
    while True:
        kernel.run()
        runs += 1
        synchronize()  # a device queues kernels: the clock is read once they have run
        took = time.perf_counter() - start
        if took >= PROBE_WINDOW_S:
            return took / runs * 1e6
