"""`commbench env`: the versions and devices a result depends on."""

from __future__ import annotations

import platform
import socket

import click


@click.command()
def env() -> None:
    """Print versions of torch, the backends (NCCL when present), CUDA, the devices and the host."""
    import torch
    import torch.distributed as dist

    from commbench import __version__
    from commbench.backends import BACKENDS

    lines = {
        "commbench": __version__,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "torch": torch.__version__,
        "torch.distributed": "available" if dist.is_available() else "not available",
        "gloo": "built" if dist.is_available() and dist.is_gloo_available() else "not built",
        "cuda": torch.version.cuda or "none (CPU build)",
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "not usable (no CUDA)",
        "devices": ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        or f"cpu ({platform.processor() or platform.machine()})",
    }
    lines["horovod"] = _distribution_version("horovod") or "not installed (bash scripts/install-horovod.sh)"
    for name, info in BACKENDS.items():
        reason = info.missing()
        lines[f"backend {name}"] = "available" if reason is None else f"not available: {reason}"
    for key, value in lines.items():
        click.echo(f"{key:<20} {value}")


def _distribution_version(name: str) -> str | None:
    """An installed package's version from its metadata, without importing it (Horovod's import is slow)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
