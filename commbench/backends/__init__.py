"""The backend registry: one BackendInfo line per transport, holding every fact about it that is
needed before one of its ranks runs.

Adding a backend is its module (a Backend subclass) plus one line here: its name, where its class
lives, what `commbench list` and `--backend`'s help say, how to tell cheaply whether it can run
here, what it copies inside its calls (memory estimates), whether each local rank takes a GPU, who
starts its ranks and which launchers may. Nothing here imports torch, so `commbench list` and
`--help` stay fast; what loads later is named by import path and loaded when it is needed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.backends import copies
from commbench.backends.copies import Copies
from commbench.errors import UserError
from commbench.lazy import resolve

if TYPE_CHECKING:
    from commbench.backends.base import Backend

    Spawn = Callable[..., int]  # commbench's spawner: spawn(cfg, nproc, rank_env=None) -> exit code


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def torch_missing() -> str | None:
    if _package_dir("torch") is None:
        return "torch is not installed (pip install torch)"
    return None


def cuda_missing() -> str | None:
    """Why CUDA cannot be used, read from torch/version.py and /dev, without importing torch."""
    if (reason := torch_missing()) is not None:
        return reason
    version_py = _package_dir("torch") / "version.py"
    text = version_py.read_text() if version_py.exists() else ""
    if re.search(r"^cuda\s*(?::[^=]*)?=\s*None", text, re.M):
        return "this torch is a CPU build (no CUDA)"
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every GPU"
    if not Path("/dev/nvidiactl").exists():
        return "no NVIDIA GPU is visible on this machine"
    return None


def horovod_missing() -> str | None:
    """Why Horovod cannot be used: not installed, or installed without its compiled torch extension."""
    if (reason := torch_missing()) is not None:
        return reason
    package = _package_dir("horovod")
    if package is None:
        return "Horovod is not installed (bash scripts/install-horovod.sh)"
    # A pure-Python install (the build skipped PyTorch) has no extension module: name it now, not at init.
    if not any((package / "torch").glob("mpi_lib_v2*.so")):
        return "this Horovod was built without PyTorch support (rebuild: bash scripts/install-horovod.sh)"
    return None


HOROVOD_LAUNCH_HINT = (
    "--backend horovod needs ranks started by horovodrun or by commbench itself, not torchrun, srun or plain mpirun: use "
    "`horovodrun -np N --gloo commbench sweep --backend horovod ...` or `commbench sweep --backend horovod --nproc N`"
)


def never() -> bool:
    return False


def always() -> bool:
    return True


def horovod_on_gpus() -> bool:
    """Horovod built with NCCL where CUDA works takes a GPU per rank; without NCCL it moves host
    tensors through Gloo. Loads Horovod (and torch) only where CUDA is usable."""
    if cuda_missing() is not None:
        return False
    from commbench.backends import horovod

    return horovod.horovod_on_gpus()


@dataclass(frozen=True)
class BackendInfo:
    """A transport's facts, known before any of its ranks runs.

    spawner: None when commbench's own spawner starts local ranks (torch's env:// rendezvous on
    loopback); else "module:function" taking (cfg, nproc, spawn) that prepares what the transport's
    ranks need (Horovod's rendezvous server) and calls spawn(cfg, nproc, rank_env=...), commbench's
    spawner, which it is handed so that it imports nothing of the launcher's. launchers: the
    launcher kinds (commbench.launch.env.KINDS) whose ranks it can run, None for every kind; a
    rank under another is refused with launch_hint.
    """

    name: str
    target: str  # "module:Class" of its Backend subclass
    summary: str  # `commbench list` and --backend's help
    missing: Callable[[], str | None]  # why it cannot run here, or None; cheap and torch-free
    copies: Copies  # what it allocates inside its calls (commbench.backends.copies): no default, so none is forgotten
    gpu_per_rank: Callable[[], bool] = never  # whether each local rank takes a GPU of its own
    interface_env: str | None = None  # the variable that names its network interface (provenance)
    spawner: str | None = None
    launchers: tuple[str, ...] | None = None
    launch_hint: str = ""
    # Device memory it allocates outside torch's allocator, after the memory check, per communicator
    # a rank joins (a --group run joins two): a reservation, not a measurement.
    communicator_bytes: int = 0
    shares_gpus: bool = False  # whether its local ranks may share a GPU (else one GPU per rank)
    places_tensors: bool = False  # whether --device chooses where its tensors live (else it places them)

    def load(self) -> type[Backend]:
        """The Backend subclass (imports its module, and torch)."""
        return resolve(self.target)

    def spawn(self, cfg: Any, nproc: int, spawn: Spawn) -> int:
        """Start nproc local ranks with this transport's spawner, or with `spawn` itself (cfg: the
        run's SweepConfig, which this layer passes on without reading, so it names no run/ type)."""
        return spawn(cfg, nproc) if self.spawner is None else resolve(self.spawner)(cfg, nproc, spawn)

    def launcher_error(self, kind: str) -> str | None:
        """Why a rank started by this launcher kind cannot run this transport, or None."""
        return None if self.launchers is None or kind in self.launchers else self.launch_hint


BACKENDS: dict[str, BackendInfo] = {
    info.name: info
    for info in (
        BackendInfo(
            "gloo",
            "commbench.backends.gloo:GlooBackend",
            "torch.distributed over Gloo (CPU tensors)",
            torch_missing,
            copies.gloo,
            interface_env="GLOO_SOCKET_IFNAME",
            shares_gpus=True,
            places_tensors=True,
        ),
        BackendInfo(
            "nccl",
            "commbench.backends.nccl:NcclBackend",
            "torch.distributed over NCCL (one GPU per rank)",
            cuda_missing,
            copies.nccl,
            gpu_per_rank=always,
            interface_env="NCCL_SOCKET_IFNAME",
            # its channels' send/receive buffers (NCCL_BUFFSIZE, 4 MiB, per channel and peer link)
            # and, on NVLink-switch machines, the NVLS multicast buffers
            communicator_bytes=1 << 30,
        ),
        BackendInfo(
            "horovod",
            "commbench.backends.horovod:HorovodBackend",
            "Horovod (horovod.torch; Gloo on CPU, NCCL when built with it)",
            horovod_missing,
            copies.horovod,
            gpu_per_rank=horovod_on_gpus,
            interface_env="HOROVOD_GLOO_IFACE",
            spawner="commbench.launch.horovod:spawn_horovod",
            launchers=("horovodrun",),
            launch_hint=HOROVOD_LAUNCH_HINT,
        ),
    )
}


def copies_of(backend: str) -> Copies:
    """The copies function of a backend by name; none for a name this registry does not hold."""
    info = BACKENDS.get(backend)
    return copies.no_copies if info is None else info.copies


def backends_help() -> str:
    """--backend's help: the registered backends and the default."""
    return f"{', '.join(BACKENDS)} (default: nccl when a GPU is usable, else gloo)."


def default_backend() -> str:
    """nccl when a GPU can be used, else gloo."""
    return "nccl" if cuda_missing() is None else "gloo"


def check_backend(name: str) -> BackendInfo:
    """The backend's entry, or a one-line error saying what to do."""
    info = BACKENDS.get(name)
    if info is None:
        raise UserError(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    if (reason := info.missing()) is not None:
        raise UserError(f"backend {name!r} cannot run here: {reason}; use --backend gloo or see `commbench list`")
    return info


def load_backend(name: str) -> type[Backend]:
    return check_backend(name).load()
