"""Every registered op's values, with no formula restated here: on a real 2-rank Gloo group, each
op (every variant Gloo offers; the baseline variant in every dtype and phase) writes its inputs, and a run of the collective writes the
values its own check expects (zero wrong); before the run that check fails on some rank (a stale or
unwritten result cannot pass); and one element flipped anywhere in a rank's result (first, middle,
last; chunked by default and in chunks of 50 elements, prime to every period) is exactly one wrong.

What a "result" is comes from the op's buffers, not from the op: its output where it has one on
this rank, else its input (the in-place ops). A rank whose row says its result is not checked
(Gloo's reduce uses the non-root tensors as scratch) must count no flip at all. The barrier has no
values (its check is timing: tests/ops/test_ops_family.py catches a barrier that does not wait) and
sync_bn's results are its layer's tensors (tests/syncbn/test_syncbn_op.py catches a corrupted one): both
are held to zero wrong here. Below: the chunked Values themselves.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from commbench.ops import registry, values
from commbench.ops.args import CollArgs, complete
from commbench.ops.base import Op
from commbench.ops.values import Values, summed
from tests.support.distributed import run_ranks
from tests.support.fakes import FakeBackend
from tests.support.op_table import TABLE, listed

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64")
SIZE = 4000  # bytes: 500 to 2,000 elements, many chunks of 50
NOT_CHECKED = "only the root's result is checked"  # the reduce row's note where Gloo scribbles on the others
FLIP = 3  # small enough to stay exact in every dtype, large enough to leave every tolerance


def _result(args: CollArgs) -> list[Any]:
    """The tensors a run writes on this rank: the output, or the input where the op works in place."""
    return listed(args.output) or listed(args.input)


def _element(tensors: list[Any], position: int) -> Any:
    """A 0-d view of the element at this position of the tensors taken one after the other."""
    for t in tensors:
        if position < t.numel():
            return t[tuple(int(i) for i in torch.unravel_index(torch.tensor(position), t.shape))]
        position -= t.numel()
    raise IndexError(position)


def _run(op: Op, args: CollArgs, phase: str) -> None:
    op.fill(args)
    op.before(args, phase)
    op.issue(args, phase)
    complete(args)


def _flips(op: Op, args: CollArgs, phase: str) -> list[int]:
    """The wrong count with one element of the result flipped, at its first, middle and last element,
    in default chunks and in chunks of 50; then with none flipped."""
    result = _result(args)
    total = sum(t.numel() for t in result)
    counts = []
    for chunk in (values.CHUNK, 50):
        values.CHUNK, default = chunk, values.CHUNK
        try:
            for position in (0, total // 2, total - 1):
                element = _element(result, position)
                element += FLIP
                counts.append(op.wrong(args, phase))
                element -= FLIP
        finally:
            values.CHUNK = default
    return [*counts, op.wrong(args, phase)]


def _cases(op: Op) -> list[tuple[str, str, tuple[str, ...]]]:
    """(variant, dtype, phases): every variant in float32 and its first phase; the first variant (the
    baseline) also in every dtype and every phase. The values and their check are the variants' own;
    the dtypes and phases go through the same code in every variant."""
    first = op.variants[0]
    cases = [(first, "float32", op.phases)]
    cases += [(first, dtype, op.phases[:1]) for dtype in DTYPES if dtype != "float32"]
    return cases + [(variant, "float32", op.phases[:1]) for variant in op.variants[1:]]


def _check_every_op(backend: Any) -> list[dict[str, Any]]:
    """On this rank: for every registered op and its cases, the checks the module docstring names."""
    found = []
    for name, cls in registry().items():
        op = cls(TABLE[name].options)
        (point, *_) = op.points([SIZE])
        for variant, dtype, phases in _cases(op):
            case = {"op": name, "variant": variant, "dtype": dtype}
            reason = op.unavailable(variant, backend) or op.dtype_unavailable(getattr(torch, dtype))
            if reason is not None:
                found.append({**case, "unavailable": reason})
                continue
            args = CollArgs(backend=backend, dtype=getattr(torch, dtype), variant=variant)
            op.setup(args, point)
            op.fill(args)
            unwritten = None if name == "barrier" else op.wrong(args, phases[0])
            zero = []
            for phase in (*phases[1:], phases[0]):  # the first phase last: its result is flipped
                _run(op, args, phase)
                zero.append(op.wrong(args, phase))
            flips = None if name in ("barrier", "sync_bn") else _flips(op, args, phases[0])
            checked = NOT_CHECKED not in op.note(args)
            found.append({**case, "unwritten": unwritten, "zero": zero, "flips": flips, "checked": checked})
    return found


@pytest.mark.slow
def test_every_op_writes_what_its_check_expects_and_one_flipped_element_is_one_wrong():
    ranks = run_ranks(_check_every_op, 2, timeout=300)
    measured = {(r["op"], r["variant"]) for r in ranks[0] if "unavailable" not in r}
    assert {op for op, _ in measured} == set(registry())  # every op runs on Gloo in some variant
    for case in zip(*ranks):
        if "unavailable" in case[0]:
            assert all("unavailable" in c for c in case), case
            continue
        label = (case[0]["op"], case[0]["variant"], case[0]["dtype"])
        assert all(c["zero"] == [0] * len(c["zero"]) for c in case), (label, case)
        if case[0]["unwritten"] is not None:
            assert sum(c["unwritten"] for c in case) > 0, label  # some rank's check fails before the run
        if case[0]["flips"] is None:
            continue
        flipped = [c["flips"] for c in case]
        assert all(f in ([1] * 6 + [0], [0] * 7) for f in flipped), (label, flipped)
        assert [1] * 6 + [0] in flipped, label  # some rank checks its result
        if [0] * 7 in flipped:  # and the others only where the row says so
            assert not case[0]["checked"], (label, flipped)


def test_where_the_transport_keeps_them_a_non_roots_reduce_tensor_is_checked():
    """NCCL's reduce only reads the other ranks' tensors (Gloo uses them as scratch, so the 2-rank
    test above cannot show this): there the check holds them to their own values."""
    op = registry()["reduce"]()
    backend = FakeBackend(rank=1, world_size=2, reduce_keeps_non_root=True)
    args = CollArgs(backend=backend, dtype=torch.float32, variant="flat")
    op.setup(args, op.points([SIZE])[0])
    op.fill(args)  # the API leaves a non-root tensor as it was filled
    assert op.wrong(args, "comm") == 0 and NOT_CHECKED not in op.note(args)
    args.input[-1] += FLIP
    assert op.wrong(args, "comm") == 1


@pytest.mark.parametrize("period", [None, 7, 11])
def test_a_large_buffer_is_checked_to_its_last_element(period):
    """Several default chunks, and a tail that is not a whole chunk or a whole period."""
    v = Values(lambda i: i % 7 + 1, period) if period == 7 else Values(lambda i: (i * 5) % 11 + 1, period)
    count = 3 * values.CHUNK + 13
    buffer = torch.empty(count, dtype=torch.float32)
    v.write(buffer, start=5)
    assert torch.equal(buffer, v.formula(torch.arange(5, 5 + count)).to(torch.float32))
    for position in (0, values.CHUNK - 1, values.CHUNK, count // 2, count - 1):
        buffer[position] += 2
        assert v.wrong(buffer, start=5) == 1, position
        buffer[position] -= 2
    assert v.wrong(buffer, start=5) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_repeating_result_is_counted_as_every_block_counts(dtype):
    """A host result that repeats block for block (Values._repeats) is counted from its first block:
    what the chunk-by-chunk count gives, with the first block right or wrong, and a NaN, a -0.0 or
    one changed element anywhere else making it not repeat."""
    v = Values(lambda i: i % 7 + 1, 7)
    block = values.CHUNK // 7 * 7
    buffer = torch.empty(5 * block + 12, dtype=getattr(torch, dtype))
    v.write(buffer)
    assert v.wrong(buffer) == 0
    buffer[3] = 0  # one wrong element in every block and in the tail, copied forward
    copied = buffer[:block].repeat(6)[: buffer.numel()]
    assert v.wrong(copied) == 6
    copied[:block].copy_(v.at(0, block, "cpu"))  # the first block right again: the others still wrong
    assert v.wrong(copied) == 5
    v.write(buffer)
    for position, value in ((2 * block + 5, 0), (buffer.numel() - 1, 0), (block + 1, -0.0), (3 * block, float("nan"))):
        if value != value and not buffer.is_floating_point():
            continue
        buffer[position] = value
        assert v.wrong(buffer) == 1, (position, value)
        v.write(buffer)


def test_summed_values_repeat_with_the_common_period():
    parts = [Values(lambda i: i % 2, 2), Values(lambda i: i % 3, 3)]
    assert summed(parts).period == 6
    assert summed([*parts, Values(lambda i: i * 0)]).period is None
    assert torch.equal(summed(parts).at(0, 12, "cpu"), torch.arange(12) % 2 + torch.arange(12) % 3)


def test_a_check_reads_the_device_once_per_buffer_not_once_per_chunk():
    """The wrong counts of every chunk add up on the device: one .item() (a host synchronisation on
    a GPU) per buffer, where there was one per 64 Ki elements."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from commbench.ops.values import CHUNK, Values

    class CountReads(TorchDispatchMode):
        reads = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ == "_local_scalar_dense":
                CountReads.reads += 1
            return func(*args, **(kwargs or {}))

    for known in (Values(lambda j: j % 5 + 1), Values(lambda j: j % 5 + 1, period=5)):
        buffer = torch.empty(5 * CHUNK + 3)
        known.write(buffer)
        buffer[7] = -1.0
        buffer[4 * CHUNK + 1] = -1.0
        CountReads.reads = 0
        with CountReads():
            assert known.wrong(buffer) == 2
        assert CountReads.reads == 1


def _ring_sum_in(dtype, parts):
    """A ring reduction as NCCL runs it: each hop adds one rank's values to the partial sum and the
    result is stored in the buffer's type (one rounding per hop)."""
    total = parts[0].to(dtype)
    for part in parts[1:]:
        total = (total.float() + part.to(dtype).float()).to(dtype)
    return total


@pytest.mark.parametrize("ranks", [2, 16, 48, 256])
def test_half_sums_at_many_ranks_are_not_reported_wrong(ranks):
    """bfloat16 integers are exact to 256: past it (about 24 ranks of values up to 11) each hop of a
    ring rounds, and the tolerance grows with the rank count instead of reporting spurious rows."""
    from commbench.ops.values import contribution, sum_tolerance, summed

    expected = summed([contribution(r) for r in range(ranks)])
    n = 4096
    parts = [contribution(r).at(0, n, "cpu").double() for r in range(ranks)]
    for dtype in (torch.bfloat16, torch.float16):
        result = _ring_sum_in(dtype, parts)
        assert expected.wrong(result) == 0, (dtype, ranks)
    assert (sum_tolerance(torch.bfloat16, ranks, expected.largest) is None) == (11 * ranks <= 256)
    assert sum_tolerance(torch.float16, 48, summed([contribution(r) for r in range(48)]).largest) is None
    assert sum_tolerance(torch.float32, ranks, expected.largest) is None


def test_a_lost_contribution_is_still_wrong_where_the_sums_are_exact():
    from commbench.ops.values import contribution, summed

    parts = [contribution(r).at(0, 1000, "cpu").double() for r in range(16)]
    short = _ring_sum_in(torch.bfloat16, parts[:-1])  # one rank's values missing
    assert summed([contribution(r) for r in range(16)]).wrong(short) == 1000


def test_the_bound_counts_the_expected_values_own_rounding():
    """The expected sum is converted to the half type too: its rounding is one term of the bound."""
    from commbench.ops.values import sum_tolerance

    assert sum_tolerance(torch.bfloat16, 48, 48 * 11) == (48 * 2.0**-8, 0.0)
    assert sum_tolerance(torch.float16, 300, 300 * 11) == (300 * 2.0**-11, 0.0)


@pytest.mark.parametrize("ranks", [17, 24, 48])
def test_bucketed_all_reduce_averages_in_half_types_are_not_reported_wrong(ranks):
    """The bucketed average of gradient values up to 16 leaves bfloat16's exact integers from 17 ranks:
    a ring's sum then rounds, and the check must allow for it as the plain all_reduce's does."""
    from types import SimpleNamespace

    from commbench.ops.bucketed_all_reduce import BucketedAllReduce
    from commbench.ops.bucketer import average_
    from commbench.ops.gradients import gradient_values

    op = BucketedAllReduce({"tensors": "4096,1000"})
    for dtype in (torch.bfloat16, torch.float16):
        grads = []
        for i, k in enumerate(op.numels):
            parts = [gradient_values(r, i, k).at(0, k, "cpu").double() for r in range(ranks)]
            grads.append(average_(_ring_sum_in(dtype, parts), ranks))
        args = SimpleNamespace(world_size=ranks, dtype=dtype, input=grads)
        assert op.wrong(args, "comm") == 0, (dtype, ranks)
        grads[0][5] += 4  # an element off by far more than the rounding is still counted
        assert op.wrong(args, "comm") == 1, (dtype, ranks)
