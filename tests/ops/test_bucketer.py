"""The bucketers alone, without a process group: a fake collective records every call.

The fake plays rank 0 of a world where every rank contributes the same tensors, so a reduced
shard is n x rank 0's inputs and an all-reduce sum is n x the tensor.
"""

from __future__ import annotations

import pytest
import torch

from commbench.ops.bucketer import AllReduceBucketer, FollowedBy, ReduceScatterBucketer, average_, message_buckets

N = 2


class Done:
    def wait(self) -> None:
        pass


class FakeReduceScatter:
    """Records (dtype, elements per shard) of each call and writes rank 0's reduced shard."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.dtype, int]] = []

    def __call__(self, output: torch.Tensor, flat_input: torch.Tensor) -> Done:
        assert flat_input.dim() == 1 and flat_input.numel() == N * output.numel()
        self.calls.append((output.dtype, output.numel()))
        output.copy_(flat_input.view(N, -1)[0].reshape(output.shape) * N)
        return Done()


def cap_for(shard_elements: int, element_size: int = 4) -> float:
    """The bucket_cap_mb whose shard holds exactly shard_elements."""
    return shard_elements * element_size * N / 2**20


def shards(value: float, numel: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """The n rank-shards of one tensor; shard r holds value + r."""
    return [torch.full((numel,), value + r, dtype=dtype) for r in range(N)]


def bucketer(shard_elements: int) -> tuple[ReduceScatterBucketer, FakeReduceScatter]:
    fake = FakeReduceScatter()
    return ReduceScatterBucketer(fake, N, cap_for(shard_elements)), fake


def test_shard_size_follows_the_cap_and_zero_disables():
    b = ReduceScatterBucketer(FakeReduceScatter(), 4, 25)
    assert b.shard_size(4) == 25 * 2**20 // 4 // 4
    assert b.shard_size(2) == 2 * b.shard_size(4)
    assert ReduceScatterBucketer(FakeReduceScatter(), 4, 0).shard_size(4) == 0
    assert ReduceScatterBucketer(FakeReduceScatter(), 4, -1).shard_size(4) == 0


def test_flush_order_and_a_full_bucket_flushes_before_the_input_that_does_not_fit():
    b, fake = bucketer(10)
    seen: list[tuple[int, list[float]]] = []
    for i in range(3):
        b.reduce_scatter_async(shards(i + 1, 4), lambda out, i=i: seen.append((i, out.tolist())))
    # 4 + 4 fit in 10 columns; the third did not, so the first two were flushed together.
    assert [i for i, _ in seen] == [0, 1]
    assert fake.calls == [(torch.float32, 8)]
    assert b.pending() == 4
    b.flush()
    assert [i for i, _ in seen] == [0, 1, 2]
    assert fake.calls == [(torch.float32, 8), (torch.float32, 4)]
    assert [values for _, values in seen] == [[2.0] * 4, [4.0] * 4, [6.0] * 4]  # n x rank 0's shard


def test_callback_views_stay_valid_after_the_next_flush():
    b, _ = bucketer(8)
    views: list[torch.Tensor] = []
    b.reduce_scatter_async(shards(1, 3), views.append)
    b.flush()
    b.reduce_scatter_async(shards(5, 3), views.append)
    b.flush()
    assert views[0].tolist() == [2.0] * 3  # not overwritten by the second flush
    assert views[1].tolist() == [10.0] * 3
    assert views[0].data_ptr() != views[1].data_ptr()


def test_oversize_input_is_reduced_at_once_without_flushing_the_bucket():
    b, fake = bucketer(10)
    order: list[str] = []
    b.reduce_scatter_async(shards(1, 4), lambda out: order.append("small"))
    b.reduce_scatter_async(shards(3, 12), lambda out: order.append(f"big {out.tolist()[:2]}"))
    assert order == ["big [6.0, 6.0]"]  # ran immediately
    assert fake.calls == [(torch.float32, 12)]
    assert b.pending() == 4  # the small one still waits in its bucket
    b.flush()
    assert order == ["big [6.0, 6.0]", "small"]


def test_cap_zero_disables_bucketing():
    fake = FakeReduceScatter()
    b = ReduceScatterBucketer(fake, N, 0)
    results: list[list[float]] = []
    for i in range(3):
        b.reduce_scatter_async(shards(i, 1), lambda out: results.append(out.tolist()))
    assert fake.calls == [(torch.float32, 1)] * 3
    assert results == [[0.0], [2.0], [4.0]]
    assert b.buckets == {} and b.pending() == 0


def test_mixed_dtypes_go_to_separate_buckets():
    b, fake = bucketer(16)
    got: dict[str, torch.Tensor] = {}
    b.reduce_scatter_async(shards(1, 4), lambda out: got.__setitem__("f32", out))
    b.reduce_scatter_async(shards(2, 4, torch.float16), lambda out: got.__setitem__("f16", out))
    b.reduce_scatter_async(shards(3, 4), lambda out: got.__setitem__("f32b", out))
    assert len(b.buckets) == 2 and fake.calls == []
    b.flush()
    assert sorted(fake.calls, key=str) == sorted([(torch.float32, 8), (torch.float16, 4)], key=str)
    assert got["f16"].dtype == torch.float16 and got["f16"].tolist() == [4.0] * 4
    assert got["f32"].tolist() == [2.0] * 4 and got["f32b"].tolist() == [6.0] * 4


def test_final_flush_leaves_nothing_behind():
    b, _ = bucketer(16)
    for i in range(3):
        b.reduce_scatter_async(shards(i + 1, 5), lambda out: None)
    b.flush()
    assert b.pending() == 0
    for bucket in b.buckets.values():
        assert bucket.offset == 0 and bucket.callbacks == []
        assert not bucket.data.any()  # used columns zeroed for the next round
    b.flush()  # an empty flush issues nothing


def test_inputs_must_be_n_equal_shards():
    b, _ = bucketer(16)
    with pytest.raises(ValueError):
        b.reduce_scatter_async([torch.ones(3)])
    with pytest.raises(ValueError):
        b.reduce_scatter_async([torch.ones(3), torch.ones(4)])


def test_message_buckets_group_by_dtype_and_close_at_the_message_size():
    tensors = [
        torch.zeros(k, dtype=dt)
        for k, dt in [
            (3, torch.float32),
            (2, torch.float16),
            (4, torch.float32),
            (5, torch.float32),
            (1, torch.float32),
        ]
    ]
    assert message_buckets(tensors, 7) == [[0, 2], [3, 4], [1]]  # 3+4 >= 7 closes the first float32 bucket
    assert message_buckets(tensors, 1) == [[0], [2], [3], [4], [1]]
    assert message_buckets(tensors, 10**7) == [[0, 2, 3, 4], [1]]


class FakeAllReduce:
    """Sum over N identical ranks, in place; counts calls and their sizes."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __call__(self, tensor: torch.Tensor) -> Done:
        self.sizes.append(tensor.numel())
        tensor.mul_(N)
        return Done()


@pytest.mark.parametrize("message_size, sizes", [(1, [3, 5, 1]), (8, [8, 1]), (10**7, [9])])
def test_all_reduce_bucketer_averages_and_copies_back(message_size, sizes):
    fake = FakeAllReduce()
    tensors = [torch.arange(k, dtype=torch.float32) + k for k in (3, 5, 1)]
    originals = [t.clone() for t in tensors]
    works = AllReduceBucketer(fake, N, message_size).reduce(tensors)
    assert fake.sizes == sizes
    for work in works:
        work.wait()
        work.wait()  # a second wait must not divide again
    for t, original in zip(tensors, originals):
        assert torch.equal(t, original)


def test_followed_by_runs_its_follow_up_after_the_wait_once():
    log: list[str] = []

    class Logged:
        def wait(self) -> None:
            log.append("wait")

    work = FollowedBy(Logged(), lambda: log.append("then"))
    work.wait()
    work.wait()
    assert log == ["wait", "then", "wait"]


def test_average_of_integers_floors():
    assert average_(torch.tensor([7, 8], dtype=torch.int32), 2).tolist() == [3, 4]
    assert average_(torch.tensor([7.0]), 2).tolist() == [3.5]
