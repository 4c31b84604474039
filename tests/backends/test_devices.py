"""Which GPU a rank takes, with CUDA faked: the rule, the local rank each launcher hands it, the
nccl and Horovod backends that apply it, and NCCL's own refusal of two ranks on one GPU."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

import commbench.backends.horovod as horovod_backend
from commbench.backends.devices import bind_own_gpu, cuda_index
from commbench.backends.job import Launch
from commbench.backends.nccl import NcclBackend
from commbench.errors import UserError
from commbench.launch.env import detect
from tests.launch.test_launchers import HYDRA, MVAPICH, OMPI_TWO_HOSTS, SRUN

# (local_rank, visible GPUs, ranks on the host, CUDA_VISIBLE_DEVICES set) -> index, or fragments of the refusal.
CHOICES: list[tuple[str, tuple[int | None, int, int | None, bool], int | list[str]]] = [
    ("one rank per GPU", (2, 4, 4, False), 2),
    ("fewer ranks than GPUs", (1, 8, 2, False), 1),
    ("local ranks unknown, own GPU exists", (3, 4, None, False), 3),
    ("srun --gpus-per-task=1: each task sees its own GPU as 0", (3, 1, 4, True), 0),
    ("one rank, one GPU", (0, 1, 1, False), 0),
    ("one GPU, host size unknown", (0, 1, None, False), 0),
    ("local rank unknown, one GPU", (None, 1, None, True), 0),
    ("no GPU", (0, 0, 1, False), ["needs one GPU per rank and this rank sees none", "--backend gloo"]),
    ("two ranks, one unrestricted GPU", (1, 1, 2, False), ["2 ranks on this host would share its one GPU"]),
    ("local rank beyond the GPUs", (4, 4, None, False), ["5 ranks on this host would share its 4 GPUs"]),
    ("more ranks than GPUs, this one fits", (0, 2, 4, False), ["4 ranks on this host would share its 2 GPUs"]),
    ("restricted to two, four per host", (3, 2, 4, True), ["4 ranks on this host would share its 2 GPUs"]),
    ("local rank unknown, several GPUs", (None, 4, None, False), ["which of the 4 visible GPUs", "set LOCAL_RANK"]),
]


@pytest.mark.parametrize("given, expected", [c[1:] for c in CHOICES], ids=[c[0] for c in CHOICES])
def test_the_device_rule(given: tuple[Any, ...], expected: int | list[str]) -> None:
    if isinstance(expected, int):
        assert cuda_index(*given, "nccl") == expected
        return
    with pytest.raises(UserError) as caught:
        cuda_index(*given, "nccl")
    message = caught.value.format_message()
    assert "\n" not in message and message.startswith("--backend nccl needs one GPU per rank")
    for fragment in expected:
        assert fragment in message, message


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A host whose CUDA shows `gpus.count` devices; set_device records what was bound."""
    gpus = types.SimpleNamespace(count=4, bound=[])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus.count)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus.count > 0)
    monkeypatch.setattr(torch.cuda, "set_device", gpus.bound.append)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return gpus


# Launches as detected from each launcher's environment (tests/launch/test_launchers.py), and the GPU the
# rank takes on a host with 4 visible GPUs, or with one GPU bound per task.
LAUNCHES = [
    ("srun: SLURM_LOCALID", SRUN, {}, 4, 1),
    ("srun, one GPU bound per task", SRUN, {"CUDA_VISIBLE_DEVICES": "5"}, 1, 0),
    ("mpirun on two hosts: the local rank, not rank 5", OMPI_TWO_HOSTS, {}, 4, 1),
    ("MVAPICH2", MVAPICH, {}, 4, 0),
    ("Hydra", HYDRA, {}, 4, 2),
    (
        "RANK and WORLD_SIZE exported by hand under srun: SLURM_LOCALID",
        {**SRUN, "RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "gpu02", "MASTER_PORT": "29500"},
        {},
        4,
        1,
    ),
    ("torchrun", {"RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}, {}, 4, 2),
]


@pytest.mark.parametrize("env, extra, gpus, index", [c[1:] for c in LAUNCHES], ids=[c[0] for c in LAUNCHES])
def test_each_launcher_hands_the_rank_its_own_gpu(
    env: dict[str, str], extra: dict[str, str], gpus: int, index: int, fake_cuda: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_cuda.count = gpus
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    launch = detect({**env, "MASTER_ADDR": "gpu02"}, scontrol=False)
    assert NcclBackend().select_device(launch) == torch.device("cuda", index)
    assert fake_cuda.bound == [torch.device("cuda", index)]


def test_a_rank_whose_launcher_gives_no_local_rank_asks_for_one(fake_cuda: Any) -> None:
    """RANK and WORLD_SIZE by hand on a host of a multi-host job: rank 6 is no GPU index."""
    launch = detect({"RANK": "6", "WORLD_SIZE": "8", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"})
    assert launch.local_rank is None
    with pytest.raises(UserError, match="set LOCAL_RANK"):
        NcclBackend().select_device(launch)
    fake_cuda.count = 1  # with one visible GPU there is nothing to choose
    assert NcclBackend().select_device(launch) == torch.device("cuda", 0)


def test_the_restriction_is_read_from_cuda_visible_devices(fake_cuda: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda.count = 1
    with pytest.raises(UserError, match="2 ranks on this host would share its one GPU"):
        bind_own_gpu(1, 2, "nccl")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert bind_own_gpu(1, 2, "nccl") == torch.device("cuda", 0)
    assert fake_cuda.bound == [torch.device("cuda", 0)]


def test_two_ranks_on_one_gpu_are_named_when_nccl_finds_them(fake_cuda: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks restricted to a GPU each may still have been given the same one: NCCL refuses at init."""
    fake_cuda.count = 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")

    def init_process_group(**kwargs: Any) -> None:
        raise torch.distributed.DistBackendError(
            "NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage, NCCL version 2.21.5\nncclInvalidUsage: "
            "This usually reflects invalid usage of NCCL library.\nLast error:\n"
            "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"
        )

    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    with pytest.raises(UserError) as caught:
        NcclBackend().init(60, Launch("torchrun", 1, 2, 1, 2, 0, "127.0.0.1", 29500))
    message = caught.value.format_message()
    assert message.startswith("rank 1: NCCL found two ranks on one GPU") and "\n" not in message


def test_other_init_errors_are_left_to_the_runner(fake_cuda: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def init_process_group(**kwargs: Any) -> None:
        raise RuntimeError("connection refused")

    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    with pytest.raises(RuntimeError, match="connection refused"):
        NcclBackend().init(60, Launch("torchrun", 0, 2, 0, 2, 0, "127.0.0.1", 29500))


class FakeHorovod:
    """hvd as HorovodBackend.init uses it: rank 1 of 4, two per host."""

    def __init__(self, nccl: bool, local_size: int = 2) -> None:
        self.nccl, self._local_size = nccl, local_size

    def init(self) -> None:
        pass

    def rank(self) -> int:
        return 3

    def size(self) -> int:
        return 4

    def local_rank(self) -> int:
        return 1

    def local_size(self) -> int:
        return self._local_size

    def cross_rank(self) -> int:
        return 1

    def nccl_built(self) -> int:
        return 2181 if self.nccl else 0  # Horovod answers with NCCL's version, 0 without


HOROVODRUN = Launch("horovodrun", 3, 4, 1, 2, 1)


@pytest.fixture
def fake_horovod_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What HorovodBackend.init would otherwise set in this test process (its thread count too)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "60")


@pytest.mark.parametrize(
    "nccl, gpus, device",
    [(True, 4, torch.device("cuda", 1)), (False, 4, torch.device("cpu")), (True, 0, torch.device("cpu"))],
    ids=["built with NCCL: the local rank's GPU", "Gloo only: host memory", "no GPU: host memory"],
)
def test_horovod_ranks_take_their_own_gpu_only_where_nccl_moves_gpu_tensors(
    nccl: bool,
    gpus: int,
    device: torch.device,
    fake_cuda: Any,
    fake_horovod_env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_cuda.count = gpus
    monkeypatch.setattr(horovod_backend, "import_horovod", lambda: FakeHorovod(nccl))
    backend = horovod_backend.HorovodBackend()
    backend.init(60, HOROVODRUN)
    assert backend.device == device
    assert horovod_backend.horovod_on_gpus() is (device.type == "cuda")


def test_horovod_ranks_never_share_a_gpu(
    fake_cuda: Any, fake_horovod_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuda:local_rank % device_count put two ranks on one GPU, which NCCL refuses at the first collective."""
    fake_cuda.count = 2
    monkeypatch.setattr(horovod_backend, "import_horovod", lambda: FakeHorovod(True, local_size=4))
    with pytest.raises(UserError, match="--backend horovod needs one GPU per rank, but 4 ranks on this host"):
        horovod_backend.HorovodBackend().init(60, HOROVODRUN)
    assert fake_cuda.bound == []
