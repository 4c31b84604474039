"""CUDA contracts of the transports and the memory check, pinned on the CPU with CUDA faked:
what Gloo refuses on CUDA tensors (from a table, before a device pointer reaches it), the drain of a
Gloo rank's GPU, and what the memory check counts on a GPU beyond the case's tensors."""

from __future__ import annotations

import pytest
import torch

from commbench.backends import BACKENDS
from commbench.backends.gloo import CUDA_REFUSED, GlooBackend
from commbench.backends.nccl import NcclBackend
from commbench.ops.all_gather import AllGather
from commbench.ops.grouped_all_gather import GroupedAllGather
from commbench.ops.sendrecv import SendRecv
from commbench.run import resources
from commbench.run.config import SweepConfig
from commbench.run.overlap import AUTO_KERNEL_BYTES

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api


def _gloo(device: str) -> GlooBackend:
    backend = GlooBackend(device)
    backend.world_size = 2
    backend.device = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    return backend


def test_gloo_on_cuda_refuses_send_recv_and_grouping_from_its_table():
    cuda, cpu = _gloo("cuda"), _gloo("cpu")
    assert SendRecv().unavailable("pair", cuda) == CUDA_REFUSED["send_recv"]
    assert SendRecv().unavailable("pair", cpu) is None
    assert GroupedAllGather().unavailable("coalesced", cuda) == CUDA_REFUSED["group"]
    assert GroupedAllGather().unavailable("coalesced", cpu) is None
    # what ProcessGroupGloo stages through host memory stays available
    for collective in ("broadcast", "reduce", "gather", "scatter", "all_to_all_single", "barrier_async"):
        assert cuda.missing(collective) is None, collective
    assert all("\n" not in reason and "cuda" in reason.lower() for reason in CUDA_REFUSED.values())


def test_gloo_send_recv_on_cuda_raises_before_the_transport_sees_the_tensor(monkeypatch):
    import torch.distributed as dist

    def never(*args, **kwargs):
        raise AssertionError("batch_isend_irecv was called with CUDA tensors")

    monkeypatch.setattr(dist, "batch_isend_irecv", never)
    with pytest.raises(NotImplementedError, match="send and recv"):
        _gloo("cuda").send_recv([(torch.zeros(2), 1)], [(torch.zeros(2), 1)])


def test_a_gloo_rank_on_cuda_drains_its_gpu_and_one_on_cpu_does_not(monkeypatch):
    drained = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: drained.append(device))
    _gloo("cpu").synchronize()
    assert drained == []
    _gloo("cuda").synchronize()
    assert drained == [torch.device("cuda", 0)]


@pytest.fixture
def gpu_with(monkeypatch):
    """A fake GPU with `free` bytes free and `count` GPUs visible."""

    def make(free: int, count: int = 1) -> None:
        monkeypatch.setattr(resources, "device_available_bytes", lambda device: free)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return make


def _need(cfg: SweepConfig, backend) -> int:
    largest = resources.largest_need([AllGather()], cfg, backend.world_size, on_host=False)
    assert largest is not None
    return largest[0] + resources.RUNTIME_GROWTH_BYTES


def test_the_gpu_memory_check_counts_what_is_allocated_after_it(gpu_with):
    nccl = NcclBackend()
    nccl.world_size, nccl.device = 2, torch.device("cuda", 0)
    cfg = SweepConfig("nccl", ("all_gather",), (1 << 30,))
    base = _need(cfg, nccl)
    reserve = BACKENDS["nccl"].communicator_bytes
    gpu_with(base + reserve)
    assert resources.memory_error([AllGather()], cfg, nccl, local_ranks=2) is None
    gpu_with(base + reserve - 1)
    assert "needs about" in (resources.memory_error([AllGather()], cfg, nccl, local_ranks=2) or "")
    # a --group run joins a second communicator; --overlap's auto matmul is reserved too
    grouped = SweepConfig("nccl", ("all_gather",), (1 << 30,), group="intra")
    gpu_with(base + 2 * reserve - 1)
    assert resources.memory_error([AllGather()], grouped, nccl, local_ranks=2) is not None
    overlapped = SweepConfig("nccl", ("all_gather",), (1 << 30,), overlap=True)
    gpu_with(base + reserve + AUTO_KERNEL_BYTES - 1)
    assert resources.memory_error([AllGather()], overlapped, nccl, local_ranks=2) is not None
    gpu_with(base + reserve + AUTO_KERNEL_BYTES)
    assert resources.memory_error([AllGather()], overlapped, nccl, local_ranks=2) is None


def test_gloo_ranks_sharing_a_gpu_are_checked_together(gpu_with):
    gloo = _gloo("cuda")
    cfg = SweepConfig("gloo", ("all_gather",), (1 << 30,), device="cuda")
    need = _need(cfg, gloo)
    gpu_with(2 * need, count=1)  # 4 local ranks on one GPU need 4x
    message = resources.memory_error([AllGather()], cfg, gloo, local_ranks=4)
    assert message is not None and "x 4 ranks on this GPU" in message
    gpu_with(2 * need, count=2)  # spread over two GPUs: 2 per GPU
    assert resources.memory_error([AllGather()], cfg, gloo, local_ranks=4) is None
