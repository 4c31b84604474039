"""Which GPU a rank uses: one rule for every transport that puts one rank on one GPU (nccl, and
Horovod built with NCCL). Pure: the caller reads the counts, so the rule is tested without a GPU.

A rank uses its local rank's GPU among those it sees, so every rank of a host has its own. Two
launches break the naive "cuda:LOCAL_RANK":

- one GPU bound per task (`srun --gpus-per-task=1`, or CUDA_VISIBLE_DEVICES set per rank by a
  wrapper): each rank sees only its own GPU, as device 0, whatever its local rank;
- more ranks on a host than GPUs: two ranks would share a GPU, which NCCL refuses at its first
  collective ("Duplicate GPU detected") after every rank has waited in the rendezvous.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from commbench.errors import UserError

if TYPE_CHECKING:
    import torch


def cuda_index(local_rank: int | None, visible: int, local_ranks: int | None, restricted: bool, backend: str) -> int:
    """The CUDA device index this rank uses, or a one-line UserError saying what to change.

    local_rank: this rank's index on its host, from the launcher (None when it does not say);
    visible: torch.cuda.device_count(); local_ranks: ranks on this host (None when unknown);
    restricted: CUDA_VISIBLE_DEVICES is set, so a launcher may have given each rank its own GPU.
    """
    per_rank = f"--backend {backend} needs one GPU per rank"
    if visible < 1:
        raise UserError(f"{per_rank} and this rank sees none; use --backend gloo, or check CUDA_VISIBLE_DEVICES")
    if visible == 1:
        # One visible GPU is this rank's own when a launcher restricted each rank to one (every
        # rank then sees its GPU as device 0); unrestricted, the host's ranks would all share it.
        if local_ranks is not None and local_ranks > 1 and not restricted:
            raise _shared(per_rank, local_ranks, visible)
        return 0
    if local_rank is None:
        raise UserError(
            f"{per_rank}, but the launcher does not say which local rank this is, so it cannot tell which of "
            f"the {visible} visible GPUs is its own: set LOCAL_RANK, or CUDA_VISIBLE_DEVICES to one GPU per rank"
        )
    if local_rank >= visible or (local_ranks is not None and local_ranks > visible):
        raise _shared(per_rank, max(local_rank + 1, local_ranks or 0), visible)
    return local_rank


def _shared(per_rank: str, ranks: int, visible: int) -> UserError:
    gpus = "its one GPU" if visible == 1 else f"its {visible} GPUs"
    return UserError(
        f"{per_rank}, but {ranks} ranks on this host would share {gpus}: start at most {visible} "
        "per host (--nproc, torchrun --nproc_per_node, srun --ntasks-per-node, mpirun -npernode)"
    )


def bind_own_gpu(local_rank: int | None, local_ranks: int | None, backend: str) -> torch.device:
    """This rank's GPU (cuda_index with the live counts), made the current device."""
    import torch

    restricted = bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
    device = torch.device("cuda", cuda_index(local_rank, torch.cuda.device_count(), local_ranks, restricted, backend))
    torch.cuda.set_device(device)
    return device
