"""commbench's own control traffic at scale (docs/scale.md): the per-row exchange reduces instead of
gathering, and gives the statistics the old all-gather gave, bit for bit; the heartbeat's store
traffic is bounded by the world size; one rank diagnoses for all."""

from __future__ import annotations

import dataclasses
import json
import random
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist

from commbench.ops.all_reduce import AllReduce
from commbench.ops.args import CollArgs
from commbench.ops.spec import Point
from commbench.results.budget import Budget
from commbench.results.measurement import Measurement
from commbench.run.harness import TimedCase, share_blocks
from commbench.run.heartbeat import STORE_WRITES_PER_S, Heartbeat, RankRecord
from commbench.run.overlap import ComputeKernel
from commbench.run.sink import Sink
from commbench.run.watchdog import Watchdog
from tests.support.distributed import run_ranks

# -- the old reduction, as commbench 01ee5cb ran it after every block ----------------------------


@dataclasses.dataclass
class _OldCase:
    """What TimedCase held after its blocks when every rank all-gathered every rank's samples."""

    rounds_us: list[list[float]] = dataclasses.field(default_factory=list)
    per_rank_us: list[list[float]] = dataclasses.field(default_factory=list)
    compute_rounds_us: list[list[float]] = dataclasses.field(default_factory=list)
    overlapped_rounds_us: list[list[float]] = dataclasses.field(default_factory=list)
    wrong: int = -1

    def block(self, gathered: list[Any], round_index: int, check: bool) -> None:
        """The old TimedCase.block after its timed loop, on the all-gathered (samples, wrong, overlap)."""
        self.per_rank_us += [[] for _ in range(len(gathered) - len(self.per_rank_us))]
        for rank, (samples, _, _) in enumerate(gathered):
            self.per_rank_us[rank].extend(samples)
        _old_extend_round(self.rounds_us, round_index, [g[0] for g in gathered])
        if gathered[0][2] is not None:
            _old_extend_round(self.compute_rounds_us, round_index, [g[2][0] for g in gathered])
            _old_extend_round(self.overlapped_rounds_us, round_index, [g[2][1] for g in gathered])
        if check:
            self.wrong = sum(g[1] for g in gathered)


def _old_extend_round(rounds: list[list[float]], round_index: int, per_rank: list[list[float]]) -> None:
    if len(rounds) <= round_index:
        rounds.append([])
    rounds[round_index].extend(max(column) for column in zip(*per_rank))


def _bits(rounds: list[list[float]]) -> list[list[str]]:
    """Floats as their exact bits (float.hex tells -0.0 from 0.0, which == does not)."""
    return [[t.hex() for t in block] for block in rounds]


def _row(case: Any) -> dict[str, Any]:
    """Rank 0's CSV row of a case's samples (run facts and timestamp left out)."""
    sink = Sink.__new__(Sink)
    sink.base = {}
    m = Measurement(
        op="all_reduce",
        variant="flat",
        phase="comm",
        dtype="float32",
        size_bytes=4096,
        count=1024,
        bus_factor=1.5,
        rounds_us=case.rounds_us,
        per_rank_us=case.per_rank_us,
        wrong=case.wrong,
        calls=1.0,
        apis="all_reduce",
        window=1,
        compute_rounds_us=case.compute_rounds_us,
        overlapped_rounds_us=case.overlapped_rounds_us,
        compute_flops=1024.0 if case.compute_rounds_us else None,
    )
    row = sink.row(m)
    row.pop("timestamp")
    return row


def _synthetic(rank: int, block: int, n: int) -> list[float]:
    """Adversarial recorded samples: magnitudes from 1e-3 to 1e7 us, ties across ranks, subnormals."""
    rng = random.Random(1000 * block + rank)
    values = [rng.choice([1.0, 2.0**-1074, 3.5]) if i % 5 == 0 else 10 ** rng.uniform(-3, 7) for i in range(n)]
    return [v * (1 + 2**-52) if rank % 2 and i % 7 == 0 else v for i, v in enumerate(values)]


def _old_and_new(backend) -> dict[str, Any]:
    """A real case (all_reduce at 4 KiB, --overlap, two rounds, checked) on this rank; every block's
    recorded samples also go through the old all-gather reduction. Then synthetic blocks alike."""
    op = AllReduce()
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(4096))
    watchdog = Watchdog(60, backend.rank)
    new = TimedCase(
        op,
        args,
        "comm",
        window=1,
        watchdog=watchdog,
        label="scale",
        keep_per_rank=True,
        compute_for=lambda case, target_s: ComputeKernel(16, backend.device, torch.float32),
    )
    old = _OldCase()
    real_share = new._share_block

    def share_both(local_us, round_index, overlap, wrong, share=True):  # the recorded samples, both ways
        gathered = backend.all_gather_object((local_us, -1 if wrong is None else wrong, overlap))
        old.block(gathered, round_index, wrong is not None)
        real_share(local_us, round_index, overlap, wrong, share)

    new._share_block = share_both
    new.warm_up(Budget(iters=6 + 5, warmup=1))
    for round_index, iters in enumerate((6, 5)):
        new.block(iters, round_index, check=round_index == 1)
    real = (new, old)

    def synthetic_case(label: str) -> TimedCase:
        return TimedCase(op, args, "comm", window=1, watchdog=watchdog, label=label, keep_per_rank=True)

    # One case sharing each block alone; then three sharing each round's blocks in one exchange
    # (the rotation's share_blocks), of different lengths, one without overlap samples, one whose
    # check finds nothing: each must hold what it would have alone.
    synthetic_new, synthetic_old = synthetic_case("synthetic"), _OldCase()
    together = {name: (synthetic_case(name), _OldCase()) for name in ("together", "plain", "right")}
    for block, (round_index, n) in enumerate([(0, 40), (1, 37), (1, 3), (2, 50)]):
        for k, (name, (new_case, old_case)) in enumerate(
            [("synthetic", (synthetic_new, synthetic_old)), *together.items()]
        ):
            local = _synthetic(backend.rank, block + 100 * k, n + k)
            overlap = (
                None
                if name == "plain"
                else (_synthetic(backend.rank, block + 10, n + k), _synthetic(backend.rank, block + 20, n + k))
            )
            wrong = (0 if name == "right" else backend.rank * 3) if block == 3 else None
            new_case._share_block(local, round_index, overlap, wrong, share=name == "synthetic")
            gathered = backend.all_gather_object((local, -1 if wrong is None else wrong, overlap))
            old_case.block(gathered, round_index, wrong is not None)
        share_blocks([case for case, _ in together.values()])
    result: dict[str, Any] = {}
    for name, (n, o) in {"real": real, "synthetic": (synthetic_new, synthetic_old), **together}.items():
        result[name] = {
            field: (_bits(getattr(n, field)), _bits(getattr(o, field)))
            for field in ("rounds_us", "compute_rounds_us", "overlapped_rounds_us")
        }
        result[name]["wrong"] = (n.wrong, o.wrong)
        result[name]["per_rank_us"] = (_bits(n.per_rank_us), _bits(o.per_rank_us) if backend.rank == 0 else [])
        # repr: exact floats, and a NaN column (no bandwidth) compares equal to itself.
        result[name]["row"] = (repr(_row(n)), repr(_row(o))) if backend.rank == 0 else (None, None)
    return result


@pytest.mark.slow
def test_statistics_are_bit_identical_to_the_old_all_gather_on_recorded_samples():
    results = run_ranks(_old_and_new, 4)
    for rank, result in enumerate(results):
        for name, fields in result.items():
            for field, (new, old) in fields.items():
                assert new == old, f"rank {rank}, {name} samples: {field} differs from the old reduction"
            if name in ("real", "right"):
                assert fields["wrong"][0] == 0 and len(fields["rounds_us"][0]) == (2 if name == "real" else 3)
            else:
                assert fields["wrong"][0] == 3 * (0 + 1 + 2 + 3)
            # Rank 0 alone holds every rank's samples; the others hold none.
            assert len(fields["per_rank_us"][0]) == (4 if rank == 0 else 0)


def _without_raw(backend) -> tuple[int, int]:
    """Without keep_per_rank (no --raw) no rank holds per-rank samples, yet every rank has the maxima."""
    op = AllReduce()
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, Point.of_size(64))
    case = TimedCase(op, args, "comm", window=1, watchdog=Watchdog(60, backend.rank), label="x")
    case.warm_up(Budget(iters=4, warmup=0))
    case.block(4, 0, check=True)
    return len(case.per_rank_us), len(case.samples_us)


@pytest.mark.slow
def test_without_raw_no_rank_keeps_per_rank_samples():
    assert run_ranks(_without_raw, 2) == [(0, 4), (0, 4)]


# -- the heartbeat's store traffic ---------------------------------------------------------------


class _CountingStore:
    """A HashStore that counts the requests each kind of call makes."""

    def __init__(self) -> None:
        self.store = dist.HashStore()
        self.requests: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.store, name)

        def counted(*args: Any) -> Any:
            self.requests[name] = self.requests.get(name, 0) + 1
            return call(*args)

        return counted


def test_the_heartbeat_interval_keeps_the_store_under_its_budget_at_any_world_size():
    for world in (2, 16, 1024, 8192, 65536):
        board = Heartbeat(None, 0, world, 1.0, local=lambda: (0, ""))
        # Every rank writes at most once per gap: all of them together, at most the budget.
        assert world / board.gap_s <= STORE_WRITES_PER_S
        assert board.interval_s >= max(1.0, board.gap_s)
        # The diagnosis may take its two reads a stale period apart, and reading every record.
        assert board.diagnosis_s > board.stale_s > 2 * board.interval_s


def test_case_starts_never_write_faster_than_the_ranks_share_of_the_store():
    store = _CountingStore()
    board = Heartbeat(store, 0, 8192, 1.0, local=lambda: (0, "idle"))  # a gap of 41 s
    board.start()
    for case in range(100):
        board.step(f"case {case}")
    deadline = time.monotonic() + 30
    while store.requests.get("set", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # room for a (wrong) third write
    record = json.loads(store.store.get("0"))
    assert store.requests["set"] == 2, "one record at the start, one for the first case: then the gap"
    assert record["label"] == "case 99"  # the newest case when the thread woke, never a stale one
    board.finish("finished")
    assert json.loads(store.store.get("0"))["state"] == "finished"


def test_one_rank_diagnoses_and_the_others_read_its_diagnosis():
    store = _CountingStore()
    label = "all_gather/flat/comm float32 at 4096 bytes"
    store.store.set("1", json.dumps(dataclasses.asdict(RankRecord(beat=7, issued=12, label=label))))  # gone
    store.store.set("2", json.dumps(dataclasses.asdict(RankRecord(beat=1, issued=11, label=label))))
    boards = [Heartbeat(store, r, 4, 0.05, local=lambda: (12, label), stale_s=0.3) for r in (0, 3)]

    def between_reads(seconds: float) -> None:  # rank 2 beats on, one call short
        store.store.set("2", json.dumps(dataclasses.asdict(RankRecord(beat=2, issued=11, label=label))))

    first = boards[0].diagnose(wait=between_reads)
    reads = store.requests["get"]
    second = boards[1].diagnose(wait=time.sleep)
    assert "rank 1 is gone" in first and "rank 2 is behind: it issued 11 collectives, the others 12" in first
    assert second == first
    assert store.requests["get"] == reads + 1, "the second rank read the one shared diagnosis, no record"
