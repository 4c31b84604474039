"""SyncBatchNorm is exact: every strategy, every case of issue 4, on 2 and 3 real Gloo ranks, against
torch.nn.BatchNormXd applied (in float64) to the concatenation of every rank's batch.

Tolerances by dtype: tests/support/tolerance.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from commbench.syncbn import STRATEGY_NAMES, SyncBatchNorm
from commbench.syncbn.strategies import STRATEGIES
from tests.support.distributed import run_ranks
from tests.support.tolerance import GRAD_SUM_TOL, STAT_TOL, VALUE_TOL, close

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api


@dataclass(frozen=True)
class Case:
    """One configuration; batches[r % len] is rank r's batch size."""

    name: str
    batches: tuple[int, ...]
    rest: tuple[int, ...]  # (C, *spatial)
    dtype: str = "float64"
    channels_last: bool = False
    affine: bool = True
    track: bool = True
    momentum: float | None = 0.1
    steps: int = 1
    eval_after: bool = False
    group: str = "backend"  # what process_group is: the commbench backend, "default" (None) or "world" (a ProcessGroup)


CASES = [
    Case("uneven batches, then eval", (3, 5, 2), (4, 3, 3), steps=2, eval_after=True),
    Case("empty rank", (3, 0, 2), (4, 3, 3)),
    Case("2D, affine=False", (6, 4, 3), (5,), affine=False),
    Case("3D float32", (4, 3, 2), (3, 7), dtype="float32"),
    Case("5D float32", (2, 1, 3), (3, 2, 3, 2), dtype="float32"),
    Case("channels_last 4D float32", (2, 3, 2), (3, 4, 4), dtype="float32", channels_last=True),
    Case("channels_last 5D", (2, 1, 2), (3, 2, 2, 3), channels_last=True),
    Case("float16 input", (4, 2, 3), (3, 4, 4), dtype="float16"),
    Case("bfloat16 input", (4, 2, 3), (3, 4, 4), dtype="bfloat16"),
    Case("track_running_stats=False, then eval", (3, 2, 4), (3, 3, 3), track=False, eval_after=True),
    Case("momentum=None", (3, 4, 2), (3, 2, 2), momentum=None, steps=3),
    Case("one sample per rank", (1,), (6,)),
    Case("default process group", (2, 3, 1), (3, 2, 2), dtype="float32", group="default"),
    Case("a torch ProcessGroup", (2, 3, 1), (3, 2, 2), group="world"),
]


class CountingComm:
    """Wraps a backend and counts calls and S bytes (an all-gather by its output, an all-reduce by its buffer)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.rank, self.world_size = inner, inner.rank, inner.world_size
        self.calls = self.bytes = 0

    def _count(self, *tensors: torch.Tensor) -> None:
        self.calls += 1
        self.bytes += sum(t.numel() * t.element_size() for t in tensors)

    def all_gather_flat(self, output, input):
        self._count(output)
        return self.inner.all_gather_flat(output, input)

    def all_gather_list(self, outputs, input):
        self._count(*outputs)
        return self.inner.all_gather_list(outputs, input)

    def all_reduce(self, tensor):
        self._count(tensor)
        return self.inner.all_reduce(tensor)

    def all_gather_group(self, outputs, inputs):
        self._count(*outputs)
        return self.inner.all_gather_group(outputs, inputs)

    def all_reduce_group(self, tensors):
        self._count(*tensors)
        return self.inner.all_reduce_group(tensors)

    def take(self) -> tuple[int, int]:
        taken = (self.calls, self.bytes)
        self.calls = self.bytes = 0
        return taken


def _reference_cls(ndim: int) -> type[torch.nn.Module]:
    return {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[ndim]


def _batch(case: Case, case_no: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank-dependent input and grad_output, rounded to the case's dtype (the same on every rank)."""
    g = torch.Generator().manual_seed(10_000 * case_no + 100 * step + rank)
    shape = (case.batches[rank % len(case.batches)], *case.rest)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * (1 + 0.5 * rank) + 0.25 * rank
    dy = torch.randn(shape, generator=g, dtype=torch.float64)
    dtype = getattr(torch, case.dtype)
    return x.to(dtype), dy.to(dtype)


def _local(t: torch.Tensor, case: Case) -> torch.Tensor:
    if case.channels_last:
        return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    return t


def _run_case(backend: Any, case_no: int, case: Case, strategy: str) -> tuple[list[str], list[tuple[list[float], ...]]]:
    """Train `steps` steps on this rank and on the reference; returns failures and per-step grads."""
    rank, world = backend.rank, backend.world_size
    label = f"{case.name} / {strategy} / rank {rank} of {world}"
    failures: list[str] = []
    grads: list[tuple[list[float], ...]] = []
    channels, ndim = case.rest[0], len(case.rest) + 1
    ref = _reference_cls(ndim)(
        channels, affine=case.affine, track_running_stats=case.track, momentum=case.momentum
    ).double()
    if case.affine:
        g = torch.Generator().manual_seed(case_no)
        with torch.no_grad():
            ref.weight.copy_(torch.rand(channels, generator=g, dtype=torch.float64) + 0.5)
            ref.bias.copy_(torch.randn(channels, generator=g, dtype=torch.float64))
    counting = CountingComm(backend)
    group = {"backend": counting, "default": None, "world": torch.distributed.group.WORLD}[case.group]
    ours = SyncBatchNorm(
        channels,
        affine=case.affine,
        track_running_stats=case.track,
        momentum=case.momentum,
        strategy=strategy,
        process_group=group,
    )
    if case.dtype == "float64":
        ours = ours.double()
    ours.load_state_dict(ref.state_dict())
    vtol, stol = VALUE_TOL[getattr(torch, case.dtype)], STAT_TOL[getattr(torch, case.dtype)]
    spec = STRATEGIES[strategy]
    stat_bytes = 8 if case.dtype == "float64" else 4

    for step in range(case.steps):
        batches = [_batch(case, case_no, step, r) for r in range(world)]
        x_all = torch.cat([b[0] for b in batches]).double().requires_grad_()
        dy_all = torch.cat([b[1] for b in batches]).double()
        ref.zero_grad()
        y_ref = ref(x_all)
        y_ref.backward(dy_all)
        start = sum(len(b[0]) for b in batches[:rank])
        mine = slice(start, start + len(batches[rank][0]))

        x = _local(batches[rank][0], case).requires_grad_()
        ours.zero_grad()
        y = ours(x)
        fwd = counting.take()
        y.backward(_local(batches[rank][1], case))
        bwd = counting.take()
        where = f"{label} step {step}"
        close(failures, f"{where} output", y, y_ref[mine], vtol)
        close(failures, f"{where} grad_input", x.grad, x_all.grad[mine], vtol)
        if y.dtype != x.dtype:
            failures.append(f"{where} output dtype {y.dtype} != {x.dtype}")
        layout = torch.channels_last if ndim == 4 else torch.channels_last_3d
        if case.channels_last and not y.is_contiguous(memory_format=layout):
            failures.append(f"{where} output lost the channels_last layout")
        if case.group == "backend":
            channels_bytes = (
                spec.forward_bytes(channels, world, stat_bytes),
                spec.backward_bytes(channels, world, stat_bytes),
            )
            if fwd != (spec.forward_calls, channels_bytes[0]) or bwd != (spec.backward_calls, channels_bytes[1]):
                failures.append(
                    f"{where} calls/bytes forward {fwd} backward {bwd}, declared "
                    f"{(spec.forward_calls, channels_bytes[0])} {(spec.backward_calls, channels_bytes[1])}"
                )
        if case.affine:
            # As lists: tensors would cross the result queue through shared memory of an exiting process.
            grads.append(
                tuple(t.double().tolist() for t in (ours.weight.grad, ours.bias.grad, ref.weight.grad, ref.bias.grad))
            )
        if case.track:
            close(failures, f"{where} running_mean", ours.running_mean, ref.running_mean, stol)
            close(failures, f"{where} running_var", ours.running_var, ref.running_var, stol)
            if int(ours.num_batches_tracked) != int(ref.num_batches_tracked):
                failures.append(
                    f"{where} num_batches_tracked {int(ours.num_batches_tracked)} != {int(ref.num_batches_tracked)}"
                )

    if case.eval_after:
        ours.eval()
        ref.eval()
        x, _ = _batch(case, case_no, 99, rank)
        calls_before = sum(backend.calls.values())
        y = ours(_local(x, case))
        # With running statistics both use them; without, each rank normalises its own batch
        # (torch.nn.SyncBatchNorm's eval behaviour), which is the reference on this rank's batch alone.
        expected = ref(x.double())
        close(failures, f"{label} eval output", y, expected, vtol)
        if counting.take() != (0, 0) or sum(backend.calls.values()) != calls_before:
            failures.append(f"{label} eval mode communicated")
    return failures, grads


def _exactness_worker(backend: Any, cases: list[Case]) -> dict[str, Any]:
    torch.set_num_threads(1)  # tiny tensors: intra-op threads would only fight the other ranks for cores
    failures: list[str] = []
    grads: dict[tuple[int, str], list[tuple[list[float], ...]]] = {}
    for case_no, case in enumerate(cases):
        for strategy in STRATEGY_NAMES:
            f, g = _run_case(backend, case_no, case, strategy)
            failures += f
            grads[(case_no, strategy)] = g
    # A single value per channel over every rank (rank 0 holds one sample, the others none) has no
    # variance: every rank must raise PyTorch's ValueError, together, for every strategy.
    for strategy in STRATEGY_NAMES:
        bn = SyncBatchNorm(3, strategy=strategy, process_group=backend)
        try:
            bn(torch.randn(1 if backend.rank == 0 else 0, 3))
            failures.append(f"{strategy}: one value per channel overall did not raise")
        except ValueError as exc:
            if "Expected more than 1 value per channel when training" not in str(exc) or "\n" in str(exc):
                failures.append(f"{strategy}: unexpected message {exc}")
    return {"failures": failures, "grads": grads}


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_every_strategy_matches_batchnorm_on_the_whole_batch(world):
    results = run_ranks(_exactness_worker, world, CASES, timeout=300)
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:40])
    # grad_weight / grad_bias are per rank; their sum over ranks is the whole batch's gradient.
    for key, steps in results[0]["grads"].items():
        case = CASES[key[0]]
        tol = GRAD_SUM_TOL[getattr(torch, case.dtype)]
        for step, (_, _, ref_w, ref_b) in enumerate(steps):
            sum_w = sum(torch.tensor(r["grads"][key][step][0], dtype=torch.float64) for r in results)
            sum_b = sum(torch.tensor(r["grads"][key][step][1], dtype=torch.float64) for r in results)
            ref_w, ref_b = torch.tensor(ref_w, dtype=torch.float64), torch.tensor(ref_b, dtype=torch.float64)
            assert torch.allclose(sum_w, ref_w, rtol=tol[0], atol=tol[1]), (case.name, key[1], step, "grad_weight")
            assert torch.allclose(sum_b, ref_b, rtol=tol[0], atol=tol[1]), (case.name, key[1], step, "grad_bias")


def test_strategy_names_match_the_implementations():
    assert tuple(STRATEGIES) == STRATEGY_NAMES
