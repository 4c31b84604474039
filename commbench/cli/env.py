"""`commbench env`: the versions, devices, network and variables a result depends on."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("csv", required=False, type=click.Path(path_type=Path))
@click.option("--backend", default=None, help="The backend whose interface to show (default: as a sweep chooses).")
def env(csv: Path | None, backend: str | None) -> None:
    """Print this host's record as a run records it (torch, NCCL, CUDA and driver, GPUs, CPU,
    kernel, the backend's interface and link speed, the NCCL_*/GLOO_*/... variables, nvidia-smi
    topo -m) and what each backend needs; or, given a results CSV, every host of that run (its
    <stem>.env.json) and how they differ."""
    if csv is not None:
        _show_run(csv)
        return
    import torch.distributed as dist

    from commbench.backends import BACKENDS, default_backend
    from commbench.provenance import collect_host, format_record

    record = collect_host(backend or default_backend())
    for key in ("ranks", "backend_version"):  # facts of a run, not of a host on its own
        record.pop(key)
    for line in format_record(record):
        click.echo(line)
    lines = {
        "torch.distributed": "available" if dist.is_available() else "not available",
        "gloo": "built" if dist.is_available() and dist.is_gloo_available() else "not built",
        "horovod": _distribution_version("horovod") or "not installed (bash scripts/install-horovod.sh)",
    }
    for name, info in BACKENDS.items():
        reason = info.missing()
        lines[f"backend {name}"] = "available" if reason is None else f"not available: {reason}"
    for key, value in lines.items():
        click.echo(f"{key:<20} {value}")


def _show_run(csv: Path) -> None:
    """Every host of a run, from the <stem>.env.json its CSV names."""
    from commbench.provenance import env_path, format_record, read_env
    from commbench.results.reader import read_one

    frame = read_one(csv)
    named = [f for f in frame["env_file"].unique() if f]
    path = csv.with_name(named[0]) if named else env_path(csv)
    if not path.exists():
        from commbench.errors import UserError

        raise UserError(f"{csv} has no environment file ({path.name}): it was written before commbench recorded hosts")
    document = read_env(path)
    click.echo(
        f"run {document.get('run_id')}, fingerprint {document.get('fingerprint')}, {len(document['hosts'])} host(s) ({path})"
    )
    for record in document["hosts"]:
        click.echo(f"# host {record.get('host')}")
        for line in format_record(record):
            click.echo(f"  {line}")
    for line in document.get("differences", []):
        click.echo(f"# the hosts differ: {line}")


def _distribution_version(name: str) -> str | None:
    """An installed package's version from its metadata, without importing it (Horovod's import is slow)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
