"""The backend registry. Availability is judged without importing torch, so `commbench list` stays fast."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.errors import UserError

if TYPE_CHECKING:
    from commbench.backends.base import Backend


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


@dataclass(frozen=True)
class BackendInfo:
    """A transport: where its code lives and how to tell, cheaply, whether it can run here."""

    name: str
    target: str
    summary: str
    missing: Callable[[], str | None]


BACKENDS: dict[str, BackendInfo] = {
    info.name: info
    for info in (
        BackendInfo(
            "gloo", "commbench.backends.gloo:GlooBackend", "torch.distributed over Gloo (CPU tensors)", torch_missing
        ),
        BackendInfo(
            "nccl",
            "commbench.backends.nccl:NcclBackend",
            "torch.distributed over NCCL (one GPU per rank)",
            cuda_missing,
        ),
        BackendInfo(
            "horovod",
            "commbench.backends.horovod:HorovodBackend",
            "Horovod (horovod.torch; Gloo on CPU, NCCL when built with it)",
            horovod_missing,
        ),
    )
}


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
    module_name, _, attr = check_backend(name).target.partition(":")
    return getattr(importlib.import_module(module_name), attr)
