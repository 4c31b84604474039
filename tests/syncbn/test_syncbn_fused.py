"""SyncBatchNorm's fused kernels against a plain reference, on random shapes, dtypes and layouts.

The ranks here are threads sharing an in-process communicator (ThreadComm), so a case with several
ranks, one of them empty, costs milliseconds. The plain reference is the textbook arithmetic in
float64 on the whole batch: two-pass statistics, (x - mean) * invstd * weight + bias, and
grad_input = (dy - mean(dy) - (x - mean) invstd^2 mean(dy (x - mean))) * invstd * weight.
Tolerances are tests/support/tolerance.py's, as tests/syncbn/test_syncbn_exact.py uses them (float64 to 1e-9).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from commbench.syncbn import STRATEGY_NAMES, SyncBatchNorm, stats
from commbench.syncbn.stats import chan_merge, local_stats, merge_from_invstd, stat_dtype
from tests.support.tolerance import GRAD_SUM_TOL, STAT_TOL, VALUE_TOL, close

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


class _Done:
    def wait(self) -> bool:
        return True


class ThreadComm:
    """world_size ranks as threads: every collective completes when issued, after all ranks arrive."""

    def __init__(self, shared: dict[str, Any], rank: int, world_size: int) -> None:
        self.shared, self.rank, self.world_size = shared, rank, world_size

    def _exchange(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        slots, barrier = self.shared["slots"], self.shared["barrier"]
        slots[self.rank] = tensor.detach().clone()
        barrier.wait()
        parts = list(slots)
        barrier.wait()  # nobody overwrites a slot before everyone has read them all
        return parts

    def all_gather_flat(self, output: torch.Tensor, input: torch.Tensor) -> _Done:
        output.copy_(torch.cat([p.reshape(-1) for p in self._exchange(input)]).view_as(output))
        return _Done()

    def all_gather_list(self, outputs: list[torch.Tensor], input: torch.Tensor) -> _Done:
        for out, part in zip(outputs, self._exchange(input)):
            out.copy_(part)
        return _Done()

    def all_reduce(self, tensor: torch.Tensor) -> _Done:
        parts = self._exchange(tensor)
        total = parts[0].clone()
        for part in parts[1:]:
            total += part
        tensor.copy_(total)
        return _Done()

    def all_gather_group(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> _Done:
        for out, inp in zip(outputs, inputs):
            self.all_gather_flat(out, inp)
        return _Done()

    def all_reduce_group(self, tensors: list[torch.Tensor]) -> _Done:
        for t in tensors:
            self.all_reduce(t)
        return _Done()


def run_threads(world: int, fn: Callable[[ThreadComm], Any]) -> list[Any]:
    """fn(comm) on `world` thread ranks; returns each rank's result, re-raising the first failure."""
    shared = {"slots": [None] * world, "barrier": threading.Barrier(world, timeout=60)}
    results: list[Any] = [None] * world
    errors: list[BaseException] = []

    def entry(rank: int) -> None:
        try:
            results[rank] = fn(ThreadComm(shared, rank, world))
        except BaseException as exc:
            errors.append(exc)
            shared["barrier"].abort()

    threads = [threading.Thread(target=entry, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@dataclass(frozen=True)
class Case:
    batches: tuple[int, ...]  # one per rank; 0 is an empty rank
    rest: tuple[int, ...]  # (C, *spatial)
    dtype: torch.dtype
    layout: str  # contiguous, channels_last or strided (a non-contiguous view)
    affine: bool
    offset: float  # added to the input: a mean far from 0 next to the spread


def _random_cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        ndim = rng.randint(2, 5)
        world = rng.randint(1, 3)
        batches = tuple(rng.choice((0, 1, 2, 3, 5)) for _ in range(world))
        rest = (rng.randint(1, 6), *(rng.randint(1, 5) for _ in range(ndim - 2)))
        values = sum(batches) * (1 if ndim == 2 else torch.Size(rest[1:]).numel())
        if values < 2:
            continue  # training needs more than one value per channel overall
        layouts = ["contiguous", "strided"] + (["channels_last"] if ndim >= 4 else [])
        cases.append(
            Case(
                batches, rest, rng.choice(DTYPES), rng.choice(layouts), rng.random() < 0.7, rng.choice((0.0, 0.5, 3.0))
            )
        )
    return cases


CASES = _random_cases(40, seed=17)


def _layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    if layout == "strided":  # every other element of a twice-as-long last dimension
        wide = torch.stack([t, torch.full_like(t, float("nan"))], dim=-1)
        return wide.select(-1, 0)
    return t


def _batches(case: Case, case_no: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per rank (x, dy) in float64, rank-dependent, already rounded to the case's dtype."""
    out = []
    for rank, n in enumerate(case.batches):
        g = torch.Generator().manual_seed(1000 * case_no + rank)
        shape = (n, *case.rest)
        x = torch.randn(shape, generator=g, dtype=torch.float64) * (1 + 0.5 * rank) + 0.25 * rank + case.offset
        dy = torch.randn(shape, generator=g, dtype=torch.float64)
        out.append((x.to(case.dtype).double(), dy.to(case.dtype).double()))
    return out


def _per_channel(v: torch.Tensor, ndim: int) -> torch.Tensor:
    return v.view(1, -1, *([1] * (ndim - 2)))


def _plain_reference(
    batches: list[tuple[torch.Tensor, torch.Tensor]], weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> dict[str, Any]:
    """The textbook SyncBatchNorm on the whole batch in float64: outputs and gradients per rank."""
    x = torch.cat([b[0] for b in batches])
    dy = torch.cat([b[1] for b in batches])
    ndim = x.dim()
    dims = [0, *range(2, ndim)]
    n = x.numel() // x.shape[1]
    mean = x.sum(dims) / n
    xmu = x - _per_channel(mean, ndim)
    var = xmu.square().sum(dims) / n
    invstd = 1 / torch.sqrt(var + eps)
    w = torch.ones_like(mean) if weight is None else weight.double()
    b = torch.zeros_like(mean) if bias is None else bias.double()
    y = xmu * _per_channel(invstd * w, ndim) + _per_channel(b, ndim)
    mean_dy = dy.sum(dims) / n
    mean_dy_xmu = (dy * xmu).sum(dims) / n
    grad = (dy - _per_channel(mean_dy, ndim) - xmu * _per_channel(invstd.square() * mean_dy_xmu, ndim)) * _per_channel(
        invstd * w, ndim
    )
    rows, start = [], 0
    for bx, _ in batches:
        mine = slice(start, start + len(bx))
        start += len(bx)
        rows.append(
            {
                "output": y[mine],
                "grad_input": grad[mine],
                "grad_weight": ((dy[mine] * xmu[mine]).sum(dims) * invstd),
                "grad_bias": dy[mine].sum(dims),
            }
        )
    return {"rows": rows, "mean": mean, "unbiased_var": var * n / (n - 1)}


def _check_case(case_no: int, case: Case, strategy: str) -> list[str]:
    batches = _batches(case, case_no)
    channels, ndim = case.rest[0], len(case.rest) + 1
    g = torch.Generator().manual_seed(case_no)
    weight = torch.rand(channels, generator=g, dtype=torch.float64) + 0.5 if case.affine else None
    bias = torch.randn(channels, generator=g, dtype=torch.float64) if case.affine else None
    ref = _plain_reference(batches, weight, bias, 1e-5)
    param_dtype = torch.float64 if case.dtype == torch.float64 else torch.float32

    def rank_fn(comm: ThreadComm) -> list[str]:
        rank, failures = comm.rank, []
        label = f"case {case_no} {case} / {strategy} / rank {rank}"
        bn = SyncBatchNorm(channels, affine=case.affine, strategy=strategy, process_group=comm).to(param_dtype)
        if case.affine:
            with torch.no_grad():
                bn.weight.copy_(weight)
                bn.bias.copy_(bias)
        x = _layout(batches[rank][0].to(case.dtype), case.layout).requires_grad_()
        dy = _layout(batches[rank][1].to(case.dtype), case.layout)
        y = bn(x)
        y.backward(dy)
        expected = ref["rows"][rank]
        vtol = VALUE_TOL[case.dtype]
        close(failures, f"{label} output", y, expected["output"], vtol)
        close(failures, f"{label} grad_input", x.grad, expected["grad_input"], vtol)
        if y.dtype != case.dtype or x.grad.dtype != case.dtype:
            failures.append(f"{label} dtypes {y.dtype} {x.grad.dtype}")
        if case.layout == "channels_last":
            fmt = torch.channels_last if ndim == 4 else torch.channels_last_3d
            if not (y.is_contiguous(memory_format=fmt) and x.grad.is_contiguous(memory_format=fmt)):
                failures.append(f"{label} lost the channels_last layout")
        if case.affine:
            close(failures, f"{label} grad_weight", bn.weight.grad, expected["grad_weight"], GRAD_SUM_TOL[case.dtype])
            close(failures, f"{label} grad_bias", bn.bias.grad, expected["grad_bias"], GRAD_SUM_TOL[case.dtype])
        stol = STAT_TOL[case.dtype]
        # running = 0.9 * (0, 1) + 0.1 * (mean, unbiased variance)
        close(failures, f"{label} running_mean", bn.running_mean, 0.1 * ref["mean"], stol)
        close(failures, f"{label} running_var", bn.running_var, 0.9 + 0.1 * ref["unbiased_var"], stol)
        return failures

    return [f for rank_failures in run_threads(len(case.batches), rank_fn) for f in rank_failures]


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_fused_path_matches_the_plain_reference_on_random_cases(strategy):
    torch.set_num_threads(1)
    failures = [f for case_no, case in enumerate(CASES) for f in _check_case(case_no, case, strategy)]
    assert not failures, "\n".join(failures[:30])


def test_two_pass_statistics_in_slices_match_the_plain_reference(monkeypatch):
    """Slices of 7 elements make every NCHW case's squared deviations come in several slices."""
    monkeypatch.setattr(stats, "_TWO_PASS_CHUNK", 7)
    torch.set_num_threads(1)
    failures = [f for case_no, case in enumerate(CASES) for f in _check_case(case_no, case, "apex")]
    assert not failures, "\n".join(failures[:30])


def test_the_random_cases_cover_what_the_kernels_must_handle():
    assert {c.dtype for c in CASES} == set(DTYPES)
    assert {len(c.rest) + 1 for c in CASES} == {2, 3, 4, 5}
    assert {c.layout for c in CASES} == {"contiguous", "channels_last", "strided"}
    assert any(not c.affine for c in CASES) and any(c.affine for c in CASES)
    assert any(0 in c.batches and len(c.batches) > 1 for c in CASES), "no case with an empty rank"
    assert any(len(c.batches) == 1 for c in CASES) and any(len(c.batches) == 3 for c in CASES)


@pytest.mark.parametrize("chunk", [7, 1 << 19])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("shape", [(7, 3), (4, 3, 5), (5, 3, 4, 5), (3, 3, 2, 3, 4), (0, 3, 4, 4)])
def test_local_stats_are_the_two_pass_statistics_in_the_statistics_type(shape, layout, dtype, chunk, monkeypatch):
    monkeypatch.setattr(stats, "_TWO_PASS_CHUNK", chunk)
    if layout == "channels_last" and len(shape) < 4:
        pytest.skip("channels_last is 4D/5D")
    x64 = (
        (torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2 + 1).to(dtype).double()
    )
    local = local_stats(_layout(x64.to(dtype), layout))
    assert local.mean.dtype == local.var.dtype == stat_dtype(dtype)
    channels, dims = shape[1], [0, *range(2, len(shape))]
    assert local.count == x64.numel() // channels
    if local.count == 0:
        assert local.mean.tolist() == [0.0] * channels and local.var.tolist() == [0.0] * channels
        return
    mean = x64.mean(dims)
    var = (x64 - _per_channel(mean, len(shape))).square().mean(dims)
    tol = STAT_TOL[dtype]
    assert torch.allclose(local.mean.double(), mean, rtol=tol[0], atol=tol[1])
    assert torch.allclose(local.var.double(), var, rtol=tol[0], atol=tol[1])


def _chan_rank_by_rank(
    counts: torch.Tensor, means: torch.Tensor, variances: torch.Tensor
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """The Chan merge as usually written: rank by rank, skipping empty ranks."""
    n, avg, m2 = 0.0, torch.zeros_like(means[0]), torch.zeros_like(means[0])
    for n_j, m_j, v_j in zip(counts.tolist(), means, variances):
        if n_j <= 0:
            continue
        f = 1.0 / (n + n_j)
        m2 = m2 + n_j * v_j + (avg - m_j).square() * (n * n_j * f)
        avg = (n * avg + n_j * m_j) * f
        n += n_j
    return n, avg, (m2 / n if n > 0 else m2)


@pytest.mark.parametrize("seed", range(8))
def test_vectorised_chan_merge_equals_the_rank_by_rank_merge(seed):
    g = torch.Generator().manual_seed(seed)
    world = 1 + seed % 5
    counts = torch.randint(0, 50, (world,), generator=g).double()
    counts[seed % world] = 0 if world > 1 else counts[0]  # an empty rank wherever there are peers
    counts[(seed + 1) % world] += 2  # and at least two values overall
    means = torch.randn(world, 6, generator=g, dtype=torch.float64) * 3 + 100
    variances = torch.rand(world, 6, generator=g, dtype=torch.float64) * 2
    means[counts == 0] = 0.0  # what an empty rank's local_stats sends
    variances[counts == 0] = 0.0
    n, mean, var = _chan_rank_by_rank(counts, means, variances)
    merged = chan_merge(counts, means, variances)
    assert merged.count == int(n)
    assert torch.allclose(merged.mean, mean, rtol=1e-12, atol=1e-12)
    assert torch.allclose(merged.var, var, rtol=1e-12, atol=1e-12)
    # the invstd form (torch, horovod) recovers each rank's variance first
    invstds = torch.rsqrt(variances + 1e-5)
    from_invstd = merge_from_invstd(counts, means, invstds, 1e-5)
    assert torch.allclose(from_invstd.var, var, rtol=1e-9, atol=1e-9)
    # float32 statistics with the counts sent as float32, as the strategies send them
    merged32 = chan_merge(counts.float(), means.float(), variances.float())
    assert merged32.mean.dtype == torch.float32 and merged32.count == int(n)
    assert torch.allclose(merged32.var.double(), var, rtol=1e-4, atol=1e-5)


def test_chan_merge_of_empty_ranks_only_is_a_zero_count():
    merged = chan_merge(torch.zeros(3), torch.zeros(3, 4), torch.zeros(3, 4))
    assert merged.count == 0 and merged.mean.tolist() == [0.0] * 4 and merged.var.tolist() == [0.0] * 4


class _FullSizeOps(TorchDispatchMode):
    """Records the aten ops that read or write a tensor of `numel` elements (a full pass over the batch);
    views (detach, as autograd stores x.grad) move no data and are left out."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        if not func.is_view and any(t.numel() == self.numel for t in tensors):
            self.ops.append(func.overloadpacket.__name__)
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_each_direction_makes_as_few_full_passes_as_the_platform_allows(strategy, layout, dtype):
    """The aten ops that touch a full-size tensor, on the CPU. Forward: the statistics, then the
    normalisation. The statistics are torch's fused kernel, except for float32/float64 with the
    channels outside (NCHW), where two vectorised reductions are 3-6x faster: a sum, then the sum of
    squared deviations (over one temporary slice of the batch at a time; one slice here). Backward: the sums kernel, then grad_input (the x and
    constant terms, then dy added in place; half types add the one final rounding). No copy of x."""
    torch.set_num_threads(1)
    x = _layout(torch.randn(4, 8, 5, 5).to(dtype), layout).requires_grad_()
    dy = _layout(torch.randn(4, 8, 5, 5).to(dtype), layout)
    bn = SyncBatchNorm(8, strategy=strategy)
    if dtype == torch.float64:
        bn = bn.double()
    with _FullSizeOps(x.numel()) as forward:
        y = bn(x)
    with _FullSizeOps(x.numel()) as backward:
        y.backward(dy)
    if layout == "contiguous" and dtype != torch.bfloat16:
        assert forward.ops == ["sum", "sub", "pow_", "sum", "native_batch_norm"]  # square_ is pow_
    else:
        assert forward.ops == ["batch_norm_update_stats", "native_batch_norm"]
    if dtype == torch.bfloat16:
        assert backward.ops == ["native_batch_norm_backward", "addcmul", "addcmul_", "_to_copy"]
    else:
        assert backward.ops == ["native_batch_norm_backward", "native_batch_norm", "addcmul_"]
